"""Building graph functions one binding at a time (used by the nn frontend and by passes).

>>> fb = FunctionBuilder([x, w])                                       # doctest: +SKIP
>>> with fb.dataflow():                                                # doctest: +SKIP
...     lv0 = fb.emit(ops.call("matmul", x, w))
...     gv = fb.emit_output(ops.call("relu", lv0))
>>> func = fb.finish(gv)                                               # doctest: +SKIP
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import List, Optional, Sequence

from .graph import Binding, BindingBlock, Function, GraphExpr, GraphVar


class FunctionBuilder:
    """Collects bindings into blocks. Variables are named ``lv0, lv1, ...`` inside dataflow
    blocks and ``gv0, ...`` for block outputs and bindings outside dataflow, unless named."""

    def __init__(self, params: Sequence[GraphVar], attrs=None):
        self.params = tuple(params)
        self.attrs = attrs
        self._blocks: List[BindingBlock] = []
        self._current: Optional[List[Binding]] = None
        self._outputs: List[GraphVar] = []
        self._in_dataflow = False
        self._loose: List[Binding] = []
        self._count = 0

    def _name(self, prefix: str) -> str:
        name = f"{prefix}{self._count}"
        self._count += 1
        return name

    @contextmanager
    def dataflow(self):
        """A dataflow block: pure bindings; only those passed to ``emit_output`` leave it."""
        if self._in_dataflow:
            raise RuntimeError("dataflow blocks do not nest")
        self._flush_loose()
        self._in_dataflow, self._current, self._outputs = True, [], []
        try:
            yield self
        finally:
            self._blocks.append(BindingBlock(tuple(self._current), True, tuple(self._outputs)))
            self._in_dataflow, self._current = False, None

    def emit(self, value: GraphExpr, name: Optional[str] = None) -> GraphVar:
        """Bind ``value`` to a fresh variable and return the variable."""
        if value.ty is None:
            raise TypeError(f"cannot bind a value without a type: {value!r}")
        var = GraphVar(name or self._name("lv" if self._in_dataflow else "gv"), value.ty)
        (self._current if self._in_dataflow else self._loose).append(Binding(var, value))
        return var

    def emit_output(self, value: GraphExpr, name: Optional[str] = None) -> GraphVar:
        """Bind ``value`` and make it visible after the current dataflow block."""
        var = self.emit(value, name or (self._name("gv") if self._in_dataflow else None))
        if self._in_dataflow:
            self._outputs.append(var)
        return var

    def _flush_loose(self):
        if self._loose:
            self._blocks.append(BindingBlock(tuple(self._loose), False, ()))
            self._loose = []

    def finish(self, ret: GraphExpr) -> Function:
        """The function returning ``ret``."""
        if self._in_dataflow:
            raise RuntimeError("finish() inside a dataflow block")
        self._flush_loose()
        return Function(self.params, tuple(self._blocks), ret, self.attrs)
