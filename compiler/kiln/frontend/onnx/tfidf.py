"""ONNX TfIdfVectorizer over integer tokens, composed from the operator library.

The pool of n-grams is an attribute, so the import knows every n-gram: for each gram size n
and skip distance d (1 + 0..max_skip_count; unigrams only at d = 1, as the spec's reference
counts them once), the n strided slices x[j d : L - (n - 1 - j) d] are compared at once with
all the pool's n-grams of that size ((N, W, grams) per position j), AND-ed over j and summed
over the W start positions. A constant matrix then maps the grams onto ``ngram_indexes``,
weighting each by its ``weights`` entry for IDF (count > 0) and TFIDF (count), as the spec and
onnxruntime do (onnx's reference indexes the weights by output slot instead).
"""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Unsupported, converter, dtype, ndim, static_shape


def _pool_grams(attrs):
    """[(n, grams (k, n) int64, first gram's ordinal)] for each size in [min, max] with grams."""
    pool = attrs.get("pool_int64s")
    if pool is None:
        raise Unsupported("pool_strings (string tokens) is not supported; pool_int64s is")
    pool = np.asarray(pool, np.int64)
    starts = list(attrs["ngram_counts"]) + [len(pool)]
    lo, hi = attrs["min_gram_length"], attrs["max_gram_length"]
    out, ordinal = [], 0
    for i in range(len(starts) - 1):
        n, items = i + 1, pool[starts[i]:starts[i + 1]]
        k = len(items) // n
        if k and lo <= n <= hi:
            out.append((n, items[:k * n].reshape(k, n), ordinal))
        ordinal += k
    return out, ordinal


@converter("TfIdfVectorizer", since=9)
def tfidf_vectorizer(ctx, node, ins, attrs):
    """(N, L) or (L,) integer tokens -> (N, out) or (out,) float32 n-gram weights."""
    x = ins[0]
    if dtype(x) not in ("int32", "int64"):
        raise Unsupported(f"tokens of dtype {dtype(x)} are not supported (int32, int64 are)")
    if ndim(x) not in (1, 2):
        raise Unsupported(f"the input must be [C] or [N, C], got rank {ndim(x)}")
    mode = attrs.get("mode", "TF")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise Unsupported(f"mode={mode!r} is not TF, IDF or TFIDF")
    rows = ctx.op("expand_dims", x, axis=0) if ndim(x) == 1 else x
    n_rows, length = static_shape(rows, "the input")
    indexes = list(attrs["ngram_indexes"])
    out_size = max(indexes) + 1
    sizes, n_grams = _pool_grams(attrs)
    if len(indexes) < n_grams:
        raise Unsupported(f"ngram_indexes has {len(indexes)} entries for {n_grams} pool n-grams")
    skips = attrs.get("max_skip_count", 0) + 1
    weights = attrs.get("weights")
    npdt = dt.to_numpy(dtype(x))
    total = ctx.const(np.zeros((n_rows, out_size), np.float32))
    for n, grams, first in sizes:
        counts = None
        for d in range(1, (skips if n > 1 else 1) + 1):
            width = length - (n - 1) * d
            if width <= 0:
                break
            hit = None
            for j in range(n):
                col = ctx.op("strided_slice", rows, begin=(j * d,), end=(j * d + width,), axes=(1,))
                eq = ctx.op("equal", ctx.op("expand_dims", col, axis=2),
                            ctx.const(grams[:, j].astype(npdt)[None, None, :]))
                hit = eq if hit is None else ctx.op("logical_and", hit, eq)
            c = ctx.op("sum", ctx.op("cast", hit, dtype="float32"), axis=(1,))    # (N, grams)
            counts = c if counts is None else ctx.op("add", counts, c)
        if counts is None:
            continue
        if mode == "IDF":
            counts = ctx.op("cast", ctx.op("greater", counts, ctx.const(np.float32(0))), dtype="float32")
        # gram k of the pool goes to slot ngram_indexes[k], weighted by weights[k] (IDF, TFIDF)
        slots = np.zeros((len(grams), out_size), np.float32)
        ks = first + np.arange(len(grams))
        slots[np.arange(len(grams)), [indexes[k] for k in ks]] = \
            1 if mode == "TF" or not weights else np.asarray(weights, np.float32)[ks]
        total = ctx.op("add", total, ctx.op("matmul", counts, ctx.const(slots)))
    return ctx.op("reshape", total, shape=(out_size,)) if ndim(x) == 1 else total
