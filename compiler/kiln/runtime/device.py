"""Devices, as DLPack (device_type, device_id) pairs."""

from ._base import lib

_NAMES = {lib.kDLCPU: "cpu", lib.kDLCUDA: "cuda", lib.kDLCUDAHost: "cuda_host",
          lib.kDLOpenCL: "opencl", lib.kDLVulkan: "vulkan", lib.kDLMetal: "metal",
          lib.kDLROCM: "rocm", lib.kDLROCMHost: "rocm_host", lib.kDLExtDev: "ext_dev",
          lib.kDLCUDAManaged: "cuda_managed", lib.kDLOneAPI: "oneapi", lib.kDLWebGPU: "webgpu",
          lib.kDLHexagon: "hexagon", lib.kDLMAIA: "maia"}
_TYPES = {name: code for code, name in _NAMES.items()}


class Device:
    """A device: ``Device("cpu", 0)`` or ``Device(1, 0)`` (DLPack device type codes)."""

    __slots__ = ("device_type", "device_id")

    def __init__(self, device_type, device_id=0):
        if isinstance(device_type, str):
            if device_type not in _TYPES:
                raise ValueError(f"unknown device {device_type!r}; known: {', '.join(_TYPES)}")
            device_type = _TYPES[device_type]
        self.device_type = int(device_type)
        self.device_id = int(device_id)

    @property
    def name(self):
        return _NAMES.get(self.device_type, f"device{self.device_type}")

    def __eq__(self, other):
        return (isinstance(other, Device) and self.device_type == other.device_type
                and self.device_id == other.device_id)

    def __hash__(self):
        return hash((self.device_type, self.device_id))

    def __repr__(self):
        return f"{self.name}({self.device_id})"


def cpu(device_id=0):
    """The host CPU."""
    return Device(lib.kDLCPU, device_id)


def cuda(device_id=0):
    """An NVIDIA GPU, ``kiln.cuda(0)``: arrays made on it (``kiln.nd.array(x, kiln.cuda(0))``)
    live in GPU memory, and ``kiln.build(mod, target="cuda")`` runs on it. Naming the device
    needs no GPU; the driver is opened when the first array is made, and without one that
    raises KilnError "no CUDA driver: libcuda.so.1 not found (...)" (see docs/cuda.md)."""
    return Device(lib.kDLCUDA, device_id)
