"""Turn a graph of te tensors into a PrimFunc: one block per compute, in dependency order.

The result has exactly the shape TVM's ``te.create_prim_func`` gives, so schedules written
for one read the same on the other::

    for i, j, k in T.grid(M, N, K):
        with T.block("C"):
            vi = T.axis.spatial(M, i); vj = T.axis.spatial(N, j); vk = T.axis.reduce(K, k)
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""
from __future__ import annotations

from typing import Dict, List, Sequence

from ..ir.analysis import infer_access_regions
from ..ir.expr import Buffer, BufferLoad, IntImm, Range, Var, is_const_int
from ..ir.function import PrimFunc, root_realize
from ..ir.functor import collect, transform
from ..ir.stmt import Block, BlockRealize, BufferStore, For, IfThenElse, IterVar, seq
from .tensor import ComputeOp, PlaceholderOp, Reduce, ReduceAxis, Tensor, TensorLoad


def create_prim_func(args: Sequence, name: str = "main") -> PrimFunc:
    """A PrimFunc computing the listed tensors; its parameters are ``args`` in order (tensors
    become Buffers, ``te.var`` scalars stay scalar parameters).

    Every placeholder the outputs depend on must be in ``args``. Computed tensors that are not
    in ``args`` become scratch buffers (``alloc_buffer``) of the root block.

    >>> from kiln import te
    >>> A = te.placeholder((8,), "float32", name="A")
    >>> B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    >>> func = te.create_prim_func([A, B])
    >>> func.root_block.body.body.block.name_hint
    'B'
    """
    del name  # functions are named by the IRModule that holds them
    tensors = [a for a in args if isinstance(a, Tensor)]
    for a in args:
        if not isinstance(a, (Tensor, Var)):
            raise TypeError(f"create_prim_func: arguments must be te tensors or te.var scalars, "
                            f"got {type(a).__name__} {a!r}")
    if len({id(t) for t in tensors}) != len(tensors):
        raise ValueError("create_prim_func: a tensor appears twice in the argument list")
    order = _topo_order(tensors)
    arg_ids = {id(t) for t in tensors}
    for t, consumer in order:
        if isinstance(t.op, PlaceholderOp) and id(t) not in arg_ids:
            raise ValueError(f"create_prim_func: placeholder {t.name!r} is read by compute "
                             f"{consumer!r} but is not in the argument list; add it to the arguments")

    names = _Names()
    buffers: Dict[int, Buffer] = {}
    for t in tensors + [t for t, _ in order if id(t) not in arg_ids]:
        buffers[id(t)] = Buffer(names.take(t.name), t.shape, t.dtype)
    block_names = _Names()
    nests = [_block_nest(t, buffers, block_names.take(t.op.name))
             for t, _ in order if isinstance(t.op, ComputeOp)]
    allocs = [buffers[id(t)] for t, _ in order
              if isinstance(t.op, ComputeOp) and id(t) not in arg_ids]
    params = [buffers[id(a)] if isinstance(a, Tensor) else a for a in args]
    body = seq(*nests) if nests else None
    if body is None:
        raise ValueError("create_prim_func: nothing to compute (no te.compute among the arguments)")
    return PrimFunc(tuple(params), root_realize(body, allocs))


class _Names:
    """Hands out unique names: ``C``, then ``C_1``, ``C_2``..."""

    def __init__(self):
        self.used = set()

    def take(self, name: str) -> str:
        out, n = name, 0
        while out in self.used:
            n += 1
            out = f"{name}_{n}"
        self.used.add(out)
        return out


def _topo_order(outputs: List[Tensor]):
    """All tensors the outputs depend on, producers before consumers, each paired with the
    name of one compute that reads it (for error messages)."""
    order, done = [], set()

    def visit(t: Tensor, consumer: str) -> None:
        stack = [(t, consumer, False)]
        while stack:
            cur, cons, expanded = stack.pop()
            if id(cur) in done:
                continue
            if expanded:
                done.add(id(cur))
                order.append((cur, cons))
                continue
            stack.append((cur, cons, True))
            for inp in reversed(cur.op.input_tensors):
                if id(inp) not in done:
                    stack.append((inp, cur.op.name, False))
    for t in outputs:
        visit(t, t.name)
    return order


def _block_nest(t: Tensor, buffers: Dict[int, Buffer], block_name: str):
    op: ComputeOp = t.op
    out = buffers[id(t)]
    loops, iters, bindings, vmap = [], [], [], {}
    for ax, extent in zip(op.axis, t.shape):
        lv, bv = Var(ax.name, ax.dtype), Var("v" + ax.name, ax.dtype)
        loops.append((lv, extent))
        iters.append(IterVar(bv, Range(IntImm(0, extent.dtype), extent), "spatial"))
        bindings.append(lv)
        vmap[ax] = bv
    body = op.body
    reduce_axes = body.axis if isinstance(body, Reduce) else ()
    if len({id(a) for a in reduce_axes}) != len(reduce_axes):
        raise ValueError(f"compute {op.name!r}: a reduction axis is listed twice")
    for ax in reduce_axes:
        lv, bv = Var(ax.name, ax.dtype), Var("v" + ax.name, ax.dtype)
        loops.append((lv, ax.dom.extent))
        iters.append(IterVar(bv, ax.dom, "reduce"))
        # Loops start at 0 (what schedule primitives expect); the binding adds the offset.
        bindings.append(lv if is_const_int(ax.dom.min, 0) else lv + ax.dom.min)
        vmap[ax] = bv

    def lower(e):
        def post(n):
            if isinstance(n, Var):
                return vmap.get(n)
            if isinstance(n, TensorLoad):
                return BufferLoad(buffers[id(n.tensor)], n.indices)
            return None
        e = transform(e, post)
        stray = [a for a in collect(e, ReduceAxis)]
        if stray:
            raise ValueError(f"compute {op.name!r} uses reduction axis {stray[0].name!r} outside a "
                             f"reduction over it; pass it in axis= of te.sum/te.max/te.min")
        return e

    idx = tuple(bv.var for bv in iters[:len(op.axis)])
    init = None
    if isinstance(body, Reduce):
        src = lower(body.source)
        update = BufferStore(out, body.combine(out[idx], src), idx)
        stmt = update if body.condition is None else IfThenElse(lower(body.condition), update)
        init = BufferStore(out, lower(body.init), idx)
    else:
        stmt = BufferStore(out, lower(body), idx)
    reads, writes = infer_access_regions(stmt, iters, init)
    # As TVM's create_prim_func: the reduction's read of its own output is implied by the write.
    reads = tuple(r for r in reads if r.buffer is not out)
    block = Block(block_name, tuple(iters), reads, writes, stmt, init,
                  annotations=op.attrs)
    nest = BlockRealize(tuple(bindings), IntImm(1, "bool"), block)
    for lv, extent in reversed(loops):
        nest = For(lv, IntImm(0, extent.dtype), extent, "serial", nest)
    return nest
