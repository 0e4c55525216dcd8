"""One matmul kernel scheduled with fixed decisions, variants alternated in one process against
numpy: how bench/RESULTS.md measures a schedule rule's choice (``ku``, ``kc``, ``mr``, ...).

    .venv/bin/python bench/matmul_decisions.py 197 1536 384 '{"ku": 2}' '{"ku": 1}'
    .venv/bin/python bench/matmul_decisions.py 1024 1024 1024 '{}' --target "llvm -mcpu=haswell" \\
        --b-input --threads 1,2

M K N, then each variant as JSON decisions (``{}``: the rule's defaults; a decision the rule does
not make is ignored). B is a constant (pre-packed, as an ONNX initializer) unless
``--b-input``. Prints GFLOP/s per variant and numpy's, with each variant's decisions and
schedule, after checking every variant against ``A @ B``. For AVX2 code on an AVX-512 host,
numpy's BLAS can be made to run its own AVX2 kernels with ``OPENBLAS_CORETYPE=Haswell`` in the
environment.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kiln  # noqa: E402
from matmul import matmul_module  # noqa: E402
from onnx_models import alternate  # noqa: E402


def variants(m: int, k: int, n: int, fixed: List[Dict], target: str = "llvm",
             b_input: bool = False, seed: int = 0):
    """(name -> zero-argument callable) for each set of ``fixed`` decisions, plus numpy's
    ``a @ b``; the name is the kernel's decisions and schedule. Each variant is checked against
    numpy first."""
    from kiln.schedule.decisions import Decisions
    from kiln.transform import PassContext
    from kiln.transform.default_schedule import schedule_kernel
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    pre = kiln.get_pipeline("default", PassContext(target=target, disabled_passes=("default_schedule",)))(
        matmul_module(m, k, n, None if b_input else b))
    out = {}
    for fx in fixed:
        funcs = dict(pre.functions)
        for name, f in pre.functions.items():   # the product, and a run-time B's pack kernel
            if isinstance(f, kiln.ir.PrimFunc):
                funcs[name] = schedule_kernel(f, PassContext(target=target), Decisions(fixed=fx))
        vm = kiln.VirtualMachine(kiln.compile(kiln.IRModule(funcs, pre.attrs), target=target),
                                 kiln.cpu())
        args = [kiln.nd.array(a)] + ([kiln.nd.array(b)] if b_input else [])
        np.testing.assert_allclose(vm["main"](*args).numpy(), a @ b, rtol=1e-3, atol=1e-2)
        attrs = dict(funcs["matmul"].attrs)
        key = f"{attrs['kiln.decisions']} | {attrs['kiln.schedule']}"
        out[key] = (lambda f=vm["main"], args=args: f(*args))
    out["numpy"] = lambda: a @ b
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("m", type=int)
    p.add_argument("k", type=int)
    p.add_argument("n", type=int)
    p.add_argument("fixed", nargs="*", default=["{}"], help="JSON decisions per variant")
    p.add_argument("--target", default="llvm")
    p.add_argument("--b-input", action="store_true", help="B given at run time, not a constant")
    p.add_argument("--threads", default="1", help="comma-separated thread counts")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    try:
        fixed = [json.loads(v) for v in args.fixed or ["{}"]]
    except json.JSONDecodeError as e:
        p.error(f"a variant is not JSON ({e}): {args.fixed}")
    if not all(isinstance(v, dict) for v in fixed):
        p.error(f"each variant must be a JSON object of decisions, got {args.fixed}")
    from threadpoolctl import threadpool_limits
    fns = variants(args.m, args.k, args.n, fixed, args.target, args.b_input)
    flops = 2.0 * args.m * args.k * args.n
    for t in (int(x) for x in args.threads.split(",")):
        kiln.set_num_threads(t)
        with threadpool_limits(t):
            med = alternate(fns, rounds=args.rounds, per_round=max(3, min(20, int(2e9 / flops))))
        for key, seconds in med.items():
            print(f"threads {t}: {flops / seconds / 1e9:7.1f} GFLOP/s  {key}", flush=True)
    kiln.set_num_threads(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
