"""Einsum, decomposed into diagonals, sums, permutes, reshapes and batched matmuls.

Each operand first loses its repeated labels (a diagonal: multiply by an identity mask, sum
one of the two axes) and the labels no one else needs (summed). Operands then fold left to
right in pairs: labels both share and still need are batch dims, labels both share and no
longer need are contracted, the rest stay on their side, so the pair is one
``(batch, M, K) @ (batch, K, N)`` matmul. A last permute gives the output's label order.
Shapes must be static (the reshapes multiply dims out).
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

from .common import Unsupported, converter, dtype, static_shape

_ELLIPSIS_BASE = 0x100     # ellipsis dim k from the right is the label chr(0x100 + k)


def _expand_term(term: str, rank: int) -> List[str]:
    """A term's labels, its ``...`` spelled out as right-aligned ellipsis labels."""
    if "..." not in term:
        if len(term) != rank:
            raise Unsupported(f"term {term!r} has {len(term)} labels for a {rank}-D input")
        return list(term)
    head, tail = term.split("...")
    n = rank - len(head) - len(tail)
    if n < 0:
        raise Unsupported(f"term {term!r} has more labels than the input's {rank} dims")
    return list(head) + [chr(_ELLIPSIS_BASE + k) for k in range(n - 1, -1, -1)] + list(tail)


def _parse(equation: str, ranks: List[int]) -> Tuple[List[List[str]], List[str]]:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise Unsupported(f"equation {equation!r} has {len(terms)} terms for {len(ranks)} inputs")
    labels = [_expand_term(t, r) for t, r in zip(terms, ranks)]
    ell = sorted({c for ls in labels for c in ls if ord(c) >= _ELLIPSIS_BASE}, reverse=True)
    if arrow:
        out = _expand_term(rhs, len(rhs.replace("...", "")) + len(ell)) if "..." in rhs else list(rhs)
    else:
        # implicit output: the ellipsis dims, then the labels used once, alphabetically
        counts = {}
        for ls in labels:
            for c in ls:
                counts[c] = counts.get(c, 0) + 1
        out = ell + sorted(c for c, n in counts.items() if n == 1 and ord(c) < _ELLIPSIS_BASE)
    return labels, out


def _diagonal(ctx, x, labels):
    """``x`` with each repeated label reduced to its diagonal (one axis per label)."""
    while True:
        dup = next((c for c in labels if labels.count(c) > 1), None)
        if dup is None:
            return x, labels
        p = labels.index(dup)
        q = labels.index(dup, p + 1)
        shp = static_shape(x)
        mask_shape = [shp[k] if k in (p, q) else 1 for k in range(len(shp))]
        eye = np.eye(shp[p], dtype=np.dtype(dtype(x)) if dtype(x) != "bool" else np.bool_)
        x = ctx.op("sum", ctx.op("multiply", x, ctx.const(eye.reshape(mask_shape))), axis=q)
        labels = labels[:q] + labels[q + 1:]


def _sum_out(ctx, x, labels, keep):
    """Sum the axes whose labels are not in ``keep``."""
    axes = tuple(k for k, c in enumerate(labels) if c not in keep)
    if not axes:
        return x, labels
    return ctx.op("sum", x, axis=axes), [c for c in labels if c in keep]


def _sizes(x, labels):
    return dict(zip(labels, static_shape(x)))


def _arrange(ctx, x, labels, groups, sizes):
    """Permute ``x`` to the label order of ``groups`` (lists of labels), broadcast size-1 dims
    to ``sizes`` and reshape to one dim per group."""
    order = [c for g in groups for c in g]
    perm = tuple(labels.index(c) for c in order)
    if perm != tuple(range(len(perm))):
        x = ctx.op("permute_dims", x, axes=perm)
    full = tuple(sizes[c] for c in order)
    if tuple(static_shape(x)) != full:
        x = ctx.op("broadcast_to", x, shape=full)
    return ctx.op("reshape", x, shape=tuple(int(np.prod([sizes[c] for c in g])) for g in groups))


def _pair(ctx, a, la, b, lb, needed):
    """Contract two operands into one whose labels are batch + a-only + b-only."""
    sizes = {}
    for x, ls in ((a, la), (b, lb)):
        for c, s in _sizes(x, ls).items():
            sizes[c] = max(sizes.get(c, 1), s)
    batch = [c for c in la if c in lb and c in needed]
    contract = [c for c in la if c in lb and c not in needed]
    a_only = [c for c in la if c not in lb]
    b_only = [c for c in lb if c not in la]
    a3 = _arrange(ctx, a, la, [batch, a_only, contract], sizes)
    b3 = _arrange(ctx, b, lb, [batch, contract, b_only], sizes)
    y = ctx.op("matmul", a3, b3)
    out = batch + a_only + b_only
    return ctx.op("reshape", y, shape=tuple(sizes[c] for c in out)), out


@converter("Einsum", since=12)
def einsum(ctx, node, ins, attrs):
    """ONNX Einsum (numpy semantics, ``...`` broadcasting, implicit output)."""
    ranks = [len(static_shape(x)) for x in ins]
    terms, out = _parse(attrs["equation"], ranks)
    ops_ = [_diagonal(ctx, x, list(ls)) for x, ls in zip(ins, terms)]
    for k in range(len(ops_)):
        others = {c for j, (_, ls) in enumerate(ops_) if j != k for c in ls}
        ops_[k] = _sum_out(ctx, *ops_[k], keep=set(out) | others)
    x, lx = ops_[0]
    for k in range(1, len(ops_)):
        later = {c for _, ls in ops_[k + 1:] for c in ls} | set(out)
        y, ly = ops_[k]
        x, lx = _sum_out(ctx, x, lx, keep=later | set(ly))
        y, ly = _sum_out(ctx, y, ly, keep=later | set(lx))
        x, lx = _pair(ctx, x, lx, y, ly, later)
    x, lx = _sum_out(ctx, x, lx, keep=set(out))
    missing = [c for c in out if c not in lx]
    if missing:
        raise Unsupported(f"output labels {missing} appear in no input")
    perm = tuple(lx.index(c) for c in out)
    return ctx.op("permute_dims", x, axes=perm) if perm != tuple(range(len(perm))) else x
