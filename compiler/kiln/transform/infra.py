"""Pass infrastructure: ``Pass`` (a named ``IRModule -> IRModule`` function), ``Sequential``
(a named list of passes) and ``PassContext`` (the options passes read, passed explicitly).

Every pass factory in ``kiln.transform`` returns a ``Pass``; calling it on a module returns a
new module and never changes its argument::

    mod = kiln.transform.legalize()(mod)
    seq = kiln.transform.Sequential([kiln.transform.legalize(), kiln.transform.default_schedule()])
    mod = seq(mod)

Options live in a ``PassContext`` handed to the factories (``fold_constant(ctx)``) or to a
pipeline (``kiln.get_pipeline("default", ctx)``); there are no environment variables and no
global "current context" (STYLE.md: options in an explicit object).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

from ..ir import IRModule


@dataclass(frozen=True)
class PassContext:
    """Options of the graph passes and default schedules.

    - ``prepack_weights``: a ``linear``/``matmul`` whose weight is a constant gets the weight
      repacked into ``[N/pack_lanes, K, pack_lanes]`` panels once, at compile time (a
      ``call_tir`` that ``fold_constant`` evaluates); other weights are packed inside the
      kernel, one panel at a time.
    - ``pack_lanes``: the panel width NR (and the register tile's vector width).
    - ``pack_min_rows``: a weight that is not a constant is packed inside the kernel only when
      at least this many rows of the input reuse each panel.
    - ``tile_rows``: the rows MR (unrolled) of NCHW conv register tiles, and how many column
      blocks a one-row matmul unrolls.
    - ``tile_accumulators``: the vector accumulators a matmul's register tile may use; its
      rows MR are picked within them by a cost model (``layout.matmul_tile_rows``). 12 of
      AVX2's 16 registers, the others hold the vector operand and the broadcast (6 x 16).
    - ``conv_blocking``: a float32 conv2d with a constant weight is computed in blocks of
      8 or 16 output channels (NCHW[x]c, vectorized over channels; ``conv_blocked.py``);
      False keeps every conv2d in NCHW, vectorized over the output width.
    - ``vector_lanes``: elements per vector in elementwise / reduction kernels.
    - ``vectorize_reductions``: reductions over a contiguous row (softmax, layer_norm) are
      ``rfactor``-ed into ``vector_lanes`` partial results, so they run vectorized
      (``schedule_row_reduce.py``); False keeps them scalar.
    - ``parallel_min_elements``: kernels smaller than this stay single-threaded (the
      thread pool's fork/join would cost more than it saves).
    - ``fold_max_elements``: ``fold_constant`` leaves results larger than this unfolded
      (None: no limit).
    - ``fold_backend``: how ``fold_constant`` runs a ``call_tir``: ``"evaluator"`` (the
      reference evaluator, no compiler needed) or ``"build"`` (``kiln.build``, for big folds).
    - ``verify``: ``Sequential`` checks the module's well-formedness after every pass.
    - ``disabled_passes``: names of passes ``Sequential`` skips (``"fuse_ops"``, ...).
    """
    prepack_weights: bool = True
    pack_lanes: int = 16
    pack_min_rows: int = 16
    tile_rows: int = 4
    tile_accumulators: int = 12
    conv_blocking: bool = True
    vector_lanes: int = 16
    vectorize_reductions: bool = True
    parallel_min_elements: int = 16384
    fold_max_elements: Optional[int] = None
    fold_backend: str = "evaluator"
    verify: bool = False
    disabled_passes: tuple = ()

    def __post_init__(self):
        if self.fold_backend not in ("evaluator", "build"):
            raise ValueError(f"PassContext: fold_backend must be 'evaluator' or 'build', "
                             f"got {self.fold_backend!r}")
        for name in ("pack_lanes", "tile_rows", "tile_accumulators", "vector_lanes"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"PassContext: {name} must be a positive int, got {v!r}")
        object.__setattr__(self, "disabled_passes", tuple(self.disabled_passes))

    def replace(self, **changes) -> "PassContext":
        """A copy with some options changed."""
        return dataclasses.replace(self, **changes)


DEFAULT_CONTEXT = PassContext()


def context(ctx: Optional[PassContext]) -> PassContext:
    """``ctx``, or the defaults when None (factories take ``ctx=None``)."""
    if ctx is None:
        return DEFAULT_CONTEXT
    if not isinstance(ctx, PassContext):
        raise TypeError(f"expected a kiln.transform.PassContext, got {type(ctx).__name__}")
    return ctx


class Pass:
    """A named, pure module transformation. ``pass_(mod)`` returns the new module."""

    def __init__(self, name: str, fn: Callable[[IRModule], IRModule]):
        self.name, self._fn = name, fn

    def __call__(self, mod: IRModule) -> IRModule:
        if not isinstance(mod, IRModule):
            raise TypeError(f"pass {self.name}: expected an IRModule, got {type(mod).__name__}")
        out = self._fn(mod)
        if not isinstance(out, IRModule):  # pragma: no cover - a bug in a pass
            raise TypeError(f"pass {self.name} returned {type(out).__name__}, not an IRModule")
        return out

    def __repr__(self) -> str:
        return f"{self.name}()"


class Sequential(Pass):
    """Passes run in order: ``Sequential([legalize(), default_schedule()])(mod)``.

    With a context, passes named in ``ctx.disabled_passes`` are skipped and, when
    ``ctx.verify``, the module is checked after each pass (graph functions well formed, every
    tensor program verified), so a broken pass is named at once.
    """

    def __init__(self, passes: Sequence[Pass], name: str = "sequential",
                 ctx: Optional[PassContext] = None):
        passes = list(passes)
        for p in passes:
            if not callable(p):
                raise TypeError(f"Sequential: {p!r} is not a pass")
        self.passes: List[Pass] = passes
        self.ctx = context(ctx)
        super().__init__(name, self._run)

    def _run(self, mod: IRModule) -> IRModule:
        for p in self.passes:
            if getattr(p, "name", None) in self.ctx.disabled_passes:
                continue
            mod = p(mod)
            if self.ctx.verify:
                from .well_formed import check_well_formed
                check_well_formed(mod, after=getattr(p, "name", repr(p)))
        return mod

    def __iter__(self):
        return iter(self.passes)

    def __len__(self) -> int:
        return len(self.passes)

    def __repr__(self) -> str:
        return f"Sequential({self.name!r}: {', '.join(repr(p) for p in self.passes)})"

    def names(self) -> List[str]:
        """The names of the passes, in order."""
        return [getattr(p, "name", repr(p)) for p in self.passes]
