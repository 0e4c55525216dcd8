"""``kiln.target.Target``: a compilation target as an object, accepted wherever a target string
is (``kiln.compile``, ``kiln.build``, ``kiln.get_pipeline(..., target=)``, the tuner).

>>> t = kiln.target.Target("llvm -mcpu=znver3")      # doctest: +SKIP
>>> t.cpu, t.vector_bits                              # doctest: +SKIP
('znver3', 256)
>>> ex = kiln.compile(mod, target=t)                  # doctest: +SKIP

It is the codegen ``Target`` (``kiln.codegen.Target``: triple, cpu, features, vector width),
built from the target string; ``str(t)`` gives a string that parses back to it.
"""
from __future__ import annotations

from .codegen.target import Target as _Target
from .codegen.target import host_target, parse_target


class Target(_Target):
    """``Target("llvm")``, ``Target("llvm -mcpu=skylake-avx512")``, ``Target("aarch64-linux-gnu")``:
    the parsed target (an unknown one raises ``kiln.codegen.CodegenError`` naming it)."""

    def __init__(self, spec):
        t = parse_target(spec)
        for name in ("triple", "cpu", "features", "vector_bits", "host"):
            object.__setattr__(self, name, getattr(t, name))

    def __repr__(self):
        return f"kiln.target.Target({str(self)!r})"


__all__ = ["Target", "host_target"]
