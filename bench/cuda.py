"""Kiln on an NVIDIA GPU (issue 19): whole models through the device VM, and a 4096^3 float32
matmul through the shared-memory tiled rule against torch's CUDA matmul (cuBLAS).

    .venv/bin/python bench/cuda.py            # needs a GPU and its driver; torch with CUDA for
                                              # the matmul baseline (else that row is skipped)

Prints a Markdown table (milliseconds per call, the best of 10 after warm-up, each call waited
for) to paste into bench/RESULTS.md with the GPU's name. Models: the zoo's MLP, ResNet-18 and
GPT-2-style decoder (tests/onnx_models/onnx_model_zoo.py) with their weights bound, compiled
with get_pipeline("default", target="cuda"); each output is checked against onnxruntime first.
"""
from __future__ import annotations

import pathlib
import sys
import time

import numpy as np

import kiln
from kiln.runtime import cuda_device

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "onnx_models"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from harness import table  # noqa: E402


def _best_ms(fn, repeat=10, warmup=2) -> float:
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def model_row(name: str, tmp: pathlib.Path) -> dict:
    """One zoo model: compile for cuda, check against onnxruntime at 1e-3, time the VM call."""
    import onnx
    import onnx_model_zoo as zoo
    gpu = kiln.cuda(0)
    path = zoo.export(name, str(tmp / f"{name}.onnx"))
    mod, params = kiln.frontend.from_onnx(onnx.load(path))
    mod = kiln.transform.bind_params("main", params)(mod)
    t = time.perf_counter()
    ex = kiln.compile(kiln.get_pipeline("default", target="cuda")(mod), target="cuda")
    compile_s = time.perf_counter() - t
    vm = kiln.VirtualMachine(ex, gpu)
    inputs = zoo.example_inputs(name)
    args = [kiln.nd.array(v, gpu) for v in inputs.values()]
    out = vm["main"](*args)
    got = [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
    for g, w in zip(got, zoo.ort_session(path).run(None, inputs)):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-3)
    return {"what": name, "kiln ms": f"{_best_ms(lambda: vm['main'](*args)):.3f}",
            "kernels": len(ex.spec.cuda.entries), "compile s": f"{compile_s:.1f}", "baseline ms": "",
            "TFLOP/s": ""}


def matmul_row(n: int = 4096) -> dict:
    """C = A @ B, n^3, Kiln's tiled rule vs torch.matmul on the same GPU."""
    from kiln import te
    from kiln.codegen.cuda.schedule import schedule_for_gpu
    from kiln.ir import IRModule
    gpu = kiln.cuda(0)
    A, B = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    rt = kiln.build(IRModule({"main": schedule_for_gpu(te.create_prim_func([A, B, C]))}), "cuda")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype("float32") for _ in range(2))
    da, db, dc = kiln.nd.array(a, gpu), kiln.nd.array(b, gpu), kiln.nd.empty((n, n), "float32", gpu)
    ms = _best_ms(lambda: rt(da, db, dc), repeat=5, warmup=1)
    row = {"what": f"matmul {n}^3 (gpu_matmul_tiles)", "kiln ms": f"{ms:.3f}", "kernels": 1,
           "compile s": "", "baseline ms": "(torch without CUDA)"}
    try:
        import torch
        if torch.cuda.is_available():
            ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()

            def torch_mm():
                torch.matmul(ta, tb)
                torch.cuda.synchronize()
            row["baseline ms"] = f"{_best_ms(torch_mm):.3f} (torch.matmul)"
            np.testing.assert_allclose(dc.numpy()[:64, :64], (ta @ tb).cpu().numpy()[:64, :64],
                                       rtol=1e-3, atol=1e-2)
    except ImportError:
        pass
    row["TFLOP/s"] = f"{2 * n ** 3 / (ms * 1e-3) / 1e12:.2f}"
    return row


def main():
    import tempfile
    if not cuda_device.is_available(0):
        sys.exit("bench/cuda.py needs an NVIDIA GPU and its driver (libcuda.so.1)")
    print(f"GPU: {cuda_device.device_name(0)}")
    with tempfile.TemporaryDirectory() as tmp:
        rows = [model_row(name, pathlib.Path(tmp)) for name in ("mlp", "resnet18", "gpt2")]
    rows.append(matmul_row())
    print(table(rows))


if __name__ == "__main__":
    main()
