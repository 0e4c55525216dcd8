"""``from_onnx``: ONNX ModelProto -> (IRModule, params)."""
from __future__ import annotations

import logging
from typing import Dict, Optional

import numpy as np

from ...ir.expr import Var
from ...ir.function import IRModule
from ...ir.graph import Constant, GraphExpr, GraphVar, TensorType, Tuple as GraphTuple
from ...ir.graph_builder import FunctionBuilder
from ...ops.registry import OpError
from . import sequence
from . import narrow_float
from .common import Ctx, ONNXImportError, Unsupported, kiln_dtype, lookup, supported_ops
from .external_data import load_model

MIN_OPSET = 11
_log = logging.getLogger("kiln.frontend.onnx")


def _to_numpy(tensor) -> np.ndarray:
    from onnx import numpy_helper
    arr = numpy_helper.to_array(tensor)
    if kiln_dtype(tensor.data_type, f"initializer {tensor.name!r}: ") == "string":
        from .strings import text
        return text(arr)   # ONNX's bytes as str
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


def from_onnx(model, shape_dict: Optional[Dict[str, tuple]] = None, name: str = "main",
              const_inputs: Optional[Dict[str, object]] = None, bounds: Optional[Dict[str, int]] = None,
              mapped_initializers: Optional[Dict[str, np.ndarray]] = None):
    """Import an ONNX model (a ``ModelProto`` or a path) as an IRModule with the graph
    function ``name`` and return ``(mod, params)``, params mapping initializer names to numpy
    arrays (bind them with ``kiln.transform.bind_params(name, params)``).

    Dynamic dims become symbolic Vars, one per ``dim_param`` name (an unnamed one gets a
    fresh Var), unless ``shape_dict`` pins the input's shape. ``const_inputs`` fixes graph
    inputs to values (name -> array) at import time: they leave the signature and fold, e.g. a
    sample rate that selects a branch of an ``If``. An ``If`` whose condition is only known at
    run time becomes ``call_if`` over two private graph functions (``name_if0_then``, ...) in
    the same module. ``bounds`` gives upper bounds of symbolic dims by ``dim_param`` name
    (``{"batch": 64}``, as ``kiln compile --bound batch=64``): intermediates of symbolic size are
    then planned at the bound instead of coming from the heap, and the VM refuses a call past it
    (``kiln.ir.derived_dims.with_bounds``). Errors are ``ONNXImportError`` naming the node (name,
    op type, opset) and what is unsupported.

    Given a path, initializers stored in external files (a model over 2 GB keeps its weights
    so) are memory-mapped rather than read (``external_data.load_model``);
    ``mapped_initializers`` passes such arrays, by name, with a model loaded that way.

    >>> mod, params = from_onnx("silero_vad.onnx", shape_dict={"input": (1, 512)},
    ...                         const_inputs={"sr": np.array(16000)})   # doctest: +SKIP
    >>> mod, params = from_onnx("model.onnx", bounds={"batch": 64})    # doctest: +SKIP
    """
    mapped = dict(mapped_initializers or {})
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        try:
            model, mapped = load_model(model)
        # a missing or unreadable file (the OS's words say it best), or external data that
        # does not fit (external_data.py names the tensor)
        except (OSError, ONNXImportError):
            raise
        except Exception as e:  # protobuf's DecodeError and kin: bytes that are not an ONNX model
            where = f"{len(model)} bytes" if isinstance(model, bytes) else repr(str(model))
            raise ONNXImportError(f"cannot parse {where} as an ONNX model (ModelProto): {e}") from e
    shape_dict = dict(shape_dict or {})
    const_inputs = {k: np.asarray(v) for k, v in (const_inputs or {}).items()}
    domains = {("" if imp.domain == "ai.onnx" else imp.domain): imp.version for imp in model.opset_import}
    opset = domains.get("")
    if opset is None:
        if any(n.domain in ("", "ai.onnx") for n in model.graph.node):
            raise ONNXImportError("the model imports no default-domain (ai.onnx) opset")
        # only other domains' nodes (ai.onnx.ml, ai.onnx.preview.training): the default opset
        # governs nothing here but the converters' shared helpers, which take the oldest one
        opset = MIN_OPSET
    elif opset < MIN_OPSET:
        for t in model.graph.initializer:     # the converter needs the data in the model
            if t.name in mapped:
                t.raw_data = mapped.pop(t.name).tobytes()
        model, opset = _upgrade(model, opset), MIN_OPSET
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    symbols: Dict[str, Var] = {}
    env: Dict[str, GraphExpr] = {}
    known: Dict[GraphVar, np.ndarray] = {}
    inputs = []
    container_inputs = set()  # graph inputs of sequence or optional type
    for vi in graph.input:
        if vi.name in inits:
            continue
        if vi.name in const_inputs:
            env[vi.name] = _const_input(vi, const_inputs[vi.name])
            continue
        if sequence.is_container_type(vi):  # one parameter per element (sequence.py)
            env[vi.name], params = sequence.graph_input(vi, shape_dict.get(vi.name), vi.name in shape_dict,
                                                        symbols)
            inputs.extend(params)
            container_inputs.add(vi.name)
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
                    key = _symbol_name(d.dim_param or f"{vi.name}_dim{i}")
                    shape.append(symbols.setdefault(key, Var(key, "int64")))
            shape = tuple(shape)
        v = GraphVar(vi.name, TensorType(shape, dt))
        env[vi.name] = v
        inputs.append(v)
    unknown = set(const_inputs) - {vi.name for vi in graph.input if vi.name not in inits}
    if unknown:
        raise ONNXImportError(f"const_inputs names {sorted(unknown)}, which are not graph inputs; "
                              f"the inputs are {[vi.name for vi in graph.input if vi.name not in inits]}")
    extra = set(shape_dict) - {v.name for v in inputs} - container_inputs
    if extra:
        raise ONNXImportError(f"shape_dict names {sorted(extra)}, which are not graph inputs; "
                              f"the inputs are {[v.name for v in inputs]}")
    init_vars = {}
    for nm, t in inits.items():
        try:
            arr = mapped[nm] if nm in mapped else _to_numpy(t)
        except Unsupported as e:
            raise ONNXImportError(str(e)) from None
        except (ValueError, TypeError) as e:  # e.g. dims that do not match the data (numpy's words)
            raise ONNXImportError(f"initializer {nm!r}: cannot read its data: {e}") from None
        v = GraphVar(nm, TensorType(arr.shape, kiln_dtype(t.data_type)))
        env[nm] = v
        known[v] = arr
        init_vars[nm] = v

    fb = FunctionBuilder(())
    ctx = Ctx(fb, known, opset)
    # What control_flow.py needs: the names in scope, and where If branches go.
    ctx.env, ctx.functions, ctx.func_name = env, {}, name
    ctx.domains = domains  # the opset version of each domain the model imports
    ctx.inputs = list(inputs)  # witnesses of symbolic dims for run-time shape values
    outs = []
    with fb.dataflow():
        for idx, node in enumerate(graph.node):
            _convert_node(ctx, node, idx, env, opset)
        from .materialize import materialize  # shapes returned are computed at run time
        for vo in graph.output:
            if vo.name not in env:
                raise ONNXImportError(f"graph output {vo.name!r} is produced by no node, input or "
                                      "initializer")
            e = env[vo.name]
            if sequence.is_container(e):  # a tuple of the elements (sequence.py)
                e = sequence.output_expr(e, lambda x: materialize(ctx, x) if ctx.is_symbolic(x) else x)
                ctx.used.update(x for x in getattr(e, "fields", (e,)) if isinstance(x, GraphVar) and x in known)
                outs.append(e)
                continue
            if ctx.is_symbolic(e):      # a shape returned: computed at run time
                e = materialize(ctx, e)
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
    if ctx.limits:
        fb.attrs["kiln.limits"] = tuple(ctx.limits[k] for k in sorted(ctx.limits))
    func = fb.finish(ret)
    params = {v.name: known[v] for v in used_inits}
    mod = IRModule({name: func, **ctx.functions})
    if bounds:
        from ...ir.derived_dims import with_bounds
        try:
            mod = with_bounds(mod, {_symbol_name(k): v for k, v in bounds.items()})
        except ValueError as e:
            raise ONNXImportError(f"bounds: {e}; the symbolic dims are {sorted(symbols)}") from None
    return mod, params


