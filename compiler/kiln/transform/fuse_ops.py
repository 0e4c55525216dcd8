"""``fuse_ops``: operator fusion on operator calls, before ``legalize``.

Operators are grouped by their ``OpDef.pattern``; each group of two or more becomes ONE
tensor program (one te graph: the group's computes chained, intermediates as scratch
buffers; ``kernels.build_kernel``, the code legalize uses for a single call) called with one
``call_tir``. Single calls stay operator calls for ``legalize``.

A producer joins the group of its consumer when the producer's value is used by that
consumer only (and in the same dataflow block), and:

==================================  ===========================================  ==========
producer's group                    consumer operator                            fuse?
==================================  ===========================================  ==========
elemwise / broadcast / injective    elemwise / broadcast / injective             yes
out_fusable (matmul, conv2d, ...)   elemwise / broadcast, same output shape      yes
reduce (softmax, sum, ...)          elemwise / broadcast, same output shape      yes
elemwise / broadcast                reduce                                       yes
anything else                       out_fusable, opaque, ops without te compute  no
==================================  ===========================================  ==========

and the consumer's group has at most one anchor (out_fusable or reduce operator) after it.
So ``linear -> add(bias) -> relu`` is one kernel, ``conv2d -> multiply -> add -> relu``
(batch norm as scale/shift) is one kernel, ``exp -> sum`` is one kernel. Groups are trees
whose inner values are used once, so fusing never creates a cycle.

Before::

    with R.dataflow():
        lv0 = R.linear(x, w)
        lv1 = R.add(lv0, b)
        gv = R.relu(lv1)
        R.output(gv)

After (PrimFunc ``fused_linear_add_relu`` added)::

    with R.dataflow():
        gv = R.call_tir(Module.fused_linear_add_relu, (x, w, b), R.Tensor((1, 256), "float32"))
        R.output(gv)
"""
from __future__ import annotations

from typing import Dict, List, Optional

from .. import ops
from ..ir import IRModule
from ..ir.graph import Binding, BindingBlock, Call, Function, GraphVar, TensorType
from ..ir.structural import structural_equal
from .graph_util import graph_functions, is_op_call, rewrite_function, use_counts
from .infra import Pass, PassContext, context
from .kernels import KernelTable, build_kernel

_ELEMWISE = ("elemwise", "broadcast")
_INJECTIVE = ("elemwise", "broadcast", "injective")
_RANK = {"elemwise": 0, "broadcast": 1, "injective": 2, "reduce": 3, "out_fusable": 3, "opaque": 4}


def fuse_ops(ctx: Optional[PassContext] = None) -> Pass:
    """The pass (see the module docstring)."""
    ctx = context(ctx)

    def run(mod: IRModule) -> IRModule:
        table = KernelTable(mod)
        graph = {name: _fuse_function(f, table, ctx) for name, f in graph_functions(mod)}
        return table.module(mod, graph)
    return Pass("fuse_ops", run)


class _Group:
    """Fused calls (bindings in program order); ``kind`` is the anchor's pattern, or the
    widest of elemwise < broadcast < injective when there is no anchor."""

    def __init__(self, binding: Binding, pattern: str):
        self.members: List[Binding] = [binding]
        self.kind = pattern
        self.anchor: Optional[Binding] = binding if pattern in ("out_fusable", "reduce") else None

    @property
    def root(self) -> Binding:
        return self.members[-1]

    def absorb(self, other: "_Group") -> None:
        self.members = other.members + self.members
        if other.anchor is not None:
            self.anchor, self.kind = other.anchor, other.kind
        elif self.anchor is None and _RANK[other.kind] > _RANK[self.kind]:
            self.kind = other.kind


def fusable_pattern(call: Call) -> Optional[str]:
    """The call's fusion pattern, or None when it cannot be part of a fused group."""
    if not is_op_call(call) or not isinstance(call.ty, TensorType):
        return None
    op = ops.get(call.op)
    if op.compute is None or op.tir is not None or op.pattern == "opaque":
        return None
    return op.pattern


