"""The operator registry: one ``OpDef`` per operator, holding its shape rule, its tensor
program (as a te compute) and its numpy reference side by side (DESIGN.md: "One definition
per operator"). Frontends build calls with ``call``; legalize turns them into tensor programs
with ``OpDef.compute``; tests check ``compute`` against ``reference``.

>>> x = GraphVar("x", TensorType((2, 3), "float32"))      # doctest: +SKIP
>>> call("relu", x).ty                                     # doctest: +SKIP
TensorType((2, 3), "float32")
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

from ..ir.graph import Call, GraphExpr, Type, make_attrs

# Fusion patterns, from most to least fusable (TVM's OpPatternKind):
#   elemwise   - out[i] = f(in[i]) for inputs of the output's shape
#   broadcast  - like elemwise, inputs broadcast to the output
#   injective  - every output element reads some input elements (reshape, transpose, concat...)
#   reduce     - reduces some axes (sum, max, mean, softmax's parts)
#   out_fusable- a complex op whose output can absorb elementwise consumers (matmul, conv2d)
#   opaque     - not fused
PATTERNS = ("elemwise", "broadcast", "injective", "reduce", "out_fusable", "opaque")


class OpError(ValueError):
    """A call an operator cannot take: wrong number of arguments, shapes or dtypes that do
    not fit, bad attributes. The message names the operator and the shapes."""


@dataclass(frozen=True)
class OpDef:
    """Everything Kiln knows about one operator.

    - ``infer(arg_types, attrs) -> Type``: the result type; raises ``OpError``.
    - ``compute(args, attrs) -> te.Tensor`` (or a list for multi-output ops): the definition as
      tensor expressions over te placeholders of the argument types.
    - ``reference(*arrays, **attrs) -> np.ndarray`` (or a tuple): numpy semantics, the spec.
    - ``pattern``: how the op fuses (see ``PATTERNS``).
    - ``num_args``: exact argument count, or None when variadic (concat).
    - ``tir``: optional ``tir(arg_types, attrs, out_type) -> PrimFunc`` for operators that te
      cannot express well (topk); when given, legalize uses it instead of ``compute``.
    """
    name: str
    infer: Callable[[List[Type], dict], Type]
    compute: Optional[Callable[[list, dict], object]]
    reference: Callable[..., object]
    pattern: str
    num_args: Optional[int] = None
    doc: str = ""
    tir: Optional[Callable] = None


_OPS: Dict[str, OpDef] = {}


def register(name: str, *, infer, compute=None, reference, pattern: str,
             num_args: Optional[int] = None, doc: str = "", tir=None) -> OpDef:
    """Register an operator; a second registration of the same name is an error."""
    if pattern not in PATTERNS:
        raise ValueError(f"operator {name!r}: unknown pattern {pattern!r}; expected one of {PATTERNS}")
    if name in _OPS:
        raise ValueError(f"operator {name!r} is registered twice")
    if compute is None and tir is None:
        raise ValueError(f"operator {name!r} needs a te compute or a tir builder")
    op = OpDef(name, infer, compute, reference, pattern, num_args, doc, tir)
    _OPS[name] = op
    return op


def get(name: str) -> OpDef:
    _load_all()
    try:
        return _OPS[name]
    except KeyError:
        raise OpError(f"unknown operator {name!r}") from None


def list_ops() -> List[str]:
    _load_all()
    return sorted(_OPS)


def call(name: str, *args: GraphExpr, **attrs) -> Call:
    """A typed call of operator ``name``: checks the arguments and infers the result type.

    Raises ``OpError`` naming the operator and the argument shapes when they do not fit.
    """
    op = get(name)
    if op.num_args is not None and len(args) != op.num_args:
        raise OpError(f"{name}: expected {op.num_args} argument(s), got {len(args)}")
    frozen = make_attrs(attrs)
    ty = op.infer([a.ty for a in args], dict(frozen))
    return Call(name, tuple(args), frozen, ty)


def _load_all() -> None:
    # Operator families register themselves on import; import them all once.
    from . import _families  # noqa: F401

