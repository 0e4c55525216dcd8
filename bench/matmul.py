"""float32 matmul C = A @ B through Kiln's "default" pipeline, against numpy in the same process.

Two ways a matmul reaches Kiln, both measured:

- ``const B`` — B is a constant (an ONNX initializer, a bound weight): the pipeline packs it
  into panels of the target's tile width once, at compile time, and the kernel streams A past
  them (what ``kiln compile model.onnx`` does);
- ``B input`` — B arrives at run time: the kernel packs one panel at a time itself.

The register tile comes from the target (``kiln.codegen.machine``): 6 x 16 on AVX2, 6 x 64 on
AVX-512. Kiln and numpy (its OpenBLAS, limited to the same thread count with threadpoolctl)
are timed in alternating rounds, medians (``onnx_models.alternate``).
"""
from __future__ import annotations

import numpy as np

import kiln
from kiln import ops
from kiln.ir import FunctionBuilder, GraphVar, IRModule, TensorType
from kiln.ir.graph import Constant

# (M, K, N): the square sizes, then shapes the default tile fits badly (the tuner's targets).
SHAPES = {512: (512, 512, 512), 1024: (1024, 1024, 1024)}
ODD_SHAPES = [(49, 4608, 1000), (1, 4096, 4096), (577, 768, 3072)]


def matmul_module(m: int, k: int, n: int, b=None) -> IRModule:
    """``A @ B`` as a graph function; ``B`` is the constant ``b`` when given, else an input."""
    a_var = GraphVar("A", TensorType((m, k), "float32"))
    params = [a_var]
    if b is None:
        b_arg = GraphVar("B", TensorType((k, n), "float32"))
        params.append(b_arg)
    else:
        b_arg = Constant(b)
    fb = FunctionBuilder(params)
    with fb.dataflow():
        out = fb.emit_output(ops.call("matmul", a_var, b_arg))
    return IRModule({"main": fb.finish(out)})


def _compiled(mod):
    out = kiln.get_pipeline("default")(mod)
    sched = next(dict(f.attrs)["kiln.schedule"] for f in out.functions.values()
                 if "kiln.schedule" in dict(getattr(f, "attrs", ())))
    vm = kiln.VirtualMachine(kiln.compile(out, target="llvm"), kiln.cpu())
    return vm["main"], sched


def run(sizes=(512, 1024), threads=(1, 2), repeat: int = 10, odd: bool = True) -> list[dict]:
    """One row per (shape, B kind, threads)."""
    from threadpoolctl import threadpool_limits

    from onnx_models import alternate

    shapes = [SHAPES.get(s, (s, s, s)) for s in sizes] + (ODD_SHAPES if odd else [])
    rows = []
    rng = np.random.default_rng(0)
    for m, k, n in shapes:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        for kind in ("const B", "B input"):
            f, sched = _compiled(matmul_module(m, k, n, b if kind == "const B" else None))
            args = [kiln.nd.array(a)] + ([kiln.nd.array(b)] if kind == "B input" else [])
            np.testing.assert_allclose(f(*args).numpy(), a @ b, rtol=1e-3, atol=1e-3)
            flops = 2.0 * m * k * n
            per_round = max(3, min(repeat, int(2e9 / flops)))
            for t in threads:
                kiln.set_num_threads(t)
                with threadpool_limits(t):
                    med = alternate({"kiln": lambda: f(*args), "numpy": lambda: a @ b},
                                    per_round=per_round)
                rows.append({"bench": f"matmul {m}x{k}x{n}", "B": kind, "threads": t,
                             "tile": sched.split(",")[0].replace("matmul: ", ""),
                             "kiln_gflops": flops / med["kiln"] / 1e9,
                             "numpy_gflops": flops / med["numpy"] / 1e9})
    kiln.set_num_threads(0)
    return rows