def _can_fuse(producer: _Group, consumer: Call, pattern: str, group: _Group) -> bool:
    p_kind = producer.kind
    if pattern in _ELEMWISE:
        if p_kind in _INJECTIVE:
            return True
        if p_kind in ("out_fusable", "reduce"):
            # An epilogue that reads the anchor's output one to one (same shape).
            same = _same_shape(producer.root.value.ty, consumer.ty)
            return group.anchor is None and same
        return False
    if pattern == "injective":
        return p_kind in _INJECTIVE
    if pattern == "reduce":
        return p_kind in _ELEMWISE
    return False


# The most parameters a kernel may have: the runtime refuses a kernel library with more
# (KILN_MAX_KERNEL_PARAMS in runtime_c/src/internal.h). A group stops growing before it.
MAX_KERNEL_PARAMS = 256


def _num_params(members: List[Binding]) -> int:
    """Parameters of the kernel fusing ``members``: the values they read from outside the
    group (constants included, counted conservatively) plus the output."""
    inside = {m.var for m in members}
    outside = {id(a) for m in members for a in m.value.args
               if not (isinstance(a, GraphVar) and a in inside)}
    return len(outside) + 1


def _same_shape(a: TensorType, b: TensorType) -> bool:
    return a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape) \
        and structural_equal(tuple(a.shape), tuple(b.shape)) and a.dtype == b.dtype


def find_groups(func: Function) -> List[List[Binding]]:
    """The fused groups of ``func`` (each a list of bindings in program order; singletons
    included), block by block."""
    uses = use_counts(func)
    groups: List[List[Binding]] = []
    for block in func.blocks:
        groups.extend(g.members for g in _block_groups(block, uses))
    return groups


def _block_groups(block: BindingBlock, uses) -> List[_Group]:
    if not block.dataflow:
        return []
    group_of: Dict[GraphVar, _Group] = {}
    order: List[_Group] = []
    position = {b.var: i for i, b in enumerate(block.bindings)}
    for b in block.bindings:
        pattern = fusable_pattern(b.value) if isinstance(b.value, Call) else None
        if pattern is None:
            continue
        group = _Group(b, pattern)
        pending = list(dict.fromkeys(a for a in b.value.args if isinstance(a, GraphVar)))
        # Two sweeps: a producer used more than once joins when every use is inside this
        # group, which a first sweep may complete (gelu: t * 0.5 * (1 + erf(t / sqrt 2))
        # reads t twice, once through the erf chain absorbed first).
        for _ in range(2):
            for arg in list(pending):
                prod = group_of.get(arg)
                if prod is None or prod.root.var is not arg or prod is group:
                    pending.remove(arg)
                    continue
                here = sum(1 for a in b.value.args if a is arg)   # multiply(t, t): twice
                # (uses by the group's elementwise members only: an anchor reading the value
                # would make an elementwise producer feed a matmul inside one kernel)
                inside = sum(1 for m in group.members if m is not b
                             and fusable_pattern(m.value) in _INJECTIVE
                             for a in m.value.args if a is arg)
                if uses[arg] != here + inside:
                    continue
                if _can_fuse(prod, b.value, pattern, group) and \
                        _num_params(prod.members + group.members) <= MAX_KERNEL_PARAMS:
                    group.absorb(prod)
                    order.remove(prod)
                pending.remove(arg)
        group.members.sort(key=lambda m: position[m.var])
        for m in group.members:
            group_of[m.var] = group
        order.append(group)
    return order


def _fuse_function(func: Function, table: KernelTable, ctx: PassContext) -> Function:
    groups = [g for g in find_groups(func) if len(g) > 1]
    if not groups:
        return func
    inner = {m.var for g in groups for m in g[:-1]}
    by_root = {g[-1].var: g for g in groups}

    def visit(b: Binding, em, _block) -> None:
        if b.var in inner:
            return                       # computed inside its group's kernel
        group = by_root.get(b.var)
        if group is None:
            em.emit(b)
            return
        kernel = build_kernel([(m.var, m.value) for m in group], ctx)
        packs, call = table.call(kernel)
        for v, c in packs:
            em.emit_value(v, c)
        em.emit_value(b.var, call)
    return rewrite_function(func, visit)
