"""Graph functions: dataflow over whole tensors (DESIGN.md, "graph functions").

A ``Function`` takes ``GraphVar`` parameters, runs ``BindingBlock``s of ``Binding``s
(``var = value``), and returns an expression. Values are operator calls (``Call`` with an op
name from ``kiln.ops``), ``call_tir`` into a tensor program of the module, ``call_dps_packed``
into an external function registered by name, constants, tuples. Every value carries its
type: ``TensorType(shape, dtype)`` (dimensions may be symbolic tensor-IR ``Var``s such as
``n``) or ``TupleType``.

Builtin call ops (all other op names are operators of ``kiln.ops``):

- ``Call("call_tir", (GlobalVar("f"), Tuple(args)), ty=out_type)``: allocate the output(s) of
  ``out_type`` and run the PrimFunc ``f`` on ``args`` + outputs (destination-passing style).
- ``Call("call_dps_packed", (ExternFunc("env.relu"), Tuple(args)), ty=out_type)``: the same
  with an external function looked up by name at VM init.
- ``Call("call_if", (cond, GlobalVar("then_f"), GlobalVar("else_f"), Tuple(args)), ty=out_type)``:
  call graph function ``then_f`` on ``args`` if the one-element tensor ``cond`` is nonzero, else
  ``else_f``; both take ``args`` and return ``out_type`` (control flow: ONNX ``If``).

>>> x = GraphVar("x", TensorType((1, 784), "float32"))
>>> x.ty.shape[1].value
784
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple as TupleT, Union

import numpy as np

from . import dtype as dt
from .expr import IntImm, Node, PrimExpr, convert


# ---- types ---------------------------------------------------------------------------------
class Type(Node):
    __slots__ = ()


@dataclass(frozen=True, eq=False, repr=False)
class TensorType(Type):
    """A tensor of ``dtype`` with ``shape`` (a tuple of PrimExprs; ``None`` = unknown rank)."""
    shape: Optional[TupleT[PrimExpr, ...]]
    dtype: str = "float32"

    def __post_init__(self):
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(convert(s) if not isinstance(s, PrimExpr) else s
                                                    for s in self.shape))
        dt.check(self.dtype)

    @property
    def ndim(self) -> int:
        return -1 if self.shape is None else len(self.shape)

    def static_shape(self) -> Optional[TupleT[int, ...]]:
        """The shape as ints, or None if some dimension is symbolic."""
        if self.shape is None or not all(isinstance(s, IntImm) for s in self.shape):
            return None
        return tuple(s.value for s in self.shape)


@dataclass(frozen=True, eq=False, repr=False)
class TupleType(Type):
    fields: TupleT[Type, ...]

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))


# ---- expressions ---------------------------------------------------------------------------
class GraphExpr(Node):
    __slots__ = ()
    ty: Optional[Type]


@dataclass(frozen=True, eq=False, repr=False)
class GraphVar(GraphExpr):
    """A graph variable (parameter or bound value). Compared by identity, like tensor ``Var``."""
    name: str
    ty: Type

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, repr=False)
class Constant(GraphExpr):
    """A constant tensor (weights after ``bind_params``, folded values)."""
    data: np.ndarray
    ty: Type = None  # type: ignore[assignment]

    def __post_init__(self):
        arr = np.asarray(self.data)
        # A read-only view (or a C-ordered copy): the caller's array stays writable, and 0-d
        # data stays 0-d (np.ascontiguousarray would make it 1-d).
        arr = arr.view() if arr.flags.c_contiguous else arr.copy(order="C")
        arr.setflags(write=False)
        object.__setattr__(self, "data", arr)
        if self.ty is None:
            object.__setattr__(self, "ty", TensorType(arr.shape, dt.from_numpy(arr.dtype)))


@dataclass(frozen=True, eq=False, repr=False)
class GlobalVar(GraphExpr):
    """A reference to a function of the module, by name."""
    name: str
    ty: Optional[Type] = None


@dataclass(frozen=True, eq=False, repr=False)
class ExternFunc(GraphExpr):
    """An external function, registered by name with the runtime (``kiln.register_func``)."""
    name: str
    ty: Optional[Type] = None


@dataclass(frozen=True, eq=False, repr=False)
class Tuple(GraphExpr):
    fields: TupleT[GraphExpr, ...]
    ty: Type = None  # type: ignore[assignment]

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))
        if self.ty is None:
            object.__setattr__(self, "ty", TupleType(tuple(f.ty for f in self.fields)))


@dataclass(frozen=True, eq=False, repr=False)
class TupleGetItem(GraphExpr):
    tuple_value: GraphExpr
    index: int
    ty: Type = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.ty is None:
            tt = self.tuple_value.ty
            if not isinstance(tt, TupleType) or not 0 <= self.index < len(tt.fields):
                raise TypeError(f"cannot take item {self.index} of a value of type {tt!r}")
            object.__setattr__(self, "ty", tt.fields[self.index])


Attrs = TupleT[TupleT[str, Any], ...]


def make_attrs(attrs: Union[dict, Attrs, None]) -> Attrs:
    """Attributes as a sorted tuple of (name, value) pairs with hashable values (lists become
    tuples), so that calls compare and hash structurally."""
    if not attrs:
        return ()
    items = attrs.items() if isinstance(attrs, dict) else attrs

    def freeze(v):
        if isinstance(v, (list, tuple)):
            return tuple(freeze(x) for x in v)
        if isinstance(v, np.generic):
            return v.item()
        return v
    return tuple(sorted((k, freeze(v)) for k, v in items))


@dataclass(frozen=True, eq=False, repr=False)
class Call(GraphExpr):
    """``op(*args, **attrs)`` with result type ``ty``. Build operator calls with
    ``kiln.ops.call(name, *args, **attrs)``, which infers ``ty``."""
    op: str
    args: TupleT[GraphExpr, ...]
    attrs: Attrs = ()
    ty: Optional[Type] = None

    def __post_init__(self):
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "attrs", make_attrs(self.attrs))

    def attr(self, name: str, default=None):
        for k, v in self.attrs:
            if k == name:
                return v
        return default


# Call ops that are not operators of kiln.ops.
BUILTIN_OPS = ("call_tir", "call_dps_packed", "call_if", "call_packed")


def call_tir(func: Union[str, GlobalVar], args, out_ty: Type) -> Call:
    gv = func if isinstance(func, GlobalVar) else GlobalVar(func)
    return Call("call_tir", (gv, args if isinstance(args, Tuple) else Tuple(tuple(args))), (), out_ty)


def call_dps_packed(name: Union[str, ExternFunc], args, out_ty: Type) -> Call:
    ef = name if isinstance(name, ExternFunc) else ExternFunc(name)
    return Call("call_dps_packed", (ef, args if isinstance(args, Tuple) else Tuple(tuple(args))), (), out_ty)


def call_packed(name: Union[str, ExternFunc], args, out_ty: Type) -> Call:
    """A registered external function that *returns* its result (of type ``out_ty``), which it
    allocates itself: the string operators (docs/strings.md), whose output sizes depend on the
    data. Like ``call_dps_packed`` it is never folded, merged or dropped."""
    ef = name if isinstance(name, ExternFunc) else ExternFunc(name)
    return Call("call_packed", (ef, args if isinstance(args, Tuple) else Tuple(tuple(args))), (), out_ty)


def call_if(cond: GraphExpr, then_func: Union[str, GlobalVar], else_func: Union[str, GlobalVar],
            args, out_ty: Type) -> Call:
    """``then_func(*args)`` if ``cond`` (a one-element bool or integer tensor) is nonzero, else
    ``else_func(*args)``; both are graph functions of the module returning ``out_ty``.

    >>> c = GraphVar("c", TensorType((), "bool"))
    >>> call_if(c, "f_then", "f_else", [c], TensorType((), "bool")).args[1].name
    'f_then'
    """
    gvs = tuple(f if isinstance(f, GlobalVar) else GlobalVar(f) for f in (then_func, else_func))
    return Call("call_if", (cond, *gvs, args if isinstance(args, Tuple) else Tuple(tuple(args))), (), out_ty)


# ---- bindings and functions ----------------------------------------------------------------
@dataclass(frozen=True, eq=False, repr=False)
class Binding(Node):
    var: GraphVar
    value: GraphExpr


@dataclass(frozen=True, eq=False, repr=False)
class BindingBlock(Node):
    """Bindings in order. A dataflow block (``with R.dataflow():``) is pure and side-effect
    free; only its ``outputs`` (``R.output(...)``) are visible after it."""
    bindings: TupleT[Binding, ...]
    dataflow: bool = True
    outputs: TupleT[GraphVar, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "bindings", tuple(self.bindings))
        object.__setattr__(self, "outputs", tuple(self.outputs))


@dataclass(frozen=True, eq=False, repr=False)
class Function(Node):
    """A graph function: ``params``, ``blocks`` of bindings, and the returned expression."""
    params: TupleT[GraphVar, ...]
    blocks: TupleT[BindingBlock, ...]
    body: GraphExpr
    attrs: Attrs = ()

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "blocks", tuple(self.blocks))
        object.__setattr__(self, "attrs", make_attrs(self.attrs))

    @property
    def ret_type(self) -> Optional[Type]:
        return self.body.ty

    def bindings(self):
        """Every binding of every block, in order."""
        for b in self.blocks:
            yield from b.bindings

    def attr(self, name: str, default=None):
        for k, v in self.attrs:
            if k == name:
                return v
        return default
