"""Terse builders of hand-scheduled tensor programs for the codegen tests.

    i0, i1 = Var("i0"), Var("i1")
    body = realize("B", [("S", 100, i0 * 8 + i1)], lambda vi: store(B, A[vi] + 1.0, vi),
                   predicate=i0 * 8 + i1 < 100)
    func = prim_func([A, B], nest([(i0, 13, "parallel"), (i1, 8, "vectorized")], body))
"""
from __future__ import annotations

from kiln.ir import (Block, BlockRealize, Buffer, BufferStore, FloatImm, For, IntImm, IterVar, PrimFunc, Range,
                     Var, root_realize, seq)

_KINDS = {"S": "spatial", "R": "reduce"}


def buf(name, shape, dtype="float32", scope="global"):
    return Buffer(name, tuple(shape), dtype, scope)


def store(buffer, value, *indices):
    return BufferStore(buffer, value, tuple(indices))


def realize(name, axes, body_fn, init_fn=None, allocs=(), predicate=True):
    """A block named ``name`` with iterators ``axes`` = [(kind "S"/"R", extent, binding)];
    ``body_fn(*block_vars)`` (and ``init_fn``) build its statements."""
    ivars = [Var(f"v{name}{k}") for k in range(len(axes))]
    iters = tuple(IterVar(v, Range.from_extent(ext), _KINDS[kind]) for v, (kind, ext, _) in zip(ivars, axes))
    init = init_fn(*ivars) if init_fn is not None else None
    block = Block(name, iters, (), (), body_fn(*ivars), init, tuple(allocs))
    pred = predicate if not isinstance(predicate, bool) else IntImm(int(predicate), "bool")
    return BlockRealize(tuple(v for _, _, v in axes), pred, block)


def nest(loops, body):
    """Wrap ``body`` in loops [(var, extent, kind)] (outermost first); kind may also be
    ("vectorized", ...) style strings: serial, parallel, vectorized, unrolled."""
    for var, extent, kind in reversed(loops):
        body = For(var, 0, extent, kind, body)
    return body


def prim_func(params, body, allocs=()):
    return PrimFunc(tuple(params), root_realize(body, allocs))


def seq_(*stmts):
    return seq(*stmts)


def elementwise(n, inputs, out, expr_fn, structure="serial", factor=8):
    """``out[i] = expr_fn(*[inp[i] for inp in inputs])`` over ``n`` elements, with loops:
    serial | vectorized (one vectorized loop) | split (outer serial, inner vectorized by
    ``factor`` with a tail predicate) | parallel_split (outer parallel) | unrolled (inner
    unrolled by ``factor``)."""
    def body_fn(vi):
        return store(out, expr_fn(*[b[vi] for b in inputs]), vi)
    if structure in ("serial", "vectorized"):
        i = Var("i")
        return prim_func(list(inputs) + [out], nest([(i, n, structure)], realize("E", [("S", n, i)], body_fn)))
    i0, i1 = Var("i0"), Var("i1")
    outer = -(-n // factor)
    inner_kind = "unrolled" if structure == "unrolled" else "vectorized"
    outer_kind = "parallel" if structure == "parallel_split" else "serial"
    idx = i0 * factor + i1
    pred = idx < n if outer * factor != n else True
    loops = nest([(i0, outer, outer_kind), (i1, factor, inner_kind)],
                 realize("E", [("S", n, idx)], body_fn, predicate=pred))
    return prim_func(list(inputs) + [out], loops)


def matmul_tiled(M, N, K, mr=4, nr=16, parallel=True, dtype="float32"):
    """C = A @ B as a register-tiled micro-kernel: an mr x nr accumulator tile in a local
    scratch buffer (zeroed, updated for every k with the rows unrolled and the columns
    vectorized, then stored), the tile loops outside (the outer one parallel)."""
    A, B, C = buf("A", (M, K), dtype), buf("B", (K, N), dtype), buf("C", (M, N), dtype)
    acc = buf("acc", (mr, nr), dtype, "local")
    i0, j0, k, i1, j1 = Var("i0"), Var("j0"), Var("k"), Var("i1"), Var("j1")
    zero = realize("init", [("S", mr, i1), ("S", nr, j1)],
                   lambda a, b: store(acc, FloatImm(0.0, dtype), a, b))
    update = realize("update", [("S", mr, i1), ("S", nr, j1), ("R", K, k)],
                     lambda a, b, r: store(acc, acc[a, b] + A[i0 * mr + a, r] * B[r, j0 * nr + b], a, b))
    out = realize("store", [("S", M, i0 * mr + i1), ("S", N, j0 * nr + j1)],
                  lambda vi, vj: store(C, acc[vi - i0 * mr, vj - j0 * nr], vi, vj))
    tile_body = seq(nest([(i1, mr, "unrolled"), (j1, nr, "vectorized")], zero),
                    nest([(k, K, "serial"), (i1, mr, "unrolled"), (j1, nr, "vectorized")], update),
                    nest([(i1, mr, "unrolled"), (j1, nr, "vectorized")], out))
    tile = realize("tile", [], lambda: tile_body, allocs=[acc])
    loops = nest([(i0, M // mr, "parallel" if parallel else "serial"), (j0, N // nr, "serial")], tile)
    return prim_func([A, B, C], loops)
