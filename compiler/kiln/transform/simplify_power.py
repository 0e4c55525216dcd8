"""``simplify_power``: ``power`` by a constant exponent of 2, 3, -1 or 0.5 becomes multiplies, a
division or a square root::

    y = R.power(x, R.const(2.0))        # RMSNorm's x.pow(2), a variance's (x - mean) ** 2
  ->
    y = R.multiply(x, x)

    z = R.power(x, R.const(3.0))        # GPT-2's tanh GELU: x + 0.044715 * x ** 3
  ->
    z = R.multiply(R.multiply(x, x), x)

Kernels take a constant as a parameter (``c1``), so the code generator sees ``pow(x, c1)``
with ``c1`` unknown and calls libm's ``powf`` for every element: a LLaMA-style RMSNorm over
64 x 256 values took 160 us a call, against a few for the multiply.

The exponent must be a float constant whose every element is the same value (a scalar, or a
broadcast of one), and the result must have the base's shape and dtype (an exponent that
broadcasts the base to a larger shape is left as it is). ``x * x`` and ``1 / x`` are the
correctly rounded values that ``pow`` returns, ``x * x * x`` within an ulp of it; ``sqrt``
differs from ``pow(x, 0.5)`` only at -0 and -inf (IEEE 754's ``pow`` gives +0 and +inf there;
``sqrt`` -0 and NaN).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .. import ops
from ..ir.graph import Binding, Constant, GraphExpr, GraphVar, TensorType
from ..ir.structural import structural_equal
from .graph_util import rewrite_calls
from .infra import Pass, PassContext, context


def simplify_power(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (module docstring)."""
    context(ctx)
    return Pass("simplify_power", lambda mod: rewrite_calls(mod, _simplified))


def _simplified(b: Binding, em) -> Optional[GraphExpr]:
    """The cheaper form of binding ``b``'s ``power`` call (its parts emitted), or None."""
    call = b.value
    if call.op != "power" or len(call.args) != 2:
        return None
    x, e = call.args
    if not isinstance(e, Constant) or not isinstance(call.ty, TensorType) \
            or not isinstance(x.ty, TensorType) or not structural_equal(x.ty, call.ty) \
            or call.ty.dtype not in ("float16", "float32", "float64"):
        return None
    data = np.asarray(e.data)
    if data.size == 0 or data.dtype.kind != "f" or not (data == data.flat[0]).all():
        return None
    exponent = float(data.flat[0])
    if exponent == 2.0:
        return ops.call("multiply", x, x)
    if exponent == 3.0:
        square = ops.call("multiply", x, x)
        return ops.call("multiply", em.emit(Binding(GraphVar(f"{b.var.name}_square", square.ty),
                                                    square)), x)
    if exponent == 0.5:
        return ops.call("sqrt", x)
    if exponent == -1.0:
        return ops.call("divide", Constant(np.ones((), dtype=x.ty.dtype)), x)
    return None
