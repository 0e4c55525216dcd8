"""Lowering of a warp reduction: a ``threadIdx.x`` loop of 32 lanes annotated
``kiln.cuda.warp_reduce`` (made by ``gpu_rules``) whose body only updates one element
``C[idx] = C[idx] op x`` (op: sum, max or min)::

    C[idx] = c0                                  # the reduction's init, just before (optional)
    for lane in T.thread_binding(32, "threadIdx.x", annotations={"kiln.cuda.warp_reduce": "sum"}):
        for ko in range(K // 32): C[idx] = C[idx] + x(ko * 32 + lane)

becomes, in every lane: ``acc = identity; for ko: acc = acc op x``; then five butterfly
shuffles (``llvm.nvvm.shfl.sync.bfly.f32``, offsets 16, 8, 4, 2, 1: every lane ends with the
combination of all 32), and lane 0 stores ``C[idx] = c0 op acc`` (or ``C[idx] op acc`` without
an init before the loop). All 32 lanes reach the shuffles: the loop is the whole thread block
and the guards inside it close before them.
"""
from __future__ import annotations

from llvmlite import ir

from ...ir import (Add, Buffer, BufferLoad, BufferStore, EQ, FloatImm, IntImm, Max, Min, Var,
                   post_order_visit, structural_equal, transform)
from ...ir.stmt import For
from .. import cgutils as cg
from ..errors import CodegenError

WARP_REDUCE = "kiln.cuda.warp_reduce"
_COMBINE = {"sum": Add, "max": Max, "min": Min}
_IDENTITY = {"sum": 0.0, "max": float("-inf"), "min": float("inf")}
FULL_MASK = 0xFFFFFFFF


def is_warp_loop(s) -> bool:
    """A loop the CUDA lowering turns into a warp reduction."""
    return isinstance(s, For) and s.kind == "thread_binding" and WARP_REDUCE in dict(s.annotations)


def _target(loop: For, label: str):
    """(buffer, indices) of the one element the loop's body updates."""
    stores = []
    post_order_visit(loop.body, lambda n: stores.append(n) if isinstance(n, BufferStore) else None)
    if not stores:
        raise CodegenError(f"'{label}': warp-reduction loop '{loop.loop_var.name}' stores nothing")
    buf, idx = stores[0].buffer, stores[0].indices
    for st in stores:
        if st.buffer is not buf or not all(structural_equal(a, b) for a, b in zip(st.indices, idx)):
            raise CodegenError(f"'{label}': warp-reduction loop '{loop.loop_var.name}' updates more "
                               "than one element")
    used = set()
    for i in idx:
        post_order_visit(i, lambda n: used.add(n) if isinstance(n, Var) else None)
    if loop.loop_var in used:
        raise CodegenError(f"'{label}': warp-reduction loop '{loop.loop_var.name}': each lane "
                           "would update its own element")
    return buf, idx


def _shuffle_reduce(kl, v, op: str):
    """Every lane's ``v`` combined over the warp (butterfly: all lanes get the result)."""
    b = kl.b
    shfl = cg.declare(b.module, "llvm.nvvm.shfl.sync.bfly.f32", cg.F32,
                      [cg.I32, cg.F32, cg.I32, cg.I32])
    name = {"max": "llvm.maxnum.f32", "min": "llvm.minnum.f32"}.get(op)
    for offset in (16, 8, 4, 2, 1):
        other = b.call(shfl, [ir.Constant(cg.I32, FULL_MASK), v, cg.I32(offset), cg.I32(31)])
        if op == "sum":
            v = b.fadd(v, other)
        else:
            v = b.call(cg.declare(b.module, name, cg.F32, [cg.F32, cg.F32]), [v, other])
    return v


def lower_warp_loop(kl, loop: For, init) -> bool:
    """Lower ``loop`` (see the module docstring) with ``kl`` (a ``KernelLowerer``); ``init``: the
    statement just before it, taken as the reduction's init when it stores the same element.
    Returns whether ``init`` was used (else the caller lowers it as usual)."""
    op = dict(loop.annotations)[WARP_REDUCE]
    if op not in _COMBINE or kl.plan.block != (32, 1, 1) or loop.thread_binding != "threadIdx.x":
        raise CodegenError(f"'{kl.label}': warp-reduction loop '{loop.loop_var.name}' needs one "
                           f"warp (32 lanes on threadIdx.x) and sum, max or min, got {op!r} and "
                           f"a block of {kl.plan.block}")
    buf, idx = _target(loop, kl.label)
    if buf.dtype != "float32":
        raise CodegenError(f"'{kl.label}': warp reductions take float32, '{buf.name}' is {buf.dtype}")
    use_init = (init is not None and init.buffer is buf
                and all(structural_equal(a, b) for a, b in zip(init.indices, idx)))
    acc = Buffer(f"{buf.name}_lane", (IntImm(1, "int64"),), buf.dtype, "local")
    kl.alloc(acc)
    zero = (IntImm(0, "int64"),)

    def to_acc(n):
        if isinstance(n, BufferLoad) and n.buffer is buf:
            return BufferLoad(acc, zero)
        if isinstance(n, BufferStore) and n.buffer is buf:
            return BufferStore(acc, n.value, zero)
        return None
    kl.stmt(BufferStore(acc, FloatImm(_IDENTITY[op], buf.dtype), zero))
    lane = kl.thread_index("threadIdx.x", loop.loop_var.name)
    kl.vars[loop.loop_var] = kl._iarith("add", kl.scalar_index(loop.min), lane, "int64")
    kl.stmt(transform(loop.body, to_acc))
    total = _shuffle_reduce(kl, kl.value(BufferLoad(acc, zero)), op)
    kl.b.store(total, kl.bufs[acc].ptr)
    start = init.value if use_init else BufferLoad(buf, idx)
    final = BufferStore(buf, _COMBINE[op](start, BufferLoad(acc, zero)), idx)
    kl.guard(kl.value(EQ(loop.loop_var, IntImm(0, "int64"))), lambda: kl.stmt(final))
    kl.vars.pop(loop.loop_var, None)
    return use_init
