"""``torch.cond``: a branch picked at run time, as the ONNX importer maps ``If``.

torch.export writes ``cond(pred, true_graph_0, false_graph_0, operands)``, each branch a graph
module over the operands (the weights it uses among them). A predicate the import knows (a
constant) inlines the taken branch; otherwise each branch becomes a private graph function over
the operands and the node ``call_if(pred, then, else, operands)``, which the VM runs with its IF
instruction. Both branches must give outputs of the same dtypes and shapes, as torch requires.
"""
from __future__ import annotations

import numpy as np

from ...ir.analysis import expr_equal
from ...ir.graph import Constant, GraphExpr, TensorType, TupleGetItem, TupleType, call_if
from .common import Ctx, converter
from .errors import Unsupported
from .program import _placeholders


@converter("cond")
def cond(ctx: Ctx, node, args, kwargs):
    pred, then_gm, else_gm, operands = args[0], args[1], args[2], list(args[3])
    if any(not isinstance(a, GraphExpr) for a in operands):
        raise Unsupported("torch.cond operands must be tensors")
    if pred is None:
        raise Unsupported("a torch.cond predicate on symbolic sizes is not supported (torch.export keeps "
                          "it symbolic; a tensor predicate is)")
    known = _known(ctx, pred)
    importer = ctx.importer
    k = sum(1 for n in importer.functions if n.endswith("_then"))
    names = (f"{importer.name}_cond{k}_then", f"{importer.name}_cond{k}_else")
    if known is not None:           # the taken branch's nodes, in this function
        gm = then_gm if known else else_gm
        return tuple(importer.walk(ctx, gm, {n.name: a for n, a in zip(_placeholders(gm, operands), operands)}))
    then_f, then_outs = importer.subgraph(then_gm, operands, names[0])
    else_f, else_outs = importer.subgraph(else_gm, operands, names[1])
    if len(then_outs) != len(else_outs):
        raise Unsupported("the branches give different numbers of outputs")
    for i, (a, b) in enumerate(zip(then_outs, else_outs)):
        ta, tb = a.ty, b.ty
        same = isinstance(ta, TensorType) and isinstance(tb, TensorType) and ta.dtype == tb.dtype and \
            len(ta.shape) == len(tb.shape) and all(expr_equal(x, y) for x, y in zip(ta.shape, tb.shape))
        if not same:
            raise Unsupported(f"output {i} differs between the branches ({ta} and {tb})")
    if any(isinstance(o, Constant) for o in then_outs + else_outs):
        raise Unsupported("a branch that returns a constant is not supported at run time")
    if pred.ty.shape and int(np.prod([getattr(d, "value", 0) for d in pred.ty.shape])) != 1:
        raise Unsupported(f"the predicate must have one element, got shape {pred.ty.shape}")
    ty = then_outs[0].ty if len(then_outs) == 1 else TupleType(tuple(o.ty for o in then_outs))
    var = ctx.fb.emit(call_if(pred, names[0], names[1], operands, ty))
    if len(then_outs) == 1:
        return (var,)
    return tuple(ctx.fb.emit(TupleGetItem(var, i)) for i in range(len(then_outs)))


def _known(ctx: Ctx, pred):
    """The predicate's value when the import knows it, else None."""
    if isinstance(pred, (bool, int)):
        return bool(pred)
    v = ctx.value(pred)
    if v is None:
        return None
    if v.size != 1:
        raise Unsupported(f"the predicate must have one element, got {v.size}")
    return bool(v.reshape(-1)[0])
