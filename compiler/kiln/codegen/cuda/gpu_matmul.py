"""The shared-memory tiled matmul rule, ``gpu_matmul_tiles``: for a float32 block
``C[b.., i, j] += X[.., i, .., k] * Y[.., j, .., k]`` (matmul, dense, batch_matmul; X read
without j, Y without i) whose i, j and k extents are constants divisible by 16::

    for b in blockIdx.z:                        (batch loops, fused, when there are any)
      for i_0 in blockIdx.y: for j_0 in blockIdx.x:
        for i_1 in threadIdx.y(16): for j_1 in threadIdx.x(16):
          for k_0 in range(K / 16):
            X_shared[16 x 16] <- X     each thread copies one element: its copy loop bound to
            Y_shared[16 x 16] <- Y     threadIdx.x (X) or threadIdx.y (Y); barriers around
            for k_1 in range(16): C_local += X_shared[i_1, k_1] * Y_shared[k_1, j_1]
          C[...] = C_local             (the accumulator stays in a register)

so each element of X and Y is read from global memory once per 16x16 tile of C instead of
once per output. The CUDA lowering compacts the shared tiles per thread block and places the
barriers (``prepare.py``). The copy loops sit inside the thread loops of the same axes; the
schedule primitives refuse to bind a loop nested in one of its own axis, so the rule binds
them on the IR: each is the cooperative copy of one tile (``KernelLowerer`` reads the thread
index again for it).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from ...ir import Add, BufferLoad, BufferStore, For, Mul, PrimFunc, Var, post_order_visit, transform

TILE = 16
MAX_GRID_Z = 65535


def _vars(e) -> set:
    out = set()
    post_order_visit(e, lambda n: out.add(n) if isinstance(n, Var) else None)
    return out


def matmul_shape(realize, fors: List[For]) -> Optional[Tuple[int, int, int]]:
    """``(read index of X, read index of Y, number of batch loops)`` when the block of
    ``realize`` in the loops ``fors`` is a matmul the rule takes (module docstring), else None."""
    block = realize.block
    body = block.body
    if (block.init is None or not isinstance(body, BufferStore) or body.buffer.dtype != "float32"
            or not isinstance(body.value, Add)):
        return None
    acc, prod = body.value.a, body.value.b
    if not isinstance(acc, BufferLoad):
        acc, prod = prod, acc
    if (not isinstance(acc, BufferLoad) or acc.buffer is not body.buffer or not isinstance(prod, Mul)
            or not all(isinstance(x, BufferLoad) for x in (prod.a, prod.b))):
        return None
    if any(f.kind != "serial" for f in fors) or len(fors) < 3:
        return None
    kinds = {iv.var: iv.kind for iv in block.iter_vars}
    loop_kind = []
    for f in fors:
        used = {kinds[iv.var] for iv, v in zip(block.iter_vars, realize.iter_values) if f.loop_var in _vars(v)}
        if len(used) != 1:
            return None
        loop_kind.append(used.pop())
    if loop_kind[-1] == "spatial" or loop_kind[:-1] != ["spatial"] * (len(fors) - 1):
        return None
    fi, fj, fk = fors[-3:]
    extents = [getattr(f.extent, "value", None) for f in fors]
    if not all(isinstance(n, int) for n in extents) or any(n % TILE for n in extents[-3:]):
        return None
    batch = 1
    for n in extents[:-3]:
        batch *= n
    if batch > MAX_GRID_Z:
        return None
    # Which operand is X (rows: no j) and which Y (columns: no i), through the block's bindings.
    binding = {iv.var: v for iv, v in zip(block.iter_vars, realize.iter_values)}

    def loops_of(load):
        out = set()
        for idx in load.indices:
            for v in _vars(idx):
                out |= _vars(binding.get(v, v))
        return out
    x, y = prod.a, prod.b
    if fi.loop_var in loops_of(y) and fj.loop_var in loops_of(x):
        x, y = y, x
    if fj.loop_var in loops_of(x) or fi.loop_var in loops_of(y) or x.buffer is y.buffer:
        return None
    reads = [r.buffer for r in block.reads]
    if reads.count(x.buffer) != 1 or reads.count(y.buffer) != 1:
        return None
    return reads.index(x.buffer), reads.index(y.buffer), len(fors) - 3


def schedule_matmul(sch, blk, found) -> dict:
    """Apply the rule to ``blk`` (``found`` from ``matmul_shape``); returns the copy loops to bind
    on the IR (loop var -> thread axis). Raises ScheduleError where a primitive refuses."""
    from ...schedule.state import ScheduleError
    x_read, y_read, n_batch = found
    loops = sch.get_loops(blk)
    batch, (i, j, k) = loops[:n_batch], loops[n_batch:]
    bi, ti = sch.split(i, factors=[None, TILE])
    bj, tj = sch.split(j, factors=[None, TILE])
    ko, ki = sch.split(k, factors=[None, TILE])
    sch.reorder(bi, bj, ti, tj, ko, ki)
    if batch:
        sch.bind(sch.fuse(*batch) if len(batch) > 1 else batch[0], "blockIdx.z")
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    acc = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(acc, tj)
    # cache_read adds to the block's reads in place: take both copies before moving either.
    xs = sch.cache_read(blk, x_read, "shared")
    ys = sch.cache_read(blk, y_read, "shared")
    copies = {}
    for copy, axis in ((xs, "threadIdx.x"), (ys, "threadIdx.y")):
        sch.compute_at(copy, ko)
        inner = sch.get_loops(copy)[len(sch.get_loops(blk)) - 1:]   # the copy's own loops
        f = sch._loop(inner[-1])[0] if len(inner) == 1 else None
        if f is None or getattr(f.extent, "value", None) != TILE:
            raise ScheduleError("the tile copy is not one loop of 16")
        copies[f.loop_var] = axis
    return copies


def bind_copies(func: PrimFunc, copies: dict) -> PrimFunc:
    """The tile-copy loops of ``copies`` (loop var -> thread axis) bound on the IR."""
    def post(n):
        if isinstance(n, For) and n.loop_var in copies:
            return For(n.loop_var, n.min, n.extent, "thread_binding", n.body, copies[n.loop_var],
                       n.annotations)
        return None
    return func.with_body(transform(func.body, post))
