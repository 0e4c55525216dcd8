"""``from_exported_program``: a ``torch.export.ExportedProgram`` -> (IRModule, params).

The walk: decompose to core ATen (keeping the few ops Kiln has whole, see ``KEPT``), make the
user inputs graph parameters (dynamic dims as symbolic Vars with their bounds), the parameters
and buffers graph parameters named by their PyTorch names, then convert each FX node with the
converter registered for its target, checking every result against the shape and dtype torch
recorded for the node.
"""
from __future__ import annotations

import contextlib
import json
import operator
import warnings
from typing import Dict

import numpy as np

from ...ir.derived_dims import with_bounds
from ...ir.expr import IntImm
from ...ir.function import IRModule
from ...ir.graph import Constant, Function, GraphExpr, GraphVar, TensorType, Tuple as GraphTuple
from ...ir.graph_builder import FunctionBuilder
from ...ops.registry import OpError
from .common import Ctx, NotComputed, kiln_dtype, lookup
from .errors import TorchImportError, Unsupported
from .symbols import DIM_NAMES_FILE, SymbolTable, dim_names

# Ops the default decompositions would break up but Kiln has as one operator (one kernel,
# the way the ONNX importer maps them): kept whole.
KEPT = ("aten.scaled_dot_product_attention.default", "aten.linear.default")

# Nodes that check things at trace time and compute nothing at run time.
_IGNORED = {"aten._assert_scalar.default", "aten.sym_constrain_range_for_size.default",
            "aten.sym_constrain_range.default", "aten._assert_tensor_metadata.default",
            "aten._assert_async.msg", "aten._assert_async.default"}


def from_exported_program(ep, keep_params_as_input: bool = False, *, decompose: bool = True,
                          name: str = "main", dim_names=None):
    """Import a ``torch.export.ExportedProgram`` as ``(IRModule, params)``.

    The graph function is ``name`` (``"main"``); its parameters are the program's user inputs,
    by their names in ``forward``. With ``keep_params_as_input=False`` the parameters and
    buffers are bound into the module as constants and ``params`` is empty; with ``True`` they
    follow the user inputs as parameters named by their PyTorch names (``"fc1.weight"``) and
    ``params`` maps those names to numpy arrays: bind them with
    ``kiln.transform.bind_params(name, params)`` or pass them at run time. Either way
    ``bind_params(name, params)`` is the next step.

    Dims made dynamic with ``torch.export.Dim`` become symbolic dims named as the Dim, with its
    max as a bound (``kiln.ir.derived_dims.with_bounds``) and its min as a limit
    (``"kiln.limits"``): the VM refuses inputs outside ``min .. max``.
    With ``decompose`` the program is first lowered with ``run_decompositions`` to core ATen
    (keeping scaled_dot_product_attention and linear whole). Errors are ``TorchImportError``
    naming the FX node, its target op, the module it came from and what is unsupported.
    ``dim_names`` (``{"s77": "batch"}``) names dynamic dims whose Dim names the program lost
    (``load`` passes those ``save`` kept).

    >>> ep = torch.export.export(model.eval(), (torch.randn(1, 784),))      # doctest: +SKIP
    >>> mod, params = kiln.frontend.from_exported_program(ep)              # doctest: +SKIP
    """
    import torch
    if not isinstance(ep, torch.export.ExportedProgram):
        raise TorchImportError(f"expected a torch.export.ExportedProgram, got {type(ep).__name__} "
                               "(export a module with torch.export.export(model, args) first)")
    if decompose:
        table = torch.export.default_decompositions()
        for op in KEPT:
            table.pop(_overload(op), None)
        with _quiet_torch():
            ep = ep.run_decompositions(table)
    return _Importer(ep, keep_params_as_input, name, dim_names).run()


