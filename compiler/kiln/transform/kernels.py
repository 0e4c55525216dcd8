"""Tensor programs for operator calls: the code ``legalize`` and ``fuse_ops`` share.

``build_kernel(group)`` takes operator calls in dependency order (one call for legalize, a
fused group for fuse_ops), makes one te placeholder per distinct outside input (graph
variable or constant), chains the operators' ``OpDef.compute``s on them, and turns the
result into ONE PrimFunc with ``te.create_prim_func``: the group's intermediates become
scratch buffers (``alloc_buffer``) of that PrimFunc. ``KernelTable`` adds the PrimFuncs to the
module under readable unique names (``add``, ``matmul1``, ``fused_linear_add_relu``), sharing
one PrimFunc between structurally equal kernels.

Weights of contractions are read through a packed layout when ``layout.pack_plan`` says so
(see ``layout.py``): a constant weight gets a pack ``call_tir`` (``Kernel.pre``) that
``fold_constant`` evaluates at compile time; blocks that pack are annotated
``{"kiln.layout": "pack"}`` so the schedule keeps them. A conv2d that ``conv_blocked.py``
picks is built from the channel-blocked program of ``ops/conv_nchwc.py`` instead of the
operator's own compute (same result), its reduction block annotated ``{"kiln.layout": "nchwc"}``;
so is ``conv2d_nchwc`` (``ops/nchwc.py``, from ``layout_nchwc.py``), with the tile form that
``conv_blocked.nchwc_compute`` picks for the target.
"""
from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

from .. import ops, te
from ..ir import IRModule, PrimFunc
from ..ir.functor import transform
from ..ir.graph import (Call, Constant, GraphExpr, GraphVar, TensorType, TupleType, call_tir)
from ..ir.stmt import Block
from ..ir.structural import structural_equal, structural_hash
from .graph_util import unique_name
from ..ops import conv_nchwc
from ..ops.transform import contiguous_slice_offset
from . import conv_blocked, layout
from .infra import PassContext

# Attributes every generated kernel carries (read by default_schedule and `kiln inspect`).
ATTR_OPS = "kiln.ops"            # the operators it computes, joined by "+": "linear+add+relu"
ATTR_ANCHOR = "kiln.anchor"      # the operator that decides its schedule: "linear"
ATTR_SCHEDULE = "kiln.schedule"  # set by default_schedule: what schedule the kernel got
# set by default_schedule: the Machine.key() of the target the schedule was made for
ATTR_SCHEDULED_FOR = "kiln.scheduled_for"
# set by default_schedule: the rule's named decisions, "name=value ..." (schedule/decisions.py)
ATTR_DECISIONS = "kiln.decisions"
# A kernel that is one concat of its parameters, in order: the axis. The executable's memory
# plan may then have the parts written in place and skip the kernel (executable/views.py).
ATTR_CONCAT_AXIS = "kiln.concat_axis"
# A kernel whose output is one contiguous run of its one input's elements (a slice of the
# channels of a batch-1 tensor): where the run starts. The plan may make it a view (views.py).
ATTR_VIEW_OFFSET = "kiln.view_offset"
PACK_ANNOTATION = ("kiln.layout", "pack")

_ANCHOR_PATTERNS = ("out_fusable", "reduce", "opaque")


class LegalizeError(ValueError):
    """An operator call that has no tensor program, or whose program does not fit its type."""


@dataclass
class Kernel:
    """A built kernel: ``func`` takes ``inputs`` (graph values, in parameter order) followed
    by its outputs. ``pre`` are weights to pack before the call, as (packed variable, weight,
    plan): ``KernelTable.call`` binds each packed variable to a pack kernel's call_tir."""
    func: PrimFunc
    inputs: List[GraphExpr]
    base_name: str
    out_ty: object
    pre: List[Tuple[GraphVar, GraphExpr, "layout.PackPlan"]] = field(default_factory=list)


def op_def(call: Call) -> ops.OpDef:
    try:
        return ops.get(call.op)
    except ops.OpError as e:
        raise LegalizeError(f"legalize: {e}") from None


def anchor_of(calls: Sequence[Call]) -> Call:
    """The call that decides a group's schedule: its out_fusable or reduce op, else the last."""
    for want in _ANCHOR_PATTERNS:
        for c in calls:
            if op_def(c).pattern == want:
                return c
    return calls[-1]


