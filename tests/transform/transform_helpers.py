"""Helpers for the pass tests: typed variables, graph modules from a few lines, running a
module through ``kiln.compile`` + the VM, and checking a scheduled kernel against the
unscheduled one."""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import numpy as np

import kiln
from kiln import ops
from kiln.ir import FunctionBuilder, GraphVar, IRModule, PrimFunc, TensorType
from kiln.ir.evaluator import evaluate
from kiln.ir.graph import Function
from kiln.ir.graph_interp import interpret
from kiln.transform import PassContext
from kiln.transform.graph_util import global_refs

# The tile sizes these tests expect are those of an AVX2 core (16 vector registers of 8
# float32 lanes, two FMA pipes); every CPU the project runs on has AVX2, so kernels scheduled
# for it also run here. Tests of other targets name theirs (test_target_schedules.py).
AVX2 = "llvm -mcpu=haswell"
AVX2_CTX = PassContext(target=AVX2)


def typed(name: str, shape, dtype: str = "float32") -> GraphVar:
    return GraphVar(name, TensorType(tuple(shape), dtype))


def graph_module(params: Sequence[GraphVar], body: Callable, name: str = "main") -> IRModule:
    """A module with one graph function of one dataflow block. ``body(emit, *params)`` binds
    calls with ``emit(op, *args, **attrs)`` (returns the variable) and returns the result:
    an unbound ``ops.call(...)``, which becomes the block's output."""
    fb = FunctionBuilder(list(params))
    with fb.dataflow():
        def emit(op, *args, **attrs):
            return fb.emit(ops.call(op, *args, **attrs))
        gv = fb.emit_output(body(emit, *params))
    return IRModule({name: fb.finish(gv)})


def rand(shape, dtype="float32", seed=0, low=-1.0, high=1.0) -> np.ndarray:
    rng = np.random.default_rng(seed + 31 * len(shape) + sum(shape))
    return rng.uniform(low, high, size=tuple(shape)).astype(dtype)


def inputs_for(mod: IRModule, name: str = "main", seed: int = 0) -> List[np.ndarray]:
    return [rand(p.ty.static_shape(), p.ty.dtype, seed + i) for i, p in enumerate(mod[name].params)]


def reference(mod: IRModule, args, name: str = "main"):
    """The graph interpreter's result (operator numpy references / the tensor-IR evaluator)."""
    return interpret(mod[name], list(args), mod=mod)


def run_vm(mod: IRModule, args, name: str = "main", target: str = AVX2):
    """``mod`` compiled with ``kiln.compile`` for ``target`` and run by the VM; numpy
    result(s)."""
    ex = kiln.compile(mod, target=target)
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    out = vm[name](*[kiln.nd.array(np.ascontiguousarray(a)) for a in args])
    return out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]


def outputs_at_threads(vm, args, threads=(1, 2)) -> List[np.ndarray]:
    """``vm["main"](*args)`` as numpy, once at each thread count (the default restored)."""
    outs = []
    try:
        for t in threads:
            kiln.set_num_threads(t)
            outs.append(vm["main"](*[kiln.nd.array(a) for a in args]).numpy())
    finally:
        kiln.set_num_threads(0)
    return outs


def assert_default_pipeline_matches(mod: IRModule, threads=(1, 2), rtol=1e-4, atol=1e-4):
    """``mod`` through the default pipeline, compiled for the host and run at each of
    ``threads``, equals the graph interpreter's result on ``inputs_for(mod)``."""
    args = inputs_for(mod)
    want = reference(mod, args)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), target="llvm"),
                             kiln.cpu())
    for got in outputs_at_threads(vm, args, threads):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def kernels(mod: IRModule) -> List[str]:
    """Names of the tensor programs the graph functions call (what runs per inference)."""
    names: List[str] = []
    for f in mod.functions.values():
        if isinstance(f, Function):
            for n in global_refs(f):
                if isinstance(mod.functions.get(n), PrimFunc) and n not in names:
                    names.append(n)
    return names


def kernel_calls(mod: IRModule, name: str = "main") -> int:
    """How many call_tir bindings the graph function runs."""
    return sum(1 for b in mod[name].bindings()
               if getattr(b.value, "op", None) == "call_tir")


def param_arrays(func: PrimFunc, seed: int = 0) -> List[np.ndarray]:
    out = []
    for i, p in enumerate(func.params):
        shape = tuple(s.value for s in p.shape)
        out.append(rand(shape, str(np.dtype(p.dtype)), seed + i))
    return out


def check_same_results(original: PrimFunc, scheduled: PrimFunc, evaluator_limit: int = 20000,
                       rtol: float = 1e-4, atol: float = 1e-4) -> None:
    """Run both kernels (compiled with kiln.build; the original also with the reference
    evaluator when small) on the same random arguments; every parameter must agree after."""
    args = param_arrays(original)
    rt_s = kiln.build(IRModule({"main": scheduled}))
    got = [kiln.nd.array(a) for a in args]
    rt_s(*got)
    if sum(a.size for a in args) <= evaluator_limit:
        ref = [a.copy() for a in args]
        evaluate(original, *ref)
    else:
        rt_o = kiln.build(IRModule({"main": original}))
        nd = [kiln.nd.array(a) for a in args]
        rt_o(*nd)
        ref = [x.numpy() for x in nd]
    for k, (g, r) in enumerate(zip(got, ref)):
        np.testing.assert_allclose(g.numpy(), r, rtol=rtol, atol=atol,
                                   err_msg=f"parameter {k} of the scheduled kernel differs")


def only_prim_func(mod: IRModule) -> PrimFunc:
    prims = [f for f in mod.functions.values() if isinstance(f, PrimFunc)]
    assert len(prims) == 1, [k for k, f in mod.functions.items() if isinstance(f, PrimFunc)]
    return prims[0]


def attr(func, key: str, default=None):
    return dict(func.attrs).get(key, default)


Arrays = Dict[str, np.ndarray]
