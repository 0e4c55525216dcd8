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
import functools
import os
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

from ..ir import IRModule


@dataclass(frozen=True)
class PassContext:
    """Options of the graph passes and default schedules.

    - ``target``: what the schedules are made for (a target string such as ``"llvm"`` or
      ``"llvm -mtriple=aarch64-linux-gnu"``, or a ``kiln.codegen.Target``; None: the host).
      The tile options below that are None are derived from it (``resolved``), through its
      ``kiln.codegen.machine.Machine``: vector width, vector registers, FMA pipes, cores.
    - ``prepack_weights``: a ``linear``/``matmul`` whose weight is a constant gets the weight
      repacked into ``[N/pack_lanes, K, pack_lanes]`` panels once, at compile time (a
      ``call_tir`` that ``fold_constant`` evaluates); other weights are packed inside the
      kernel, one panel at a time.
    - ``pack_lanes``: the panel width NR (and the register tile's vector width); derived:
      ``Machine.tile_vectors`` vectors (16 floats on AVX2 and NEON, 64 on AVX-512).
    - ``pack_min_rows``: a weight that is not a constant is packed inside the kernel only when
      at least this many rows of the input reuse each panel.
    - ``tile_rows``: the rows MR (unrolled) of NCHW conv register tiles, and how many column
      blocks a one-row matmul unrolls.
    - ``tile_accumulators``: the vector accumulators a register tile may use (matmul: its rows
      MR are picked within them by a cost model, ``layout.matmul_tile_rows``; blocked conv:
      pixels x channel vectors); derived: ``Machine.accumulators`` (12 of AVX2's 16 registers,
      24 of AVX-512's 32).
    - ``simd_lanes``: float32 elements in one vector register (8 on AVX2, 16 on AVX-512, 4 on
      NEON): the unit in which tiles count accumulators; derived from the target.
    - ``min_accumulators``: accumulators below which a tile leaves FMA pipes idle (FMA pipes x
      latency; the tile cost models charge at least this many issue slots per step).
    - ``conv_blocking``: a float32 conv2d with a constant weight is computed in blocks of
      output channels (NCHW[x]c, vectorized over channels; ``conv_blocked.py``); False keeps
      every conv2d in NCHW, vectorized over the output width.
    - ``nchwc_layout``: the default pipeline keeps activations channel-blocked (NCHW[b]c)
      from conv to conv, through the elementwise ops, pools and adds between them
      (``layout_nchwc.py``, docs/layout.md).
    - ``winograd``: the default pipeline computes 3x3 stride-1 convs with a constant weight
      as Winograd F(4x4, 3x3) where its cost rule expects it to be faster
      (``conv_winograd.py``, docs/winograd.md).
    - ``fuse_attention``: the default pipeline turns ``softmax(q @ kt * scale + mask) @ v``
      into one ``attention`` kernel per block of query rows (``fuse_attention.py``).
    - ``vector_lanes``: elements per vector chunk in elementwise / reduction kernels (derived:
      two registers' worth).
    - ``vectorize_reductions``: reductions over a contiguous row (softmax, layer_norm) are
      ``rfactor``-ed into ``vector_lanes`` partial results, so they run vectorized
      (``schedule_row_reduce.py``); False keeps them scalar.
    - ``parallel_min_elements``: kernels smaller than this stay single-threaded (the
      thread pool's fork/join would cost more than it saves).
    - ``cores``: the cores the kernels will be split across (derived: the host's usable cores,
      1 for another target); parallel loops are given at least this many tasks when they can.
    - ``fold_max_elements``: ``fold_constant`` leaves results larger than this unfolded
      (None: no limit).
    - ``fold_backend``: how ``fold_constant`` runs a ``call_tir``: ``"evaluator"`` (the
      reference evaluator, no compiler needed) or ``"build"`` (``kiln.build``, for big folds).
    - ``verify``: ``Sequential`` checks the module's well-formedness after every pass.
    - ``disabled_passes``: names of passes ``Sequential`` skips (``"fuse_ops"``, ...).
    - ``tuning_db``: a tuning database (JSON lines, ``kiln.tune``): ``default_schedule``
      schedules each kernel that has a record for this target at ``cores`` threads with the
      best record's decisions (``kiln.tune.apply``); None: the default rules only.
    - ``cache_dir``: the folder whose ``schedules/`` keeps the kernels ``default_schedule`` made
      (``kiln.transform.schedule_cache``); None: ``KILN_CACHE_DIR``, else ``~/.cache/kiln``.
      ``kiln.compile(..., pipeline=..., options=BuildOptions(cache_dir=...))`` and ``kiln
      compile --cache-dir`` set it to the build cache's folder. It never changes a schedule.
    """
    target: Optional[object] = None
    prepack_weights: bool = True
    pack_lanes: Optional[int] = None
    pack_min_rows: int = 16
    tile_rows: int = 4
    tile_accumulators: Optional[int] = None
    simd_lanes: Optional[int] = None
    min_accumulators: Optional[int] = None
    conv_blocking: bool = True
    nchwc_layout: bool = True
    winograd: bool = True
    fuse_attention: bool = True
    vector_lanes: Optional[int] = None
    vectorize_reductions: bool = True
    parallel_min_elements: int = 16384
    cores: Optional[int] = None
    fold_max_elements: Optional[int] = None
    fold_backend: str = "evaluator"
    verify: bool = False
    disabled_passes: tuple = ()
    tuning_db: Optional[str] = None
    cache_dir: Optional[str] = None

    def __post_init__(self):
        if self.fold_backend not in ("evaluator", "build"):
            raise ValueError(f"PassContext: fold_backend must be 'evaluator' or 'build', "
                             f"got {self.fold_backend!r}")
        for name in ("pack_lanes", "tile_rows", "tile_accumulators", "vector_lanes",
                     "simd_lanes", "min_accumulators", "cores"):
            v = getattr(self, name)
            if v is None and name in _DERIVED:
                continue
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"PassContext: {name} must be a positive int, got {v!r}")
        object.__setattr__(self, "disabled_passes", tuple(self.disabled_passes))
        for name in ("tuning_db", "cache_dir"):   # str, so the context stays hashable
            if getattr(self, name) is not None:
                object.__setattr__(self, name, os.fspath(getattr(self, name)))

    def replace(self, **changes) -> "PassContext":
        """A copy with some options changed."""
        return dataclasses.replace(self, **changes)

    @property
    def machine(self):
        """The ``kiln.codegen.machine.Machine`` of ``target`` (the host when None)."""
        from ..codegen.machine import machine_of
        return machine_of(self.target if self.target is not None else "llvm")

    def resolved(self) -> "PassContext":
        """This context with ``target`` parsed and every derived option that is None filled
        in from the target's machine (see the class docstring). Pass factories resolve the
        context they are given, so rules read plain numbers.

        >>> PassContext(target="llvm -mtriple=aarch64-linux-gnu").resolved().pack_lanes
        16
        """
        return _resolve(self)