def _symbol_name(key) -> str:
    """The name of the symbolic dim of ``dim_param`` ``key``: an identifier."""
    if isinstance(key, bytes):  # protobuf hands back invalid UTF-8 as bytes
        key = key.decode("utf-8", "replace")
    key = "".join(c if c.isalnum() or c == "_" else "_" for c in key)
    return "d" + key if key and key[0].isdigit() else key


def _const_input(vi, value: np.ndarray) -> Constant:
    """Graph input ``vi`` fixed to ``value`` (``const_inputs``): checked against its dtype and
    the dimensions its type fixes."""
    from ...ir import dtype as dtypes
    tt = vi.type.tensor_type
    try:
        want = kiln_dtype(tt.elem_type, f"graph input {vi.name!r}: ")
    except Unsupported as e:
        raise ONNXImportError(str(e)) from None
    arr = np.asarray(value)
    if arr.dtype != dtypes.to_numpy(want):
        integral_flag = want == "bool" and arr.dtype.kind in "iu" and np.isin(arr, (0, 1)).all()
        if not integral_flag and not np.can_cast(arr.dtype, dtypes.to_numpy(want), casting="same_kind"):
            raise ONNXImportError(f"const_inputs[{vi.name!r}]: dtype {arr.dtype} does not fit the input's {want}")
        arr = arr.astype(dtypes.to_numpy(want))
    if tt.HasField("shape"):
        dims = tt.shape.dim
        fixed = [d.dim_value if d.HasField("dim_value") else None for d in dims]
        if len(fixed) != arr.ndim or any(f is not None and f != n for f, n in zip(fixed, arr.shape)):
            raise ONNXImportError(f"const_inputs[{vi.name!r}]: shape {arr.shape} does not fit the input's "
                                  f"shape {tuple(f if f is not None else '?' for f in fixed)}")
    return Constant(arr)


