"""``from_onnx``: ONNX ModelProto -> (IRModule, params)."""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from ...ir.expr import Var
from ...ir.function import IRModule
from ...ir.graph import Constant, GraphExpr, GraphVar, TensorType, Tuple as GraphTuple
from ...ir.graph_builder import FunctionBuilder
from ...ops.registry import OpError
from .common import Ctx, ONNXImportError, Unsupported, kiln_dtype, lookup

MIN_OPSET = 11


def _to_numpy(tensor) -> np.ndarray:
    from onnx import numpy_helper
    arr = numpy_helper.to_array(tensor)
    kiln_dtype(tensor.data_type, f"initializer {tensor.name!r}: ")
    return np.require(arr, requirements="C")


def _attrs(node) -> dict:
    from onnx import helper
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode() for x in v]
        out[a.name] = v
    return out


def from_onnx(model, shape_dict: Optional[Dict[str, tuple]] = None, name: str = "main"):
    """Import an ONNX model (a ``ModelProto`` or a path) as an IRModule with one graph
    function ``name`` and return ``(mod, params)``, params mapping initializer names to numpy
    arrays (bind them with ``kiln.transform.bind_params(name, params)``).

    Dynamic dims become symbolic Vars, one per ``dim_param`` name (an unnamed one gets a
    fresh Var), unless ``shape_dict`` pins the input's shape. Errors are ``ONNXImportError``
    naming the node (name, op type, opset) and what is unsupported.
    """
    import onnx
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        model = onnx.load(model)
    shape_dict = dict(shape_dict or {})
    opset = None
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            opset = imp.version
    if opset is None:
        raise ONNXImportError("the model imports no default-domain (ai.onnx) opset")
    if opset < MIN_OPSET:
        raise ONNXImportError(f"opset {opset} is not supported; Kiln imports opset >= {MIN_OPSET} "
                              f"(convert with onnx.version_converter first)")
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    symbols: Dict[str, Var] = {}
    env: Dict[str, GraphExpr] = {}
    known: Dict[GraphVar, np.ndarray] = {}
    inputs = []
    for vi in graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        try:
            dt = kiln_dtype(tt.elem_type, f"graph input {vi.name!r}: ")
        except Unsupported as e:
            raise ONNXImportError(str(e)) from None
        if vi.name in shape_dict:
            shape = tuple(int(d) for d in shape_dict[vi.name])
        else:
            if not tt.HasField("shape"):
                raise ONNXImportError(f"graph input {vi.name!r} has no shape; pin it with shape_dict")
            shape = []
            for i, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value") and d.dim_value >= 0:
                    shape.append(d.dim_value)
                else:
                    key = d.dim_param or f"{vi.name}_dim{i}"
                    key = "".join(c if c.isalnum() or c == "_" else "_" for c in key)
                    if key and key[0].isdigit():
                        key = "d" + key
                    shape.append(symbols.setdefault(key, Var(key, "int64")))
            shape = tuple(shape)
        v = GraphVar(vi.name, TensorType(shape, dt))
        env[vi.name] = v
        inputs.append(v)
    extra = set(shape_dict) - {v.name for v in inputs}
    if extra:
        raise ONNXImportError(f"shape_dict names {sorted(extra)}, which are not graph inputs; "
                              f"the inputs are {[v.name for v in inputs]}")
    init_vars = {}
    for nm, t in inits.items():
        arr = _to_numpy(t)
        v = GraphVar(nm, TensorType(arr.shape, kiln_dtype(t.data_type)))
        env[nm] = v
        known[v] = arr
        init_vars[nm] = v

    fb = FunctionBuilder(())
    ctx = Ctx(fb, known, opset)
    outs = []
    with fb.dataflow():
        for idx, node in enumerate(graph.node):
            _convert_node(ctx, node, idx, env, opset)
        for vo in graph.output:
            e = env[vo.name]
            if isinstance(e, GraphVar) and e in known:
                ctx.used.add(e)
            outs.append(e)
        # outputs of the dataflow block: bind each output
        final = []
        for e in outs:
            final.append(fb.emit_output(_identity(e)) if not isinstance(e, Constant) else e)
    ret = final[0] if len(final) == 1 else GraphTuple(tuple(final))
    used_inits = [v for v in init_vars.values() if v in ctx.used]
    fb.params = tuple(inputs) + tuple(used_inits)
    fb.attrs = {"num_input": len(inputs)}
    func = fb.finish(ret)
    params = {v.name: known[v] for v in used_inits}
    return IRModule({name: func}), params


def _identity(e):
    # emit_output needs a value to bind; rebinding a var is an alias
    return e


def _convert_node(ctx: Ctx, node, idx: int, env, opset: int):
    op_type = node.op_type
    label = f"node {node.name or f'#{idx}'!r} ({op_type}, opset {opset})"
    if node.domain not in ("", "ai.onnx"):
        raise ONNXImportError(f"{label}: domain {node.domain!r} is not supported")
    fn = lookup(op_type, opset)
    if fn is None:
        raise ONNXImportError(f"{label}: operator {op_type} is not supported")
    ins = []
    for nm in node.input:
        if nm == "":
            ins.append(None)
        elif nm not in env:
            raise ONNXImportError(f"{label}: input {nm!r} is not defined before this node")
        else:
            ins.append(env[nm])
    try:
        out = fn(ctx, node, ins, _attrs(node))
    except (Unsupported, OpError, NotImplementedError) as e:
        err = ONNXImportError(f"{label}: {e}")
        err.needs_constant = getattr(e, "needs_constant", None)
        raise err from None
    except ONNXImportError:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise ONNXImportError(f"{label}: {type(e).__name__}: {e}") from None
    if not isinstance(out, (list, tuple)):
        out = [out]
    for nm, e in zip(node.output, out):
        if nm:
            env[nm] = e
