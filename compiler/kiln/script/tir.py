"""``T``: the tensor-program script namespace (``from kiln.script import T``).

A script is parsed from its source text, never run, so most names here only mark syntax the
parser knows (``T.block``, ``T.axis.spatial``, ``T.reads``, ``T.grid``, ...); calling them from
Python raises. Three kinds of names do work at run time:

- ``T.prim_func``, the decorator that parses the function it decorates into a ``PrimFunc``;
- ``T.Buffer(shape, dtype)`` (or the older ``T.Buffer[shape, dtype]``), ``T.handle`` (whose
  buffer ``A = T.match_buffer(a, shape, dtype)`` declares in the body) and ``T.int32`` etc. in
  parameter annotations (Python evaluates annotations when it defines the function; with
  symbolic sizes, ``T.Buffer((n, 4))``, put ``from __future__ import annotations`` at the top
  of the file, use ``T.handle`` + ``T.match_buffer``, or use ``kiln.script.parse``);
- the expression builders (``T.exp``, ``T.min``, ``T.Select``, ``T.Cast``, ``T.float32(1)``,
  ...), which build IR from Python too (handy in ``te.compute`` lambdas). The parser calls
  these same builders, so script and Python agree on types.
"""
from __future__ import annotations

import builtins
from typing import Any, Callable, Dict, NamedTuple, Tuple

from ..ir import dtype as _dt
from ..ir import expr as _e
from ..ir.expr import PrimExpr, _literal_like, _promote, const, convert


# ---- decorator and annotations ---------------------------------------------------------------
def prim_func(func=None, *, root: bool = True, name: str | None = None):
    """Parse the decorated function's source into a ``PrimFunc``.

    Inside a class decorated with ``@kiln.script.ir_module`` the function is left as it is: the
    module decorator parses the whole class. ``root=False`` marks a function whose body is not
    wrapped in a root block (lowered programs); ``name`` overrides the function's name in a
    module (for names that are not Python identifiers).
    """
    def decorate(f):
        from .parser import in_class_body, parse_object
        if in_class_body(f):
            f.__kiln_function_kind__ = "T.prim_func"
            return f
        return parse_object(f)
    del root, name  # read from the source by the parser
    return decorate if func is None else decorate(func)


class BufferSpec(NamedTuple):
    """What ``T.Buffer(...)`` evaluates to at run time (the parser reads the source instead)."""
    shape: Tuple[Any, ...]
    dtype: str = "float32"
    scope: str = "global"


class _BufferAnnotation:
    """``T.Buffer``: the parameter annotation ``A: T.Buffer((8, 4), "float32")`` (``scope="local"``
    optional); the older subscript spelling ``T.Buffer[(8, 4), "float32"]`` (or ``T.Buffer[8,
    "float32"]``) is read the same way. Kiln prints the call form."""

    def __call__(self, shape, dtype: str = "float32", scope: str = "global") -> BufferSpec:
        return BufferSpec(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,),
                          _dt.check(dtype), scope)

    def __getitem__(self, key) -> BufferSpec:
        return self(*key) if isinstance(key, tuple) and len(key) == 2 else self(key)

    def __repr__(self):
        return "T.Buffer"


Buffer = _BufferAnnotation()


class _Handle:
    """``T.handle``: the annotation of a parameter whose buffer is declared in the body with
    ``A = T.match_buffer(a, (8,), "float32")``. The parameter then is that buffer; Kiln prints it
    back as ``A: T.Buffer((8,), "float32")``."""

    def __repr__(self):
        return "T.handle"


handle = _Handle()


# ---- expression builders ---------------------------------------------------------------------
def _typed_constructor(dtype: str) -> Callable:
    def make(value=None):
        if value is None:
            raise TypeError(f"T.{dtype}() declares a symbolic size; it only means something "
                            "inside a parsed script (n = T.int32())")
        if isinstance(value, PrimExpr):
            return value.astype(dtype)
        if isinstance(value, str):
            if not _dt.is_float(dtype):
                raise TypeError(f"T.{dtype}({value!r}): only float types take a string")
            value = float(value)
        if _dt.is_bool(dtype):
            return const(builtins.bool(value), "bool")  # T.bool shadows bool here
        return const(value, dtype)
    make.__name__ = dtype
    make.__doc__ = f"A {dtype} constant, ``T.{dtype}(1)``, or a cast of an expression to {dtype}."
    return make


for _name in _dt.SCALAR_DTYPES:
    globals()[_name] = _typed_constructor(_name)
# The names above, for linters: int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32
# float64 bool.


def _pair(a, b):
    """Two operands for a node that does not promote: literals take the other side's type."""
    a_lit, b_lit = not isinstance(a, PrimExpr), not isinstance(b, PrimExpr)
    if a_lit and not b_lit:
        return _literal_like(a, b.dtype), b
    if b_lit and not a_lit:
        return a, _literal_like(b, a.dtype)
    return convert(a), convert(b)


def min(a, b):  # noqa: A001 (shadows builtins.min in this namespace on purpose)
    """``T.min(a, b)``; operands are promoted to one dtype as for ``+``."""
    return _e.Min(*_promote(a, b))


