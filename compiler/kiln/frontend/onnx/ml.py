"""Operators of the ai.onnx.ml domain over numeric tensors: Binarizer, ArrayFeatureExtractor,
LabelEncoder (int64 and float keys and values) and TreeEnsemble (opset 5), composed from the
operator library.

TreeEnsemble's trees are attributes, so their structure is known at import time: each tree
becomes a nest of ``where`` over its split conditions whose leaves are constant rows (the
leaf's weight at its target, the aggregate's identity elsewhere), and the trees combine by
sum, mean, min or max (a target no leaf reached is 0, as onnxruntime has it; onnx's reference
leaves min/max's start value there).
"""
from __future__ import annotations

import numpy as np

from ...ir import dtype as dt
from .common import Unsupported, converter, dtype, ndim, static_shape

DOMAIN = "ai.onnx.ml"


@converter(f"{DOMAIN}:Binarizer", since=1)
def binarizer(ctx, node, ins, attrs):
    """1 where x > threshold, else 0, in x's dtype."""
    x = ins[0]
    npdt = dt.to_numpy(dtype(x))
    above = ctx.op("greater", x, ctx.const(np.array(attrs.get("threshold", 0.0), npdt)))
    return ctx.op("cast", above, dtype=dtype(x))


@converter(f"{DOMAIN}:ArrayFeatureExtractor", since=1)
def array_feature_extractor(ctx, node, ins, attrs):
    """x[..., indices] with the indices flattened (a 1-D x gives one row, as onnxruntime)."""
    x, idx = ins[0], ins[1]
    if ndim(x) == 1:
        x = ctx.op("expand_dims", x, axis=0)
    n = int(np.prod(static_shape(idx, "the indices")))
    return ctx.op("take", x, ctx.op("reshape", idx, shape=(n,)), axis=ndim(x) - 1)


def _tensor_attr(attrs, name):
    from onnx import numpy_helper
    v = attrs.get(name)
    if v is None:
        return None
    return numpy_helper.to_array(v) if hasattr(v, "data_type") else np.asarray(v)


# TreeEnsemble's node modes and aggregate functions (the ONNX spec's numbering)
_COMPARE = {0: "less_equal", 1: "less", 2: "greater_equal", 3: "greater", 4: "equal", 5: "not_equal"}
_MEMBER = 6
_AGGREGATES = {0: "average", 1: "sum", 2: "min", 3: "max"}


@converter(f"{DOMAIN}:TreeEnsemble", since=5)
def tree_ensemble(ctx, node, ins, attrs):
    """The (N, n_targets) aggregate of every tree's leaf for each row of x (N, features)."""
    x = ins[0]
    if ndim(x) != 2:
        raise Unsupported(f"X must be 2-D (N, features), got rank {ndim(x)}")
    agg = _AGGREGATES.get(attrs.get("aggregate_function", 1))
    if agg is None:
        raise Unsupported(f"aggregate_function={attrs.get('aggregate_function')} is not 0-3")
    if attrs.get("post_transform", 0) != 0:
        raise Unsupported(f"post_transform={attrs['post_transform']} is not supported (NONE is)")
    npdt = dt.to_numpy(dtype(x))
    n_targets = attrs["n_targets"]
    splits, modes = _tensor_attr(attrs, "nodes_splits"), _tensor_attr(attrs, "nodes_modes")
    feats = attrs["nodes_featureids"]
    true_ids, false_ids = attrs["nodes_truenodeids"], attrs["nodes_falsenodeids"]
    true_leaf, false_leaf = attrs["nodes_trueleafs"], attrs["nodes_falseleafs"]
    leaf_w, leaf_t = _tensor_attr(attrs, "leaf_weights"), attrs["leaf_targetids"]
    missing = attrs.get("nodes_missing_value_tracks_true") or [0] * len(feats)
    members = _tensor_attr(attrs, "membership_values")
    member_sets, it = {}, iter([] if members is None else members.tolist())
    big = np.finfo(npdt).max
    identity = {"average": 0, "sum": 0, "min": big, "max": -big}[agg]
    columns = {}

    def column(f):
        if f not in columns:
            columns[f] = ctx.op("strided_slice", x, begin=(f,), end=(f + 1,), axes=(1,))
        return columns[f]

    def condition(i):
        col = column(feats[i])
        if modes[i] == _MEMBER:
            if i not in member_sets:  # the node's members run up to the next NaN, in node order
                vals = []
                for v in it:
                    if np.isnan(v):
                        break
                    vals.append(v)
                member_sets[i] = vals
            c = None
            for v in member_sets[i]:
                e = ctx.op("equal", col, ctx.const(np.array(v, npdt)))
                c = e if c is None else ctx.op("logical_or", c, e)
            if c is None:  # no members: never true
                c = ctx.op("greater", col, ctx.const(np.array(np.inf, npdt)))
        elif int(modes[i]) in _COMPARE:
            c = ctx.op(_COMPARE[int(modes[i])], col, ctx.const(np.array(splits[i], npdt)))
        else:
            raise Unsupported(f"node mode {int(modes[i])} is not 0-6")
        if missing[i]:
            c = ctx.op("logical_or", c, ctx.op("not_equal", col, col))  # NaN goes the true way
        return c

    def leaf(j):
        row = np.full((n_targets,), identity, npdt)
        row[leaf_t[j]] = leaf_w[j]
        return ctx.const(row)

    def build(i, is_leaf):
        if is_leaf:
            return leaf(i)
        c = condition(i)  # before the subtrees: members are read in node order
        return ctx.op("where", c, build(true_ids[i], true_leaf[i]), build(false_ids[i], false_leaf[i]))

    n = static_shape(x, "X")[0]
    total = None
    roots = attrs["tree_roots"]
    for r in roots:
        whole_leaf = true_leaf[r] and false_leaf[r] and true_ids[r] == false_ids[r]
        t = ctx.op("broadcast_to", build(r, whole_leaf), shape=(n, n_targets))
        if total is None:
            total = t
        else:
            total = ctx.op({"min": "minimum", "max": "maximum"}.get(agg, "add"), total, t)
    if agg == "average":
        total = ctx.op("divide", total, ctx.const(np.array(len(roots), npdt)))
    elif agg in ("min", "max"):  # a target no tree's leaf reached is 0, as in onnxruntime
        zero = ctx.const(np.array(0, npdt))
        total = ctx.op("where", ctx.op("equal", total, ctx.const(np.array(identity, npdt))), zero, total)
    return total