def _as_list(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _out_types(ty) -> List[TensorType]:
    return list(ty.fields) if isinstance(ty, TupleType) else [ty]


def _input_name(expr: GraphExpr, index: int) -> str:
    if isinstance(expr, GraphVar):
        return expr.name
    return f"c{index}" if isinstance(expr, Constant) else f"x{index}"


def pack_kernel(w_ty: TensorType, plan: layout.PackPlan) -> PrimFunc:
    """The pack PrimFunc for ``plan``, annotated and attributed like every generated kernel."""
    func = _annotate_packs(layout.pack_kernel(w_ty, plan))
    return _with_attrs(func, {ATTR_OPS: plan.name, ATTR_ANCHOR: "layout_pack"})


def build_kernel(group: Sequence[Tuple[GraphVar, Call]], ctx: PassContext) -> Kernel:
    """One PrimFunc computing the last binding of ``group`` (operator calls in dependency
    order; every other member is used only inside the group)."""
    calls = [c for _, c in group]
    if len(group) == 1 and op_def(calls[0]).tir is not None:
        return _tir_kernel(calls[0])
    produced: Dict[GraphVar, object] = {}
    inputs: List[GraphExpr] = []
    holders: Dict[GraphExpr, te.Tensor] = {}
    extra_args: List[te.Tensor] = []   # placeholders in parameter order
    pre: List[Tuple[GraphVar, GraphExpr, layout.PackPlan]] = []
    outs = None

    def placeholder_for(expr: GraphExpr) -> te.Tensor:
        if expr in holders:
            return holders[expr]
        if not isinstance(expr.ty, TensorType) or expr.ty.shape is None:
            raise LegalizeError(f"legalize: argument {expr!r} of operator {calls[-1].op} is not "
                                f"a tensor of known rank")
        ph = te.placeholder(expr.ty.shape, expr.ty.dtype, name=_input_name(expr, len(inputs)))
        holders[expr] = ph
        inputs.append(expr)
        extra_args.append(ph)
        return ph

    for var, call in group:
        op = op_def(call)
        if op.compute is None:
            raise LegalizeError(f"legalize: operator {call.op} has no te compute; it cannot be "
                                "fused with other operators")
        blocked = conv_blocked.blocked_plan(call, ctx)
        plan = blocked or layout.pack_plan(call, ctx)
        args = []
        for i, a in enumerate(call.args):
            if isinstance(a, GraphVar) and a in produced:
                args.append(produced[a])
            elif blocked is not None and i == plan.rule.arg:
                args.append(_packed_placeholder(a, plan, placeholder_for, pre))
            elif plan is not None and i == plan.rule.arg:
                args.append(_packed_weight(a, plan, ctx, placeholder_for, pre))
            else:
                args.append(placeholder_for(a))
        try:
            if blocked is not None:
                # The channel-blocked program for the same conv2d (ops/conv_nchwc.py).
                result = conv_nchwc.conv2d_nchwc(args[0], args[1], plan.shape, dict(call.attrs),
                                                 plan.lanes, conv_blocked.flat_pixels(call, ctx),
                                                 conv_blocked.pixel_major(call))
            elif call.op == "conv2d_nchwc":
                # Its tile form (rows or flat pixels) and input copy are chosen for the target.
                result = conv_blocked.nchwc_compute(call, args, ctx)
            else:
                result = op.compute(args, dict(call.attrs))
        except ops.OpError:
            raise
        except Exception as e:  # a compute that cannot take these arguments: say which op
            shapes = [str(getattr(a, "shape", a)) for a in args]
            raise LegalizeError(f"legalize: the te compute of operator {call.op} failed on "
                                f"arguments {shapes}: {e}") from e
        produced[var] = result
        outs = _as_list(result)
    out_types = _out_types(calls[-1].ty)
    if len(outs) != len(out_types):
        raise LegalizeError(f"legalize: operator {calls[-1].op}'s compute gives {len(outs)} "
                            f"output(s), its type says {len(out_types)}")
    func = te.create_prim_func(extra_args + outs)
    func = _annotate_packs(func)
    names = [c.op for c in calls]
    attrs = {ATTR_OPS: "+".join(names), ATTR_ANCHOR: anchor_of(calls).op}
    if names == ["concat"] and len(inputs) == len(calls[0].args) \
            and all(a is b for a, b in zip(inputs, calls[0].args)):
        attrs[ATTR_CONCAT_AXIS] = int(calls[0].attr("axis") or 0) % len(calls[0].ty.shape)
    if names == ["strided_slice"] and len(inputs) == 1 and inputs[0] is calls[0].args[0]:
        offset = contiguous_slice_offset(inputs[0].ty, dict(calls[0].attrs))
        if offset is not None:
            attrs[ATTR_VIEW_OFFSET] = offset
    base = names[0] if len(names) == 1 else "fused_" + "_".join(_short(names))
    return Kernel(_with_attrs(func, attrs), inputs, base, calls[-1].ty, pre)


def _packed_placeholder(w: GraphExpr, plan: layout.PackPlan, placeholder_for, pre) -> te.Tensor:
    """The packed weight itself, written by a pack call_tir before the kernel."""
    p_var = GraphVar("packed", TensorType(plan.packed_shape, w.ty.dtype))
    pre.append((p_var, w, plan))
    return placeholder_for(p_var)


def _packed_weight(w: GraphExpr, plan: layout.PackPlan, ctx: PassContext, placeholder_for,
                   pre) -> te.Tensor:
    """The te tensor the operator reads as its weight: a view of the packed weight."""
    if (isinstance(w, Constant) or layout.packs_ahead(plan, ctx)) and ctx.prepack_weights:
        # A call_tir on the weight before the kernel: on a constant, folded by fold_constant
        # (packed once at compile time); on a large run-time B, run before each product.
        return layout.unpack_view(_packed_placeholder(w, plan, placeholder_for, pre), plan)
    if layout.packs_in_kernel(plan, ctx):
        # A weight that arrives at run time: pack one panel at a time inside the kernel.
        return layout.unpack_view(layout.pack_compute(placeholder_for(w), plan), plan)
    return placeholder_for(w)


def _short(names: List[str]) -> List[str]:
    # Long fused groups keep readable names: the first ops and a count.
    return names if len(names) <= 5 else names[:4] + [f"{len(names) - 4}more"]


def _tir_kernel(call: Call) -> Kernel:
    op = op_def(call)
    arg_types = [a.ty for a in call.args]
    func = op.tir(arg_types, dict(call.attrs), call.ty)
    if not isinstance(func, PrimFunc):
        raise LegalizeError(f"legalize: operator {call.op}'s tir builder returned "
                            f"{type(func).__name__}, not a PrimFunc")
    return Kernel(_with_attrs(func, {ATTR_OPS: call.op, ATTR_ANCHOR: call.op}),
                  list(call.args), call.op, call.ty)


def _with_attrs(func: PrimFunc, attrs: dict) -> PrimFunc:
    merged = dict(func.attrs)
    merged.update(attrs)
    return PrimFunc(func.params, func.body, tuple(merged.items()))


def _annotate_packs(func: PrimFunc) -> PrimFunc:
    def post(n):
        if isinstance(n, Block) and n.name_hint.startswith("pack_weight") \
                and PACK_ANNOTATION not in n.annotations:
            return dataclasses.replace(n, annotations=n.annotations + (PACK_ANNOTATION,))
        if isinstance(n, Block) and n.name_hint.startswith(conv_nchwc.BLOCK_NAME) \
                and conv_blocked.ANNOTATION not in n.annotations:
            return dataclasses.replace(n, annotations=n.annotations + (conv_blocked.ANNOTATION,))
        return None
    return func.with_body(transform(func.body, post))


# PrimFunc -> its structural hash. Functions are immutable, and each pass that adds kernels
# (legalize, then fuse_ops) starts a table holding every kernel already in the module: without
# this, each table would hash them all again.
_HASHES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _hash_of(func: PrimFunc) -> int:
    h = _HASHES.get(func)
    if h is None:
        h = _HASHES[func] = structural_hash(func)
    return h


class KernelTable:
    """Adds kernels to a module: unique readable names, structurally equal kernels shared."""

    def __init__(self, mod: IRModule):
        self.functions = dict(mod.functions)
        self._by_hash: Dict[int, List[str]] = {}
        for name, f in self.functions.items():
            if isinstance(f, PrimFunc):
                self._by_hash.setdefault(_hash_of(f), []).append(name)

    def add(self, base_name: str, func: PrimFunc) -> str:
        """The name of ``func`` in the module: an existing equal PrimFunc's, or a new one."""
        h = _hash_of(func)
        for name in self._by_hash.get(h, []):
            if structural_equal(self.functions[name], func):
                return name
        name = unique_name(base_name, self.functions)
        self.functions[name] = func
        self._by_hash.setdefault(h, []).append(name)
        return name

    def call(self, kernel: Kernel) -> Tuple[List[Tuple[GraphVar, Call]], Call]:
        """(bindings to emit first, the ``call_tir`` computing the kernel's result)."""
        pre = []
        for var, w, plan in kernel.pre:
            pname = self.add(plan.name, pack_kernel(w.ty, plan))
            pre.append((var, call_tir(pname, (w,), var.ty)))
        name = self.add(kernel.base_name, kernel.func)
        return pre, call_tir(name, tuple(kernel.inputs), kernel.out_ty)

    def module(self, base: IRModule, graph_funcs: Dict[str, object]) -> IRModule:
        funcs = dict(self.functions)
        funcs.update(graph_funcs)
        return IRModule(funcs, base.attrs)
