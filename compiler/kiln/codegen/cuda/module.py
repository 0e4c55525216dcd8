"""Tensor programs to PTX, and the artifact that carries it: ``compile_cuda`` -> ``CudaModule``.

>>> cm = compile_cuda(sch.mod, "cuda -arch=sm_80")     # doctest: +SKIP
>>> print(cm.ptx)                                     # .visible .entry main_kernel(...)
>>> cm.save("add_one.kcuda"); CudaModule.load("add_one.kcuda")   # doctest: +SKIP

A ``CudaModule`` holds one PTX text for all kernels, and for each tensor program its
parameters (name, dtype, shape with symbolic dimensions by name), where each symbolic
dimension is read from (parameter, axis), its global scratch buffers (intermediates between
its kernels, allocated in device memory for each call; shapes as JSON expressions), and its
kernels in launch order with their grid (JSON expressions of the dimensions,
``kernels.expr_to_json``) and block sizes. Every kernel takes the data pointers of all the
program's buffer parameters, then of its scratch buffers, then the symbolic dimensions as
int64, in that order.

The saved artifact (``.kcuda``) is ``KILNCUDA`` + u32 format version + u32 length of the JSON
description + the JSON + the PTX text (little-endian); ``kiln.runtime.cuda_device`` loads it.
"""
from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from typing import Dict, List

import llvmlite.binding as llvm
from llvmlite import ir

from ...ir.expr import Buffer, Var
from ...ir.function import IRModule, PrimFunc
from .. import objcompile
from ..errors import CodegenError
from ..lower import ModuleContext
from .kernels import expr_to_json, global_scratch, plan_kernels
from .lower import KernelLowerer, annotate_block_size, declare_kernel
from .prepare import lower_for_cuda
from .target import TRIPLE, CudaTarget, parse_cuda_target

MAGIC = b"KILNCUDA"
FORMAT_VERSION = 1


@dataclass
class CudaModule:
    """Compiled GPU code: ``ptx`` and ``functions`` (name -> description, see module doc)."""
    ptx: str
    functions: Dict[str, dict]
    target: str = "cuda"
    notes: List[str] = field(default_factory=list)

    def kernel_names(self) -> List[str]:
        """Every kernel entry of the PTX, in launch order."""
        return [k["name"] for f in self.functions.values() for k in f["kernels"]]

    def to_bytes(self) -> bytes:
        """The artifact's bytes (see the module docstring)."""
        desc = json.dumps({"target": self.target, "functions": self.functions},
                          sort_keys=True).encode()
        return MAGIC + struct.pack("<II", FORMAT_VERSION, len(desc)) + desc + self.ptx.encode()

    def save(self, path: str) -> None:
        """Write the artifact to ``path``."""
        with open(path, "wb") as f:
            f.write(self.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes, what: str = "CUDA artifact") -> "CudaModule":
        """Read an artifact; ValueError naming what is wrong for anything malformed."""
        head = len(MAGIC) + 8
        if len(data) < head or data[:len(MAGIC)] != MAGIC:
            raise ValueError(f"{what}: not a Kiln CUDA artifact (no {MAGIC.decode()} header)")
        version, n = struct.unpack_from("<II", data, len(MAGIC))
        if version != FORMAT_VERSION:
            raise ValueError(f"{what}: format version {version}, this Kiln reads {FORMAT_VERSION}")
        if head + n > len(data):
            raise ValueError(f"{what}: description of {n} bytes runs past the end "
                             f"({len(data)} bytes)")
        try:
            desc = json.loads(data[head:head + n])
            ptx = data[head + n:].decode()
            return cls(ptx, dict(desc["functions"]), str(desc["target"]))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{what}: corrupt description ({e})") from None

    @classmethod
    def load(cls, path: str) -> "CudaModule":
        """Read the artifact at ``path``."""
        with open(path, "rb") as f:
            return cls.from_bytes(f.read(), path)