def _label_table(attrs, kind):
    """The ``keys``/``values`` of a LabelEncoder as a numpy array, or None (strings: None too)."""
    t = _tensor_attr(attrs, f"{kind}_tensor")
    if t is not None:
        return None if t.dtype.kind in "OSU" else t
    for suffix, npdt in (("floats", np.float32), ("int64s", np.int64)):
        if attrs.get(f"{kind}_{suffix}") is not None:
            return np.asarray(attrs[f"{kind}_{suffix}"], npdt)
    return None


@converter(f"{DOMAIN}:LabelEncoder", since=2)
def label_encoder(ctx, node, ins, attrs):
    """Each element of x replaced by the value of the equal key, or by the default; numeric keys
    and values (int64, float), compared all at once: (..., keys). As the spec says, a NaN key
    matches any NaN (onnxruntime and onnx's reference match none) and a repeated key's last
    value wins."""
    x = ins[0]
    keys, values = _label_table(attrs, "keys"), _label_table(attrs, "values")
    if keys is None or values is None:   # strings: the string library (strings.py)
        return _label_encoder_strings(ctx, x, attrs)
    if len(keys) != len(values):
        raise Unsupported(f"{len(keys)} keys but {len(values)} values")
    last = {}  # a repeated key: the last one takes precedence (the spec); NaN keys are one key
    for i, k in enumerate(keys.tolist()):
        last["nan" if k != k else k] = i
    order = sorted(last.values())
    keys, values = keys[order], values[order]
    default = _tensor_attr(attrs, "default_tensor")
    if default is None:
        default = attrs.get("default_float", -0.0) if values.dtype.kind == "f" else attrs.get("default_int64", -1)
    default = np.asarray(default, values.dtype).reshape(())
    kx = keys.astype(dt.to_numpy(dtype(x)))
    hit = ctx.op("equal", ctx.op("expand_dims", x, axis=ndim(x)), ctx.const(kx))      # (..., K)
    if kx.dtype.kind == "f" and np.isnan(kx).any():
        nan_x = ctx.op("expand_dims", ctx.op("not_equal", x, x), axis=ndim(x))
        hit = ctx.op("logical_or", hit, ctx.op("logical_and", nan_x, ctx.const(np.isnan(kx))))
    found = ctx.op("max", ctx.op("cast", hit, dtype="int32"), axis=(ndim(x),))
    # keys are unique, so at most one hit per element: the sum over keys is its value (where,
    # not a product with the hits: an inf value times a miss would be NaN)
    zero = ctx.const(np.zeros((), values.dtype))
    picked = ctx.op("sum", ctx.op("where", hit, ctx.const(values), zero), axis=(ndim(x),))
    return ctx.op("where", ctx.op("cast", found, dtype="bool"), picked, ctx.const(default))


def _label_encoder_strings(ctx, x, attrs):
    """LabelEncoder whose keys or values are strings (``keys_strings``, ``values_strings`` or
    string tensors), with ``default_string`` / ``default_tensor`` / the numeric defaults."""
    from . import strings

    def table(kind):
        t = _tensor_attr(attrs, f"{kind}_tensor")
        if t is not None:
            return strings.text(t).reshape(-1) if t.dtype.kind in "OSU" else t.reshape(-1)
        if attrs.get(f"{kind}_strings") is not None:
            return strings.text(attrs[f"{kind}_strings"]).reshape(-1)
        for suffix, npdt in (("floats", np.float32), ("int64s", np.int64)):
            if attrs.get(f"{kind}_{suffix}") is not None:
                return np.asarray(attrs[f"{kind}_{suffix}"], npdt)
        raise Unsupported(f"LabelEncoder has no {kind}")
    keys, values = table("keys"), table("values")
    if len(keys) != len(values):
        raise Unsupported(f"{len(keys)} keys but {len(values)} values")
    default = _tensor_attr(attrs, "default_tensor")
    if default is not None:
        default = strings.text(default).reshape(-1)[0] if default.dtype.kind in "OSU" else default.reshape(-1)[0]
    elif values.dtype == object:
        default = attrs.get("default_string", "_Unused")
    else:
        default = attrs.get("default_float", -0.0) if values.dtype.kind == "f" else attrs.get("default_int64", -1)
    return strings.label_encoder(ctx, x, keys, values, default)