@contextlib.contextmanager
def _quiet_torch():
    """torch's own FutureWarnings (about its pytree internals) say nothing a user can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        yield


def _overload(qualified: str):
    import torch
    _, op, overload = qualified.split(".")
    return getattr(getattr(torch.ops.aten, op), overload)


class _Importer:
    def __init__(self, ep, keep_params_as_input, name, dim_names=None):
        self.ep, self.keep, self.name = ep, keep_params_as_input, name
        self.symbols = SymbolTable(dim_names)
        self.env: Dict[str, object] = {}
        self.functions: Dict[str, Function] = {}      # torch.cond branches, by name

    def run(self):
        from torch.export.graph_signature import InputKind, OutputKind, TensorArgument
        ep = self.ep
        sig = ep.graph_signature
        nodes = {n.name: n for n in ep.graph.nodes}
        shape_env = _shape_env(ep)
        inputs, weights, params = [], [], {}
        for spec in sig.input_specs:
            pname = spec.arg.name
            if spec.kind == InputKind.USER_INPUT:
                if not isinstance(spec.arg, TensorArgument):
                    self.env[pname] = getattr(spec.arg, "value", None)   # a constant input
                    continue
                v = self._user_input(pname, nodes[pname].meta["val"], shape_env)
                inputs.append(v)
                self.env[pname] = v
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                t = ep.state_dict.get(spec.target) if spec.target in ep.state_dict else ep.constants.get(spec.target)
                if t is None:
                    raise TorchImportError(f"input {pname!r}: the program has no tensor {spec.target!r}")
                arr = _to_numpy(t, spec.target)
                if spec.kind == InputKind.CONSTANT_TENSOR:
                    self.env[pname] = Constant(arr)      # part of the program, not a weight
                    continue
                v = GraphVar(spec.target, TensorType(arr.shape, kiln_dtype(t.dtype)))
                weights.append(v)
                params[spec.target] = arr
                self.env[pname] = v
            else:
                raise TorchImportError(f"input {pname!r} of kind {spec.kind.name} is not supported")
        mutated = [s for s in sig.output_specs if s.kind != OutputKind.USER_OUTPUT]
        if mutated:
            s = mutated[0]
            raise TorchImportError(
                f"the program writes {s.target!r} ({s.kind.name}); Kiln imports inference programs "
                "(call model.eval() before torch.export.export so batch norm does not update its statistics)")

        fb = FunctionBuilder(())
        ctx = Ctx(fb, inputs)
        ctx.symbols, ctx.importer = self.symbols, self
        if not self.keep:           # bound as constants: their values are known while importing
            ctx.weights = {w: params[w.name] for w in weights}
        with fb.dataflow():
            outs = self.walk(ctx, ep.graph_module, self.env)
            final = [fb.emit_output(e) if not isinstance(e, Constant) else e for e in outs]
        ret = final[0] if len(final) == 1 else GraphTuple(tuple(final))
        func = fb.finish(ret)
        used = _used_vars(func)
        weights = [w for w in weights if w in used]      # e.g. num_batches_tracked is not
        params = {w.name: params[w.name] for w in weights}
        uppers, lowers = self._ranges()
        attrs = {"num_input": len(inputs)}
        if lowers:
            attrs["kiln.limits"] = lowers
        func = Function(tuple(inputs) + tuple(weights), func.blocks, func.body, attrs)
        mod = IRModule({self.name: func, **self.functions})
        mod = with_bounds(mod, uppers)
        if not self.keep:
            from ...transform import bind_params
            mod, params = bind_params(self.name, params)(mod), {}
        return mod, params

    def subgraph(self, gm, args, name: str):
        """The FX graph module ``gm`` (a torch.cond branch) as a private graph function ``name``
        taking ``args``' types: returns (the function, its outputs)."""
        params = tuple(GraphVar(n.name, a.ty) for n, a in zip(_placeholders(gm, args), args))
        fb = FunctionBuilder(params, attrs={"private": True})
        ctx = Ctx(fb, list(params))
        ctx.symbols, ctx.importer = self.symbols, self
        env = {n.name: p for n, p in zip(_placeholders(gm, args), params)}
        with fb.dataflow():
            outs = self.walk(ctx, gm, env)
            final = [fb.emit_output(e) if not isinstance(e, Constant) else e for e in outs]
        func = fb.finish(final[0] if len(final) == 1 else GraphTuple(tuple(final)))
        self.functions[name] = func
        return func, final

    def walk(self, ctx, gm, env):
        """Convert the nodes of graph module ``gm`` into ``ctx``'s function, ``env`` giving its
        placeholders' values; returns its outputs."""
        outer, self.env = self.env, env
        try:
            for node in gm.graph.nodes:
                if node.op == "call_function":
                    self.env[node.name] = self._convert(ctx, node)
                elif node.op == "get_attr":     # a torch.cond branch: a GraphModule
                    self.env[node.name] = _attr(gm, node.target)
                elif node.op == "output":
                    return [self._output(a) for a in _flat(node.args[0])]
        finally:
            self.env = outer
        raise TorchImportError("a subgraph without an output node")

    # -- inputs and outputs -------------------------------------------------------------------
    def _user_input(self, pname, val, shape_env):
        import torch
        if not isinstance(val, torch.Tensor):
            raise TorchImportError(f"input {pname!r}: only tensor inputs are supported, got {type(val).__name__}")
        dims = []
        for i, d in enumerate(val.shape):
            if isinstance(d, torch.SymInt):
                e = d.node.expr
                for s in sorted(e.free_symbols, key=str):
                    self.symbols.declare(s, f"{pname}_dim{i}", shape_env)
                dims.append(self.symbols.expr(e))
            else:
                dims.append(int(d))
        try:
            dtype = kiln_dtype(val.dtype)
        except Unsupported as e:
            raise TorchImportError(f"input {pname!r}: {e}") from None
        return GraphVar(pname, TensorType(tuple(dims), dtype))

    def _ranges(self):
        """The Dims' ranges as torch.export recorded them: ``({name: max}, ((min - dim, 0), ...))``.
        The max becomes a Kiln bound (intermediates planned at it, larger inputs refused); the
        min a limit ``min - dim <= 0`` -- the form in which the VM checks a lower bound, in every
        binding (the C runtime refuses the call: "symbolic dimension 'batch' = 1 is below its
        minimum 2"). A program torch traced for dims >= min may rely on it (a slice ``x[:, 1:]``
        proved in range), so a smaller input is refused rather than run."""
        uppers, lowers = {}, []
        for sym, var in self.symbols.vars.items():
            vr = self.ep.range_constraints.get(sym)
            if vr is None:
                continue
            upper, lower = _finite(vr.upper), _finite(vr.lower)
            if upper is not None:
                uppers[var.name] = upper
            if lower is not None and lower > 0:
                lowers.append((IntImm(lower, var.dtype) - var, 0))
        return uppers, tuple(lowers)

    def _output(self, a):
        v = self.env.get(a.name) if hasattr(a, "name") else a
        if isinstance(v, GraphExpr):
            return v
        if isinstance(v, (int, float, bool)) or isinstance(v, IntImm):
            return Constant(np.asarray(getattr(v, "value", v)))
        raise TorchImportError(f"output {getattr(a, 'name', a)!r}: a {type(v).__name__} output is not supported "
                               "(outputs are tensors or constants)")

    # -- nodes --------------------------------------------------------------------------------
    def _convert(self, ctx, node):
        import torch
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):                 # size arithmetic: from torch's own expression
            try:
                return self.symbols.expr(val.node.expr)
            except Unsupported as e:
                raise TorchImportError(f"{_where(node)}: {e}") from None
        if isinstance(val, (int, bool)) and not isinstance(val, torch.Tensor) and node.target is not operator.getitem:
            return val
        target = str(node.target)
        if target in _IGNORED or isinstance(val, (torch.SymBool, torch.SymFloat)):
            return None
        if node.target is operator.getitem:
            seq, i = self.env[node.args[0].name], node.args[1]
            return seq[i]
        fn = lookup(node.target)
        if fn is None:
            raise TorchImportError(f"{_where(node)}: operator {target} is not supported "
                                   "(kiln.frontend.torch.supported_ops() lists those that are)")
        ctx.node = node
        try:
            args = self._map(node.args, node)
            kwargs = {k: self._map(v, node) for k, v in node.kwargs.items()}
            out = fn(ctx, node, args, kwargs)
            _check(out, val)
        except TorchImportError:
            raise
        except (Unsupported, OpError, NotImplementedError) as e:
            raise TorchImportError(f"{_where(node)}: {e}") from None
        except (ValueError, TypeError, IndexError, KeyError) as e:
            raise TorchImportError(f"{_where(node)}: {type(e).__name__}: {e}") from None
        return out

    def _map(self, a, node):
        from torch.fx import Node
        if isinstance(a, Node):
            v = self.env[a.name]
            if isinstance(v, NotComputed):
                raise Unsupported(f"it uses {v.what} ({a.name}), which Kiln does not compute")
            return v
        if isinstance(a, (list, tuple)):
            return type(a)(self._map(x, node) for x in a)
        return a