def _identity(e):
    # emit_output needs a value to bind; rebinding a var is an alias
    return e


def _upgrade(model, opset: int):
    """``model`` (default-domain opset ``opset`` < MIN_OPSET) converted to MIN_OPSET with
    onnx.version_converter, saying so in the log; a node the converter cannot carry over is an
    ONNXImportError naming it (the converter's message names the node and its op)."""
    import onnx.version_converter
    _log.warning("ONNX model of opset %d: upgrading it to opset %d with onnx.version_converter",
                 opset, MIN_OPSET)
    try:
        return onnx.version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:  # the converter raises RuntimeError / ValueError / C++ errors
        raise ONNXImportError(f"opset {opset} -> {MIN_OPSET} upgrade failed: {e}") from None


def _convert_node(ctx: Ctx, node, idx: int, env, opset: int):
    op_type = node.op_type
    label = f"node {node.name or f'#{idx}'!r} ({op_type}, opset {opset})"
    if node.domain not in ("", "ai.onnx"):
        # another domain's converters are registered as "domain:Op" (e.g. "ai.onnx.ml:Binarizer")
        version = getattr(ctx, "domains", {}).get(node.domain)
        label = f"node {node.name or f'#{idx}'!r} ({node.domain}:{op_type}, version {version})"
        if not any(op.startswith(node.domain + ":") for op in supported_ops()):
            raise ONNXImportError(f"{label}: domain {node.domain!r} is not supported")
        fn = lookup(f"{node.domain}:{op_type}", version) if version is not None else None
    else:
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
        out = narrow_float.convert(fn, ctx, node, ins, _attrs(node))   # bfloat16/float8 via float32
    except (Unsupported, OpError, NotImplementedError) as e:
        err = ONNXImportError(f"{label}: {e}")
        err.needs_constant = getattr(e, "needs_constant", None)
        raise err from None
    except ONNXImportError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError,
            ZeroDivisionError) as e:
        # a converter meeting what the ONNX spec rules out (an attribute of another type, a
        # branch that is not a graph, a dim past int64): still an import error naming the node
        raise ONNXImportError(f"{label}: {type(e).__name__}: {e}") from None
    if not isinstance(out, (list, tuple)):
        out = [out]
    for nm, e in zip(node.output, out):
        if nm:
            env[nm] = e
