"""Symbolic dims of a torch.export program as Kiln ``Var``s.

torch.export names a dynamic dim by a sympy symbol (``s77``); the ``torch.export.Dim`` name the
user gave (``"batch"``) survives only in the fake tensors' shape environment, which is where
this looks first. ``torch.export.save`` does not write it, so ``kiln.frontend.torch.save`` adds
the names as an extra file of the archive (``DIM_NAMES_FILE``) that ``load`` reads back. A dim
without a name is named after the input and axis where it first appears (``x_dim0``). Size
expressions (``2 * s77``, ``s77 // 2``) become PrimExprs over those Vars.
"""
from __future__ import annotations

import re
from typing import Dict, Optional

from ...ir.expr import IntImm, PrimExpr, Var
from .errors import Unsupported


# The archive member in which ``kiln.frontend.torch.save`` keeps the Dims' names.
DIM_NAMES_FILE = "kiln_dim_names.json"


def dim_names(ep) -> Dict[str, str]:
    """The ``torch.export.Dim`` names of ``ep``'s dynamic dims, by symbol (``{"s77": "batch"}``):
    what ``torch.export.save`` drops."""
    from .program import _shape_env
    env = _shape_env(ep)
    out = {}
    for sym in ep.range_constraints:
        name = _dim_name(sym, env)
        if name:
            out[str(sym)] = name
    return out


class SymbolTable:
    """sympy symbol -> Var, and sympy expression -> PrimExpr (or int). ``names`` gives Dim names
    by symbol (read from a saved program) ahead of the shape environment's."""

    def __init__(self, names: Optional[Dict[str, str]] = None):
        self.vars: Dict[object, Var] = {}
        self._names = set()
        self._given = dict(names or {})
        # torch's unbacked symbols (u0: a size read from data) that the import could compute
        # (a boolean mask known at import time): their values
        self.fixed: Dict[object, int] = {}

    def declare(self, symbol, fallback: str, shape_env=None) -> Var:
        if symbol in self.vars:
            return self.vars[symbol]
        name = _sanitize(self._given.get(str(symbol)) or _dim_name(symbol, shape_env) or fallback)
        while name in self._names:
            name += "_"
        self._names.add(name)
        v = self.vars[symbol] = Var(name, "int64")
        return v

    def expr(self, e):
        """A sympy integer expression as an int (constant) or a PrimExpr over the declared dims."""
        import sympy
        from torch.utils._sympy import functions as tf
        if isinstance(e, (int, sympy.Integer)):
            return int(e)
        if e.is_Symbol:
            if e in self.fixed:
                return self.fixed[e]
            if e not in self.vars:
                if str(e).startswith("u"):      # torch's unbacked symbols: sizes read from data
                    raise Unsupported(f"a size read from tensor data at run time ({e}) is not supported "
                                      "(data-dependent shapes; Kiln's sizes come from the inputs' shapes)")
                raise Unsupported(f"symbolic size {e} is not a dim of any input")
            return self.vars[e]
        args = [self.expr(a) for a in e.args]
        if isinstance(e, sympy.Add):
            return _fold(args, lambda a, b: a + b)
        if isinstance(e, sympy.Mul):
            return _fold(args, lambda a, b: a * b)
        if isinstance(e, tf.FloorDiv):
            return _pe(args[0]) // _pe(args[1])
        if isinstance(e, (tf.Mod, tf.PythonMod)):
            return _pe(args[0]) % _pe(args[1])
        if isinstance(e, (sympy.Min, sympy.Max)):
            from ...ir.expr import Max, Min
            cls = Min if isinstance(e, sympy.Min) else Max
            out = _pe(args[0])
            for a in args[1:]:
                out = cls(out, _pe(a))
            return out
        raise Unsupported(f"symbolic size expression {e} ({type(e).__name__}) is not supported")


def _pe(v) -> PrimExpr:
    return v if isinstance(v, PrimExpr) else IntImm(int(v), "int64")


def _fold(args, f):
    # int64 constants beside the int64 dims: a plain int would be an int32 literal cast to
    # int64 (Cast(int64, 8) * batch), which kernels cannot match against 8 * batch
    if not any(isinstance(a, PrimExpr) for a in args):
        out = args[0]
        for a in args[1:]:
            out = f(out, a)
        return out
    args = sorted((_pe(a) for a in args), key=lambda a: isinstance(a, IntImm))   # dims first
    out = args[0]
    for a in args[1:]:
        out = f(out, a)
    return out


def _dim_name(symbol, shape_env) -> Optional[str]:
    # ShapeEnv.var_to_sources: s77 -> [L['x'].size()[0]]; source_name_to_debug_name maps that
    # source to the Dim's name. Private torch state: any failure falls back to the axis name.
    try:
        names = shape_env.source_name_to_debug_name
        for src in shape_env.var_to_sources.get(symbol, ()):
            key = src.name() if callable(src.name) else src.name
            if key in names:
                return names[key]
    except Exception:  # noqa: BLE001 - best effort, see above
        return None
    return None


def _sanitize(name: str) -> str:
    name = re.sub(r"\W", "_", name)
    return "d" + name if not name or name[0].isdigit() else name
