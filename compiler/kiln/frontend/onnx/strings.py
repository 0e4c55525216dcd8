"""The ONNX string operators: Equal on strings, StringConcat, RegexFullMatch, StringNormalizer,
StringSplit, and LabelEncoder with string keys or values (docs/strings.md).

Each becomes a ``call_packed`` of a function of the string library (``kiln_strings.*``,
runtime_c/strings/kiln_strings_vm.c), which allocates its result: StringSplit's width and
StringNormalizer's length depend on the data, so those outputs have a fresh symbolic dimension
that only the run fixes. String attributes become string constants; integer ones int64
constants.
"""
from __future__ import annotations

import re

import numpy as np

from ...ir.expr import Var
from ...ir.graph import TensorType, TupleGetItem, TupleType, call_packed
from .common import Unsupported, converter, dtype, ndim

def is_string(e) -> bool:
    return e is not None and getattr(e.ty, "dtype", None) == "string"


def text(values) -> np.ndarray:
    """A numpy ``object`` array of ``str`` (ONNX hands string tensors over as bytes)."""
    arr = np.asarray(values, dtype=object)
    out = np.empty(arr.shape, dtype=object)
    for i, v in enumerate(arr.reshape(-1)):
        out.reshape(-1)[i] = v.decode("utf-8") if isinstance(v, bytes) else str(v)
    return out


def _call(ctx, name, args, out_ty):
    for a in args:
        ctx.used.add(a)
    return ctx.fb.emit(call_packed(f"kiln_strings.{name}", list(args), out_ty))


def _shape(e):
    return tuple(e.ty.shape)


def _broadcast(a, b):
    sa, sb = _shape(a), _shape(b)
    n = max(len(sa), len(sb))
    sa, sb = (1,) * (n - len(sa)) + sa, (1,) * (n - len(sb)) + sb
    out = []
    for x, y in zip(sa, sb):
        if _is_one(x):
            out.append(y)
        elif _is_one(y) or x is y or str(x) == str(y):
            out.append(x)
        else:
            raise Unsupported(f"string shapes {sa} and {sb} do not broadcast")
    return tuple(out)


def _is_one(d) -> bool:
    return getattr(d, "value", d) == 1


def _data_dim(node, what):
    """The symbolic dimension only the run fixes, named after the node's output: ``t_width``."""
    return Var(re.sub(r"\W", "_", f"{node.output[0]}_{what}"), "int64")


def _text_const(ctx, values):
    return ctx.const(text(values))


def _int_const(ctx, v):
    return ctx.const(np.asarray(v, np.int64))


def _require_strings(*es, op):
    for e in es:
        if not is_string(e):
            raise Unsupported(f"{op} takes string inputs, got {dtype(e)}")


def equal(ctx, a, b):
    """Equal on two string tensors (broadcast): bool."""
    _require_strings(a, b, op="Equal")
    return _call(ctx, "equal", (a, b), TensorType(_broadcast(a, b), "bool"))


@converter("StringConcat", since=20)
def string_concat(ctx, node, ins, attrs):
    a, b = ins[0], ins[1]
    _require_strings(a, b, op="StringConcat")
    return _call(ctx, "concat", (a, b), TensorType(_broadcast(a, b), "string"))


@converter("RegexFullMatch", since=20)
def regex_full_match(ctx, node, ins, attrs):
    """RE2 patterns run as POSIX EREs (docs/strings.md says what is refused)."""
    x = ins[0]
    _require_strings(x, op="RegexFullMatch")
    pattern = _text_const(ctx, attrs.get("pattern", ""))
    return _call(ctx, "regex_full_match", (x, pattern), TensorType(_shape(x), "bool"))


@converter("StringNormalizer", since=10)
def string_normalizer(ctx, node, ins, attrs):
    """[C] or [1, C]: case change (ASCII) and stop words removed; the length depends on the data."""
    x = ins[0]
    _require_strings(x, op="StringNormalizer")
    if ndim(x) not in (1, 2):
        raise Unsupported(f"StringNormalizer takes [C] or [1, C], got rank {ndim(x)}")
    action = {"NONE": 0, "LOWER": 1, "UPPER": 2}.get(attrs.get("case_change_action", "NONE"))
    if action is None:
        raise Unsupported(f"case_change_action={attrs.get('case_change_action')!r} (NONE, LOWER, UPPER)")
    if attrs.get("locale") not in (None, "", "en_US", "C"):
        raise Unsupported(f"locale={attrs['locale']!r}: case changes are ASCII only")
    stop = _text_const(ctx, np.array(list(attrs.get("stopwords", [])), dtype=object).reshape(-1))
    n = _data_dim(node, "len")
    out = TensorType((n,) if ndim(x) == 1 else (1, n), "string")
    return _call(ctx, "normalize", (x, stop, _int_const(ctx, action),
                                    _int_const(ctx, int(attrs.get("is_case_sensitive", 0)))), out)


@converter("StringSplit", since=20)
def string_split(ctx, node, ins, attrs):
    """(tokens [..., W] padded with "", token counts); W depends on the data."""
    x = ins[0]
    _require_strings(x, op="StringSplit")
    delim = attrs.get("delimiter") or ""
    maxsplit = attrs.get("maxsplit")
    ty = TupleType((TensorType(_shape(x) + (_data_dim(node, "width"),), "string"), TensorType(_shape(x), "int64")))
    var = _call(ctx, "split", (x, _text_const(ctx, delim), _int_const(ctx, -1 if maxsplit is None else maxsplit)), ty)
    return tuple(ctx.fb.emit(TupleGetItem(var, i)) for i in range(2))


def label_encoder(ctx, x, keys, values, default):
    """LabelEncoder where keys, values or both are strings: the index of each element's key
    (the string library's index for string keys, a comparison with every key for numeric
    ones), then the values gathered by it, the default where there is none."""
    last = {}  # a repeated key: the last one takes precedence (the spec)
    for i, k in enumerate(keys.tolist()):
        last["nan" if k != k else k] = i
    order = sorted(last.values())
    keys, values = keys[order], values[order]
    if keys.dtype == object:
        _require_strings(x, op="LabelEncoder with string keys")
        idx = _call(ctx, "index", (x, _text_const(ctx, keys)), TensorType(_shape(x), "int64"))
    else:
        from ...ir import dtype as dt
        hit = ctx.op("equal", ctx.op("expand_dims", x, axis=ndim(x)), ctx.const(keys.astype(dt.to_numpy(dtype(x)))))
        pos = ctx.op("argmax", ctx.op("cast", hit, dtype="int32"), axis=ndim(x))
        found = ctx.op("max", ctx.op("cast", hit, dtype="int32"), axis=(ndim(x),))
        idx = ctx.op("where", ctx.op("cast", found, dtype="bool"), ctx.op("cast", pos, dtype="int64"),
                     ctx.const(np.asarray(-1, np.int64)))
    if values.dtype == object:
        return _call(ctx, "take", (_text_const(ctx, values), idx, _text_const(ctx, default)),
                     TensorType(_shape(x), "string"))
    safe = ctx.op("maximum", idx, ctx.const(np.asarray(0, np.int64)))
    picked = ctx.op("take", ctx.const(values), safe, axis=0)
    return ctx.op("where", ctx.op("greater_equal", idx, ctx.const(np.asarray(0, np.int64))), picked,
                  ctx.const(np.asarray(default, values.dtype).reshape(())))
