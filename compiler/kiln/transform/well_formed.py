"""A well-formedness check of a whole module, run after each pass when
``PassContext(verify=True)`` (and by the tests): it names the pass that broke the module.

Graph functions: every variable is defined before use (parameters, earlier bindings; a
dataflow variable outside its block only if it is one of the block's outputs), bound once;
``call_tir`` names a PrimFunc of the module whose parameter count is inputs + outputs.
Tensor programs: ``kiln.ir.verify``.
"""
from __future__ import annotations

from typing import Optional

from ..ir import IRModule, PrimFunc, verify
from ..ir.graph import Call, Function, TupleType
from .graph_util import iter_calls, vars_in


class WellFormedError(AssertionError):
    """The module is not well formed; the message names the function, the binding and the pass."""


def check_well_formed(mod: IRModule, after: Optional[str] = None) -> None:
    """Raise ``WellFormedError`` if ``mod`` is not well formed (see the module docstring)."""
    where = f" after pass {after}" if after else ""
    for name, f in mod.functions.items():
        if isinstance(f, Function):
            _check_function(mod, name, f, where)
        elif isinstance(f, PrimFunc):
            try:
                verify(f, name)
            except Exception as e:
                raise WellFormedError(f"tensor program {name!r} does not verify{where}: "
                                      f"{e}") from None


def _check_function(mod: IRModule, name: str, func: Function, where: str) -> None:
    visible = set(func.params)
    bound = set(func.params)

    def fail(msg):
        raise WellFormedError(f"graph function {name!r}{where}: {msg}")
    for block in func.blocks:
        local = set()
        for b in block.bindings:
            for v in vars_in(b.value):
                if v not in visible and v not in local:
                    fail(f"{b.var.name} = ... uses {v.name} before it is defined")
            if b.var in bound:
                fail(f"{b.var.name} is bound twice")
            bound.add(b.var)
            (local if block.dataflow else visible).add(b.var)
        for v in block.outputs:
            if v not in local:
                fail(f"block output {v.name} is not bound in its block")
            visible.add(v)
    for v in vars_in(func.body):
        if v not in visible:
            fail(f"the result uses {v.name}, which is not visible there")
    for call in iter_calls(func):
        if isinstance(call, Call) and call.op == "call_tir":
            target = call.args[0].name
            prim = mod.functions.get(target)
            if not isinstance(prim, PrimFunc):
                fail(f"call_tir names {target!r}, which is not a tensor program of the module")
            n_out = len(call.ty.fields) if isinstance(call.ty, TupleType) else 1
            n_in = len(call.args[1].fields)
            if n_in + n_out != len(prim.params):
                fail(f"call_tir {target} passes {n_in} input(s) and {n_out} output(s), but the "
                     f"tensor program takes {len(prim.params)} parameter(s)")
        if isinstance(call, Call) and call.op == "call_if":
            for gv in call.args[1:3]:
                callee = mod.functions.get(gv.name)
                if not isinstance(callee, Function):
                    fail(f"call_if names {gv.name!r}, which is not a graph function of the module")
                if len(callee.params) != len(call.args[3].fields):
                    fail(f"call_if passes {len(call.args[3].fields)} argument(s) to {gv.name!r}, which "
                         f"takes {len(callee.params)}")