def max(a, b):  # noqa: A001
    """``T.max(a, b)``; operands are promoted to one dtype as for ``+``."""
    return _e.Max(*_promote(a, b))


def floordiv(a, b):
    """Floor division (what ``a // b`` means in script)."""
    return _e.FloorDiv(*_promote(a, b))


def floormod(a, b):
    """Floor modulo (what ``a % b`` means in script)."""
    return _e.FloorMod(*_promote(a, b))


def Select(condition, true_value, false_value, dtype: str | None = None):  # noqa: N802
    """``true_value if condition else false_value`` (both sides may be evaluated)."""
    a, b = _pair(true_value, false_value)
    return _e.Select(convert(condition), a, b, dtype)


def Cast(dtype: str, value):  # noqa: N802
    """Convert ``value`` to ``dtype``: ``T.Cast("float32", i)``."""
    return _e.Cast(_dt.check(dtype), convert(value))


def Not(a):  # noqa: N802
    """Logical not (``not a`` in script)."""
    return _e.Not(convert(a))


def _intrinsic(op: str) -> Callable:
    def make(*args, dtype: str | None = None):
        if len(args) == 2:
            args = _pair(*args)
        return _e.Call(op, tuple(convert(a) for a in args), dtype)
    make.__name__ = op
    make.__doc__ = f"The math intrinsic ``{op}`` (``Call('{op}', ...)``); ``dtype`` defaults to the first argument's."
    return make


def _generic(cls) -> Callable:
    def make(a, b, dtype: str | None = None):
        return cls(convert(a), convert(b), dtype)
    make.__name__ = cls.__name__
    make.__doc__ = (f"``{cls.__name__}(a, b)`` exactly as given: no promotion of operand types "
                    "(the printer uses this form only for nodes the operator syntax cannot express).")
    return make


# ---- syntax markers ------------------------------------------------------------------------
def _marker(name: str, doc: str) -> Callable:
    def marker(*args, **kwargs):
        raise TypeError(f"T.{name} is script syntax: it only means something inside a function "
                        "parsed by @T.prim_func / kiln.script.parse, which reads, not runs, the code")
    marker.__name__ = name.split(".")[-1]
    marker.__doc__ = doc
    return marker


class _Axis:
    """``T.axis.spatial(dom, value)``, ``T.axis.reduce(dom, value)``, ``T.axis.remap(kinds, vars)``."""
    spatial = staticmethod(_marker("axis.spatial", "A spatial block iterator: `vi = T.axis.spatial(8, i)`."))
    reduce = staticmethod(_marker("axis.reduce", "A reduction block iterator: `vk = T.axis.reduce(8, k)`."))
    remap = staticmethod(_marker("axis.remap", 'Iterators bound to loops: `vi, vk = T.axis.remap("SR", [i, k])`.'))


axis = _Axis()
_MARKERS = {
    "block": 'A block: `with T.block("name"):`.',
    "init": "The reduction init of a block: `with T.init():`.",
    "reads": "The regions a block reads: `T.reads(A[vi, 0:16])` (inferred when omitted).",
    "writes": "The regions a block writes: `T.writes(B[vi])` (inferred when omitted).",
    "where": "The predicate of a block: `T.where(i * 4 + j < 10)`.",
    "block_attr": 'Block annotations: `T.block_attr({"key": value})`.',
    "alloc_buffer": 'A scratch buffer: `X = T.alloc_buffer((4, 4), "float32", scope="local")`.',
    "func_attr": 'Function attributes: `T.func_attr({"global_symbol": "main"})`.',
    "match_buffer": 'The buffer of a `T.handle` parameter: `A = T.match_buffer(a, (n, 4), "float32")`.',
    "evaluate": "An expression statement: `T.evaluate(x)`.",
    "grid": "Perfectly nested serial loops: `for i, j in T.grid(4, 8):`.",
    "serial": "A serial loop: `T.serial(n)` or `T.serial(start, stop, annotations={...})`.",
    "parallel": "A parallel loop: `T.parallel(n)`.",
    "vectorized": "A vectorized loop: `T.vectorized(n)`.",
    "unroll": "An unrolled loop: `T.unroll(n)`.",
    "thread_binding": 'A loop bound to a GPU thread axis: `T.thread_binding(n, thread="threadIdx.x")`.',
}
for _name, _doc in _MARKERS.items():
    globals()[_name] = _marker(_name, _doc)

# Expression builders by the name the parser sees after ``T.``.
EXPR_FUNCS: Dict[str, Callable] = {
    "min": min, "max": max, "floordiv": floordiv, "floormod": floormod, "Select": Select,
    "if_then_else": Select, "Cast": Cast, "Not": Not,
    **{op: _intrinsic(op) for op in _e.INTRINSICS},
    **{d: globals()[d] for d in _dt.SCALAR_DTYPES},
    **{cls.__name__: _generic(cls) for cls in (_e.Add, _e.Sub, _e.Mul, _e.Div, _e.FloorDiv,
                                                _e.FloorMod, _e.Min, _e.Max, _e.EQ, _e.NE, _e.LT,
                                                _e.LE, _e.GT, _e.GE, _e.And, _e.Or)},
}
for _name, _fn in EXPR_FUNCS.items():
    globals().setdefault(_name, _fn)
del _name, _doc, _fn
