"""Memory features of a scheduled loop nest for the cost model: bytes touched per loop level,
traffic into each cache level, arithmetic intensity.

For every buffer access (a load, or the store) under a chain of loops, each index is written
as a linear form of the loop variables (block iterators are replaced by their bindings; a
``//`` or ``%`` by a constant shrinks or bounds the span): its *span* over the loops from
level ``d`` inward is ``1 + sum |coefficient| x (extent - 1)``, capped at the dimension's
size, and the access's *footprint* at ``d`` is the product of its spans times the element
size. A loop's footprint is the sum over the buffers its body touches (each buffer counted
once, at its largest access). The *traffic into a cache* of ``size`` bytes, per statement, is
the footprint of the outermost loop level that fits in it times the iterations of the loops
outside that level (the data is loaded once per outer iteration); summed over statements.
This is the reuse model of TVM's per-loop-level "touched bytes" features and of Halide's
cost model, simplified (no associativity, no line granularity).

``access_features(func, l1_bytes, l2_bytes)`` returns, in log2: ``flops`` (arithmetic
operations of the stored values x iterations), ``bytes`` (every access x iterations: traffic
without any cache), ``l1_traffic`` and ``l2_traffic``, ``intensity_l1`` / ``intensity_l2``
(flops per byte brought into L1 / L2), and ``inner_bytes`` (the largest innermost-loop
footprint).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

from ..ir import PrimFunc
from ..ir.expr import (Add, BinaryOp, BufferLoad, Cast, FloorDiv, FloorMod, IntImm, Mul,
                       PrimExpr, Sub, Var)
from ..ir.stmt import Block, BlockRealize, BufferStore, For, IfThenElse, SeqStmt

Linear = Dict[Optional[int], float]      # id(loop var) -> coefficient; None -> constant


def _extent(loop: For) -> int:
    return loop.extent.value if isinstance(loop.extent, IntImm) else 64


def _linear(e: PrimExpr, env: Dict[int, Linear]) -> Optional[Linear]:
    """``e`` as a linear form of loop variables, or None when it is not one."""
    if isinstance(e, IntImm):
        return {None: float(e.value)}
    if isinstance(e, Var):
        return dict(env.get(id(e), {id(e): 1.0}))
    if isinstance(e, Cast):
        return _linear(e.value, env)
    if isinstance(e, (Add, Sub)):
        a, b = _linear(e.a, env), _linear(e.b, env)
        if a is None or b is None:
            return None
        sign = 1.0 if isinstance(e, Add) else -1.0
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0.0) + sign * v
        return out
    if isinstance(e, Mul):
        a, b = _linear(e.a, env), _linear(e.b, env)
        if a is None or b is None:
            return None
        for x, y in ((a, b), (b, a)):
            if set(y) <= {None}:
                c = y.get(None, 0.0)
                return {k: v * c for k, v in x.items()}
        return None
    if isinstance(e, FloorDiv) and isinstance(e.b, IntImm) and e.b.value > 0:
        a = _linear(e.a, env)         # spans shrink by the divisor (approximately)
        return None if a is None else {k: v / e.b.value for k, v in a.items()}
    return None


def _span(e: PrimExpr, env, loops: List[For], dim: int) -> int:
    """How many distinct values index ``e`` takes while ``loops`` run (at most ``dim``)."""
    if isinstance(e, FloorMod) and isinstance(e.b, IntImm) and e.b.value > 0:
        return min(e.b.value, _span(e.a, env, loops, dim), dim)
    lin = _linear(e, env)
    if lin is None:               # not linear: every loop it mentions spans fully
        return min(dim, math.prod(_extent(x) for x in loops if _mentions(e, x.loop_var, env)))
    span = 1.0 + sum(abs(lin.get(id(x.loop_var), 0.0)) * (_extent(x) - 1) for x in loops)
    return max(1, min(dim, int(round(span))))


def _mentions(e, var: Var, env) -> bool:
    if isinstance(e, Var):
        return e is var or id(var) in env.get(id(e), {})
    return any(_mentions(getattr(e, f), var, env) for f in ("a", "b", "value")
               if isinstance(getattr(e, f, None), PrimExpr))


def _loads(e, out: List[BufferLoad]) -> int:
    """Collect the loads of ``e`` (not inside indices) and count its arithmetic operations."""
    if isinstance(e, BufferLoad):
        out.append(e)
        return 0
    ops = 1 if isinstance(e, BinaryOp) else 0
    for f in ("a", "b", "value", "true_value", "false_value", "condition"):
        sub = getattr(e, f, None)
        if isinstance(sub, PrimExpr):
            ops += _loads(sub, out)
    for sub in getattr(e, "args", ()) or ():
        if isinstance(sub, PrimExpr):
            ops += _loads(sub, out)
    return ops


def _dims(buffer) -> List[int]:
    return [d.value if isinstance(d, IntImm) else 1 << 20 for d in buffer.shape]


def _elem_bytes(buffer) -> int:
    digits = "".join(c for c in buffer.dtype if c.isdigit())
    return max(1, int(digits or 32) // 8)


def access_features(func: PrimFunc, l1_bytes: int = 32 << 10,
                    l2_bytes: int = 1 << 20) -> Dict[str, float]:
    """The memory features of ``func`` (module docstring), in log2."""
    stmts: List[Tuple[List[For], List[Tuple[object, tuple]], int, dict]] = []

    def visit(s, stack: List[For], env: Dict[int, Linear]) -> None:
        if isinstance(s, For):
            visit(s.body, stack + [s], env)
        elif isinstance(s, BlockRealize):
            env = dict(env)
            for iv, value in zip(s.block.iter_vars, s.iter_values):
                lin = _linear(value, env)
                if lin is not None:
                    env[id(iv.var)] = lin
            visit(s.block, stack, env)
        elif isinstance(s, Block):
            if s.init is not None:
                visit(s.init, stack, env)
            visit(s.body, stack, env)
        elif isinstance(s, BufferStore):
            loads: List[BufferLoad] = []
            ops = _loads(s.value, loads)
            accesses = [(s.buffer, s.indices)] + [(x.buffer, x.indices) for x in loads]
            stmts.append((stack, accesses, ops, env))
        elif isinstance(s, SeqStmt):
            for c in s.seq:
                visit(c, stack, env)
        elif isinstance(s, IfThenElse):
            for c in (s.then_case, s.else_case):
                if c is not None:
                    visit(c, stack, env)

    visit(func.body, [], {})
    flops = total = 0.0
    sizes = (l1_bytes, l2_bytes)
    traffic = [0.0, 0.0]
    inner = 0.0
    for stack, accesses, ops, env in stmts:
        iters = math.prod(_extent(x) for x in stack) if stack else 1
        flops += ops * iters
        # register (local) buffers are not memory traffic
        accesses = [(b, i) for b, i in accesses if getattr(b, "scope", "global") != "local"]
        total += sum(_elem_bytes(b) for b, _ in accesses) * iters

        def footprint(d: int) -> float:
            per: Dict[int, float] = {}
            for buf, idx in accesses:
                dims = _dims(buf)
                n = math.prod(_span(e, env, stack[d:], dim) for e, dim in zip(idx, dims))
                per[id(buf)] = max(per.get(id(buf), 0.0), float(n * _elem_bytes(buf)))
            return sum(per.values())
        fps = [footprint(d) for d in range(len(stack) + 1)]   # fps[len] = one iteration
        inner = max(inner, fps[max(0, len(stack) - 1)])
        for c, size in enumerate(sizes):
            d = next((d for d in range(len(stack) + 1) if fps[d] <= size), len(stack))
            outer = math.prod(_extent(x) for x in stack[:d]) if d else 1
            traffic[c] += fps[d] * outer
    lg = lambda v: math.log2(max(v, 1.0))   # noqa: E731
    return {"flops": lg(flops), "bytes": lg(total),
            "l1_traffic": lg(traffic[0]), "l2_traffic": lg(traffic[1]),
            "intensity_l1": lg(flops) - lg(traffic[0]),
            "intensity_l2": lg(flops) - lg(traffic[1]), "inner_bytes": lg(inner)}