def _placeholders(gm, args):
    out = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(out) != len(args):
        raise Unsupported(f"the subgraph takes {len(out)} operands, the call passes {len(args)}")
    return out


def _attr(module, target: str):
    for part in target.split("."):
        module = getattr(module, part)
    return module


def _finite(v):
    """A range end as an int, or None when unbounded (torch's int_oo, or past int64)."""
    try:
        v = int(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return v if abs(v) < 2 ** 62 else None


def _check(out, val):
    """The converter's result against what torch recorded: rank, static dims, dtype."""
    import torch
    if isinstance(out, tuple) and isinstance(val, (tuple, list)):
        for o, v in zip(out, val):
            _check(o, v)
        return
    if not isinstance(out, GraphExpr) or not isinstance(val, torch.Tensor):
        return
    shape = out.ty.shape
    if len(shape) != val.dim():
        raise Unsupported(f"internal: Kiln's result has rank {len(shape)}, torch's {val.dim()}")
    for k, t in zip(shape, val.shape):
        if isinstance(k, IntImm) and isinstance(t, int) and k.value != t:
            raise Unsupported(f"internal: Kiln's result has shape {_fmt(shape)}, torch's {tuple(val.shape)}")
    if out.ty.dtype != kiln_dtype(val.dtype):
        raise Unsupported(f"internal: Kiln's result is {out.ty.dtype}, torch's {val.dtype}")


def _fmt(shape):
    return "(" + ", ".join(str(s.value) if isinstance(s, IntImm) else str(s) for s in shape) + ")"


def _where(node) -> str:
    """'node 'convolution_3' (aten.convolution.default) in layer1.0.conv1 (Conv2d), model.py:12'."""
    text = f"node {node.name!r} ({node.target})"
    stack = node.meta.get("nn_module_stack")
    if stack:
        path, cls = list(stack.values())[-1]
        cls = getattr(cls, "__name__", str(cls)).rsplit(".", 1)[-1]
        if path:
            text += f" in {path} ({cls})"
    trace = node.meta.get("stack_trace")
    if trace:
        import re
        found = re.findall(r'File "([^"]+)", line (\d+)', trace)
        if found:
            f, line = found[-1]
            text += f", {f.rsplit('/', 1)[-1]}:{line}"
    return text


def _flat(a):
    if isinstance(a, (list, tuple)):
        for x in a:
            yield from _flat(x)
    else:
        yield a


def _shape_env(ep):
    for n in ep.graph.nodes:
        v = n.meta.get("val")
        mode = getattr(v, "fake_mode", None)
        if mode is not None and mode.shape_env is not None:
            return mode.shape_env
    return None


def _to_numpy(t, name) -> np.ndarray:
    import torch
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        raise TorchImportError(f"parameter {name!r}: dtype bfloat16 is not supported; convert the model "
                               "with model.float() before exporting")
    return np.array(t.numpy(), order="C")      # (ascontiguousarray would make a 0-d tensor 1-d)


def _used_vars(func):
    """The graph vars the bindings (or the result) of ``func`` refer to."""
    from ...ir.functor import collect
    used = set()
    for b in func.bindings():
        used.update(collect(b.value, GraphVar))
    used.update(collect(func.body, GraphVar))
    return used


def save(ep, path) -> None:
    """``torch.export.save(ep, path)`` keeping the ``torch.export.Dim`` names, which torch's own
    format drops: they go in an extra file of the archive (``symbols.DIM_NAMES_FILE``), which
    ``load`` and ``kiln compile model.pt2`` read, so a dim exported as ``Dim("batch")`` is still
    ``batch`` in the compiled model (a plain ``torch.export.save`` gives ``x_dim0``)."""
    import torch
    with _quiet_torch():
        torch.export.save(ep, str(path), extra_files={DIM_NAMES_FILE: json.dumps(dim_names(ep))})


def load(path, keep_params_as_input: bool = False):
    """Import a program saved with ``torch.export.save`` (a ``.pt2`` file): ``(IRModule, params)``
    as ``from_exported_program``, with the Dim names ``save`` kept."""
    import torch
    extra = {DIM_NAMES_FILE: ""}
    try:
        with _quiet_torch():
            ep = torch.export.load(str(path), extra_files=extra)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds; name the file
        raise TorchImportError(f"{path}: not a torch.export program ({type(e).__name__}: {e})") from None
    try:
        names = json.loads(extra[DIM_NAMES_FILE] or "{}")
    except ValueError as e:
        raise TorchImportError(f"{path}: {DIM_NAMES_FILE} is not JSON ({e})") from None
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        raise TorchImportError(f"{path}: {DIM_NAMES_FILE} is not a map of symbol to Dim name")
    return from_exported_program(ep, keep_params_as_input, dim_names=names)