# Options derived from the target when left None.
_DERIVED = ("pack_lanes", "tile_accumulators", "vector_lanes", "simd_lanes",
            "min_accumulators", "cores")


@functools.lru_cache(maxsize=128)
def _resolve(ctx: "PassContext") -> "PassContext":
    from ..codegen.target import parse_target
    target = parse_target(ctx.target if ctx.target is not None else "llvm")
    m = ctx.machine
    lanes = m.lanes(32)
    derived = {"pack_lanes": m.tile_vectors * lanes, "tile_accumulators": m.accumulators,
               "vector_lanes": 2 * lanes, "simd_lanes": lanes,
               "min_accumulators": m.min_accumulators, "cores": m.cores}
    changes = {k: v for k, v in derived.items() if getattr(ctx, k) is None}
    return dataclasses.replace(ctx, target=target, **changes)


DEFAULT_CONTEXT = PassContext()


def context(ctx: Optional[PassContext]) -> PassContext:
    """``ctx`` resolved for its target (``PassContext.resolved``), or the defaults for the
    host when None (factories take ``ctx=None``)."""
    if ctx is None:
        ctx = DEFAULT_CONTEXT
    if not isinstance(ctx, PassContext):
        raise TypeError(f"expected a kiln.transform.PassContext, got {type(ctx).__name__}")
    return ctx.resolved()


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
