"""Integer arithmetic on index expressions: simplification, bounds and proofs.

Used by schedule primitives (split / fuse / compute_at produce floordiv/floormod and affine
index expressions) and by te (access regions).

>>> from kiln.ir import Var
>>> from kiln import arith
>>> i, j = Var("i"), Var("j")
>>> arith.simplify((i * 4 + j) // 4, {j: (0, 4)}) is i
True
>>> arith.can_prove(i * 4 + j < 32, {i: (0, 8), j: (0, 4)})
True
>>> arith.const_int_bound(i * 4 + j, {i: (0, 8), j: (0, 4)})
IntBound(min=0, max=31)
"""
from .analyzer import Analyzer, IntBound, can_prove, const_int_bound, simplify, unit_step
from .linear import Linear
from .stmt import simplify_stmt

__all__ = ["Analyzer", "IntBound", "Linear", "can_prove", "const_int_bound", "simplify",
           "simplify_stmt", "unit_step"]
