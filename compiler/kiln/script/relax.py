"""``R``: the graph-function script namespace (``from kiln.script import T, R``).

Like ``T``, a graph function is parsed from its source text, never run, so most names here only
mark syntax the parser knows (``R.dataflow``, ``R.output``, ``R.call_tir``, ``R.const``,
``R.add`` and every other operator of ``kiln.ops``); calling them from Python raises. What does
work at run time:

- ``R.function``, the decorator that parses the function it decorates into a graph
  ``Function`` (inside a ``@kiln.script.ir_module`` class the module decorator parses it);
- ``R.Tensor(shape, dtype)`` and ``R.Tuple(...)``, because Python evaluates parameter and
  return annotations when it defines the function. Symbolic dimensions are strings,
  ``R.Tensor((1, "n"), "float32")`` (so no ``from __future__ import annotations`` is needed).

>>> @kiln.script.ir_module                                        # doctest: +SKIP
... class Net:
...     @R.function
...     def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
...         with R.dataflow():
...             gv = R.relu(x)
...             R.output(gv)
...         return gv
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple as TupleT

from ..ir import dtype as _dt


def function(func=None, *, name: Optional[str] = None):
    """Parse the decorated function's source into a graph ``Function``.

    Inside a class decorated with ``@kiln.script.ir_module`` the function is left as it is: the
    module decorator parses the whole class (so ``Net.linear0`` can name a function defined in
    the same class). ``name`` overrides the function's name in a module.
    """
    def decorate(f):
        from .parser import in_class_body, parse_object
        if in_class_body(f):
            f.__kiln_function_kind__ = "R.function"
            return f
        return parse_object(f)
    del name  # read from the source by the parser
    return decorate if func is None else decorate(func)


class TensorSpec(NamedTuple):
    """What ``R.Tensor(...)`` evaluates to at run time (the parser reads the source instead)."""
    shape: Optional[TupleT[Any, ...]]
    dtype: str = "float32"


class TupleSpec(NamedTuple):
    """What ``R.Tuple(...)`` evaluates to at run time."""
    fields: TupleT[Any, ...]


def Tensor(shape=None, dtype: str = "float32") -> TensorSpec:  # noqa: N802
    """A tensor type: ``R.Tensor((1, "n"), "float32")``; a string dimension is symbolic (one
    variable per name and function); ``R.Tensor(None, "float32")`` has unknown rank."""
    if shape is not None and not isinstance(shape, (tuple, list)):
        shape = (shape,)
    return TensorSpec(None if shape is None else tuple(shape), _dt.check(dtype))


def Tuple(*fields) -> TupleSpec:  # noqa: N802
    """A tuple type: ``R.Tuple(R.Tensor((2,), "float32"), R.Tensor((3,), "int32"))``."""
    return TupleSpec(tuple(fields))


def _marker(name: str, doc: str):
    def marker(*args, **kwargs):
        raise TypeError(f"R.{name} is script syntax: it only means something inside a function "
                        "parsed by @R.function / kiln.script.parse, which reads, not runs, the code")
    marker.__name__ = name.split(".")[-1]
    marker.__doc__ = doc
    return marker


# Names with a meaning of their own; every other R.<name> is an operator of kiln.ops.
BUILTINS = {
    "dataflow": "A dataflow block (pure bindings): `with R.dataflow():`.",
    "output": "The variables a dataflow block exports, its last statement: `R.output(gv0, gv1)`.",
    "func_attr": 'Function attributes, first in the body: `R.func_attr({"global_symbol": "main"})`.',
    "const": ('A constant: `R.const([[1, 2], [3, 4]], "float32")`; a large one is printed as '
              '`R.const(metadata["<key>"])`, with its data kept out of the text.'),
    "call_tir": ("Call a tensor program of the module in destination-passing style: "
                 '`R.call_tir(Net.linear0, (x, w), R.Tensor((1, 128), "float32"))`.'),
    "call_dps_packed": ("Call an external function registered by name: "
                        '`R.call_dps_packed("env.relu", (x,), R.Tensor((1, 128), "float32"))`.'),
    "call_packed": ("Call an external function registered by name that returns its result, which "
                    "it allocates (the string operators, docs/strings.md): "
                    '`R.call_packed("kiln_strings.equal", (a, b), R.Tensor((3,), "bool"))`.'),
    "call_if": ("Call one of two graph functions of the module on the same arguments: "
                '`R.call_if(c, Net.then_f, Net.else_f, (x,), R.Tensor((1, 128), "float32"))` runs '
                "`then_f(x)` if the one-element tensor `c` is nonzero, else `else_f(x)`."),
    "call_op": ('An operator whose name is not a plain identifier: `R.call_op("my-op", x, k=1)`.'),
    "ExternFunc": 'An external function as a value: `R.ExternFunc("env.relu")`.',
}
for _name, _doc in BUILTINS.items():
    globals()[_name] = _marker(_name, _doc)
del _name, _doc


class _OpPath:
    """``R.nn``-style dotted operator names: attribute access builds the dotted name."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _OpPath(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        _marker(self._name, "")()

    def __repr__(self) -> str:
        return f"R.{self._name}"


def __getattr__(name: str):
    # Operators are looked up when the script is parsed, not here: R.<anything> is syntax.
    if name.startswith("__"):
        raise AttributeError(f"module 'kiln.script.R' has no attribute {name!r}")
    return _OpPath(name)