def _signature(name: str, func: PrimFunc) -> dict:
    """Parameters and where each symbolic dimension comes from."""
    params, dims = [], {}
    for k, p in enumerate(func.params):
        if not isinstance(p, Buffer):
            raise CodegenError(f"parameter {p!r} of '{name}': the CUDA target takes buffer "
                               "parameters only (scalar parameters are not supported yet)")
        shape = []
        for axis, e in enumerate(p.shape):
            if isinstance(e, Var):
                dims.setdefault(e.name, [k, axis])
                shape.append(e.name)
            elif hasattr(e, "value") and isinstance(e.value, int):
                shape.append(int(e.value))
            else:
                raise CodegenError(f"parameter '{p.name}' of '{name}' axis {axis} has the shape "
                                   f"expression {e}; the CUDA target takes constants or plain "
                                   "symbolic dimensions")
        params.append({"name": p.name, "dtype": p.dtype, "shape": shape})
    return {"params": params, "dims": dims}


def _symbol(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def lower_cuda_module(mod: IRModule, target: CudaTarget):
    """The LLVM module of every PrimFunc's kernels, and the functions' descriptions."""
    module = ir.Module(name="kiln_cuda")
    module.triple = TRIPLE
    module.data_layout = str(_target_machine(target).target_data)
    mctx = ModuleContext(module, target)
    functions = {}
    for name, func in mod.items():
        if not isinstance(func, PrimFunc):
            continue
        sig = _signature(name, func)
        lowered = lower_for_cuda(func)
        scratch = global_scratch(lowered)
        sig["scratch"] = [{"name": b.name, "dtype": b.dtype,
                           "shape": [expr_to_json(e, name) for e in b.shape]} for b in scratch]
        buffers = [p for p in func.params if isinstance(p, Buffer)] + scratch
        dim_vars = {}
        for p in buffers:
            for e in p.shape:
                if isinstance(e, Var):
                    dim_vars.setdefault(e.name, e)
        kernels = []
        for plan in plan_kernels(lowered, _symbol(name)):
            fn = declare_kernel(mctx, plan.name, len(buffers), len(dim_vars))
            kl = KernelLowerer(mctx, fn, name, plan)
            for var, arg in zip(dim_vars.values(), fn.args[len(buffers):]):
                kl.bind_entry_var(var, arg)      # first: buffer strides are computed from them
            for buf, arg in zip(buffers, fn.args):
                kl.bind_buffer(buf, arg)
            kl.stmt(plan.body)
            kl.finish()
            annotate_block_size(module, fn, plan.block)
            kernels.append({"name": plan.name, "block": list(plan.block),
                            "grid": [expr_to_json(g, name) for g in plan.grid]})
        functions[name] = dict(sig, kernels=kernels)
    if not functions:
        raise CodegenError("the module has no tensor program (PrimFunc) to compile for CUDA")
    return module, functions, mctx.notes


def _target_machine(target: CudaTarget):
    objcompile.init_llvm()
    return llvm.Target.from_triple(TRIPLE).create_target_machine(
        cpu=target.arch, features=target.features, opt=3)


def compile_cuda(mod, target="cuda") -> CudaModule:
    """Compile the PrimFuncs of ``mod`` (IRModule, PrimFunc or Schedule) for ``target``
    (``"cuda"``, ``"cuda -arch=sm_80"`` or a ``CudaTarget``) into a ``CudaModule``."""
    from ..emit import as_module
    t = parse_cuda_target(target)
    if t is None:
        raise CodegenError(f"target {target!r} is not a CUDA target (expected 'cuda' or "
                           "'cuda -arch=sm_XY')")
    module, functions, notes = lower_cuda_module(as_module(mod), t)
    try:
        llmod = objcompile.parse(str(module))
    except RuntimeError as e:
        raise CodegenError(f"internal error: CUDA codegen produced invalid LLVM IR: {e}") from None
    tm = _target_machine(t)
    objcompile.optimize(llmod, tm)
    ptx = tm.emit_assembly(llmod)
    # A call LLVM could not inline (a libm function such as float64 tanh) has no definition
    # on the GPU: ptxas or the driver would refuse the module with a less helpful message.
    missing = re.findall(r"^\.extern \.func .*?(\w+)\s*\(", ptx, flags=re.M)
    if missing:
        raise CodegenError(f"the CUDA kernels call {', '.join(sorted(set(missing)))}, which has no "
                           "GPU implementation in Kiln (a float64 tanh/erf, pow, sin or cos)")
    return CudaModule(ptx, functions, str(t), notes)
