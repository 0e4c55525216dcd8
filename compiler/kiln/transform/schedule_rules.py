"""Default schedule rules shared by every kernel kind: looking at blocks, inlining elementwise
intermediates, and the elementwise and reduction schedules. The register-tile rule for
contractions (matmul, conv) is in ``schedule_tile.py``; the dispatch in ``default_schedule.py``.

Every rule works through ``kiln.Schedule`` primitives only, so what a kernel got is in
``sch.trace`` and correctness rests on the primitives' own checks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Optional

from ..ir import Buffer, BufferLoad, For, PrimFunc, Select, Var, collect
from ..ir.expr import IntImm
from ..ir.stmt import Block, BlockRealize, BufferStore, IfThenElse, SeqStmt
from ..schedule import BlockRV, LoopRV, Schedule, ScheduleError
from ..schedule.decisions import Decisions
from .infra import PassContext
from .kernels import PACK_ANNOTATION


# ---- looking at blocks -----------------------------------------------------------------------
@dataclass
class BlockInfo:
    """A block with the loops around it (inside the root block), in program order."""
    realize: BlockRealize
    loops: List[For]

    @property
    def block(self) -> Block:
        return self.realize.block

    @property
    def name(self) -> str:
        return self.block.name_hint

    @property
    def rv(self) -> BlockRV:
        return BlockRV(self.name)

    @property
    def is_reduction(self) -> bool:
        return self.block.is_reduction

    @property
    def store(self) -> Optional[BufferStore]:
        return self.block.body if isinstance(self.block.body, BufferStore) else None

    def written(self) -> List[Buffer]:
        return [w.buffer for w in self.block.writes]

    def read(self) -> List[Buffer]:
        return [r.buffer for r in self.block.reads]

    def annotated(self, pair) -> bool:
        return pair in self.block.annotations


def block_infos(func: PrimFunc) -> List[BlockInfo]:
    """Every block below the root, in program order."""
    out: List[BlockInfo] = []

    def rec(s, loops):
        if isinstance(s, SeqStmt):
            for x in s.seq:
                rec(x, loops)
        elif isinstance(s, For):
            rec(s.body, loops + [s])
        elif isinstance(s, BlockRealize):
            out.append(BlockInfo(s, loops))
            rec(s.block.body, [])
            if s.block.init is not None:
                rec(s.block.init, [])
        elif isinstance(s, IfThenElse):
            rec(s.then_case, loops)
            if s.else_case is not None:
                rec(s.else_case, loops)
    rec(func.body.block.body, [])
    return out


def find(func: PrimFunc, name: str) -> BlockInfo:
    for b in block_infos(func):
        if b.name == name:
            return b
    raise KeyError(name)


def params_of(func: PrimFunc) -> set:
    return {p for p in func.params if isinstance(p, Buffer)}


def static_extent(loop: For) -> Optional[int]:
    return loop.extent.value if isinstance(loop.extent, IntImm) else None


def loop_rvs(info: BlockInfo) -> List[LoopRV]:
    return [LoopRV(f.loop_var) for f in info.loops]


def consumers(func: PrimFunc, buf: Buffer) -> List[BlockInfo]:
    return [b for b in block_infos(func) if buf in b.read()]


def has_select(info: BlockInfo) -> bool:
    return bool(collect(info.block.body, Select))


def pick_lanes(extent: Optional[int], want: int) -> Optional[int]:
    """A vector width for a loop of ``extent``: the largest of want, want/2, ... (>= 4) that
    divides it; a whole extent below ``want`` that has no such divisor; else None."""
    if extent is None or extent <= 1:
        return None
    lanes = want
    while lanes >= 4:
        if extent % lanes == 0:
            return lanes
        lanes //= 2
    return extent if extent <= want else None


# ---- inlining ----------------------------------------------------------------------------------
def inline_intermediates(sch: Schedule, keep: Callable[[BlockInfo], bool]) -> List[str]:
    """``compute_inline`` every spatial block that writes a scratch buffer (not a parameter)
    and that ``keep`` does not protect, as long as any succeeds; returns the inlined names."""
    done: List[str] = []
    progress = True
    while progress:
        progress = False
        params = params_of(sch.func)
        for info in block_infos(sch.func):
            if info.is_reduction or keep(info) or any(b in params for b in info.written()):
                continue
            try:
                sch.compute_inline(info.rv)
            except ScheduleError:
                continue
            done.append(info.name)
            progress = True
            break
    return done


def keep_packs(info: BlockInfo) -> bool:
    return info.annotated(PACK_ANNOTATION)


# ---- elementwise ------------------------------------------------------------------------------
# An innermost loop shorter than this many elements keeps the loop above it serial inside the
# parallel loop (``schedule_spatial``).
ROW_INNER_ELEMENTS = 64


def schedule_spatial(sch: Schedule, name: str, ctx: PassContext,
                     decide: Optional[Decisions] = None) -> str:
    """Vectorize the innermost loop (codegen strip-mines it into target-width vectors, and its
    loads stay contiguous), fuse the outer loops into one parallel loop when the kernel is big
    enough. A short innermost loop is fused with the rest and split into vector chunks
    instead; a symbolic one is split into vectors, the last one guarded; a single loop is split
    into parallel chunks. Returns a short description.
    Decisions (named after the block): ``<block>.chunk`` (the vector chunk of a fused loop),
    ``<block>.rows`` (the loop above a short innermost one kept serial) and
    ``<block>.parallel``."""
    decide = decide if decide is not None else Decisions()
    info = find(sch.func, name)
    loops = loop_rvs(info)
    if not loops:
        return "scalar"
    extents = [static_extent(f) for f in info.loops]
    total = math.prod(extents) if None not in extents else None
    big = total is None or total >= ctx.parallel_min_elements
    inner_ext = extents[-1]
    parts = []
    if len(loops) > 1 and inner_ext is not None and inner_ext >= 4:
        row = extents[-2]
        # A short innermost loop (a channel block of NCHWc: 32 floats) under a static one:
        # that loop stays serial inside the parallel one, so each parallel iteration finds its
        # indices (divisions) once per row rather than once per vector, and what depends only
        # on the outer indices (a concat's choice of part) stays fixed along the row.
        # Alone, one thread: DenseNet-121's concat + batch norm + ReLU (224 channels at
        # 56 x 56) 285 -> 272 us warm, 791 -> 704 us cold; ConvNeXt's layer-scale + residual
        # into NCHW32c at 28 x 28 69 -> 52 us warm, 266 -> 131 us cold.
        rows = False
        if len(loops) > 2 and row is not None and row > 1:
            rows = decide.choose(f"{name}.rows", [False, True],
                                 default=inner_ext < ROW_INNER_ELEMENTS)
        keep = loops[:-2] if rows else loops[:-1]
        outer = sch.fuse(*keep) if len(keep) > 1 else keep[0]
        sch.vectorize(loops[-1])
        parts.append(f"vectorize {inner_ext}" + (f" in rows of {row}" if rows else ""))
    elif len(loops) > 1 and inner_ext is None:
        # A symbolic innermost extent stays innermost, in vectors with a guarded last one:
        # fused with the rest, every lane would find its indices by dividing by it (a
        # transpose to (1, 4, 64, n): 116 us for n = 128, 3.5 ns an element).
        outer = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
        _, inner = sch.split(loops[-1], [None, ctx.vector_lanes])
        sch.vectorize(inner)
        parts.append(f"vectorize {ctx.vector_lanes} of {info.loops[-1].extent}")
    else:
        fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        chunk = ctx.vector_lanes * (16 if big else 1)
        lanes = pick_lanes(total, chunk) if total is not None else chunk
        if lanes is not None:
            options = [c for c in (ctx.simd_lanes, ctx.vector_lanes, 4 * ctx.vector_lanes, chunk)
                       if total is None or (c < total and total % c == 0)]
            lanes = decide.choose(f"{name}.chunk", options + [lanes], default=lanes)
        if lanes is not None and (total is None or total > lanes):
            outer, inner = sch.split(fused, [None, lanes])
            sch.vectorize(inner)
            parts.append(f"vectorize {lanes}")
        elif lanes is not None:
            sch.vectorize(fused)
            parts.append(f"vectorize {lanes}")
            outer = None
        else:
            outer = fused
    if outer is not None and decide.choose(f"{name}.parallel", [False, True], default=big):
        parallel_by_work(sch, outer, ctx)
        parts.append("parallel")
    return ", ".join(parts) or "serial"


def parallel_by_work(sch: Schedule, loop: LoopRV, ctx: PassContext) -> None:
    """``sch.parallel(loop)``; when the loop's extent is symbolic and every block under it does
    a static number of elements per iteration, with ``min_extent`` such that a run of fewer
    than ``ctx.parallel_min_elements`` elements stays on the calling thread (a 16-token
    prompt's layer norm: 16 rows of 256, 4,096 elements, took 17 us on one thread and 25 on
    two)."""
    f = sch._loop(loop)[0]
    each = None if static_extent(f) is not None else _elements_per_iteration(f.body)
    least = -(-ctx.parallel_min_elements // each) if each else None
    sch.parallel(loop, min_extent=least if least and least > 1 else None)


def _elements_per_iteration(body) -> Optional[int]:
    """The most elements any block under ``body`` does per run of it (the product of the
    static extents of the loops around it), or None if one of those loops is symbolic."""
    most = 0

    def rec(s, n):
        nonlocal most
        if isinstance(s, For):
            e = static_extent(s)
            if e is None:
                raise ValueError
            rec(s.body, n * e)
        elif isinstance(s, BlockRealize):
            most = max(most, n)
            rec(s.block.body, n)
        elif isinstance(s, SeqStmt):
            for x in s.seq:
                rec(x, n)
        elif isinstance(s, IfThenElse):
            rec(s.then_case, n)
            if s.else_case is not None:
                rec(s.else_case, n)
    try:
        rec(body, 1)
    except ValueError:
        return None
    return most or None


# ---- register tiles ------------------------------------------------------------------------------
def tile_write_back(sch: Schedule, info: BlockInfo):
    """Accumulate ``info``'s tile in a local buffer (``cache_write``) and fold the elementwise
    epilogue that reads the result one to one into the write-back (``reverse_compute_inline``);
    returns (the write-back block, "none" | "inlined" | "separate"): "separate" when some
    consumer could not be folded and stays a pass of its own."""
    out_buf = info.written()[0]
    write_back = sch.cache_write(info.rv, 0, "local")
    fused = "none"
    if out_buf not in params_of(sch.func):
        fused = "inlined"
        for e in consumers(sch.func, out_buf):
            if e.name == write_back.name:
                continue
            try:
                sch.reverse_compute_inline(e.rv)
            except ScheduleError:
                fused = "separate"
    return write_back, fused


# ---- reductions --------------------------------------------------------------------------------
def _row_depth(func: PrimFunc, out: BlockInfo) -> int:
    """How many leading loops of ``out`` every read of a scratch buffer depends on: the
    "rows" (softmax / layer_norm over the last axis: the loops over the other axes)."""
    params = params_of(func)
    # The block iterators each loop feeds.
    feeds = {f.loop_var: set() for f in out.loops}
    for iv, value in zip(out.block.iter_vars, out.realize.iter_values):
        for v in collect(value, Var):
            if v in feeds:
                feeds[v].add(iv.var)
    reads = [ld for ld in collect(out.block.body, BufferLoad) if ld.buffer not in params]
    if out.block.init is not None:
        reads += [ld for ld in collect(out.block.init, BufferLoad) if ld.buffer not in params]
    reads = [ld for ld in reads if ld.buffer not in out.written()]
    if not reads:
        return 0
    depth = 0
    for f in out.loops:
        ivs = feeds[f.loop_var]
        if not ivs or not all(ivs & set(collect(ld, Var)) for ld in reads):
            break
        depth += 1
    return depth


def schedule_reduction(sch: Schedule, ctx: PassContext, decide: Optional[Decisions] = None) -> str:
    """Reductions (softmax, norms, sums, pooling): every other block computed under the
    output block's row loops, those rows fused and run in parallel, contiguous row
    reductions rfactored into vector partials (``schedule_row_reduce.py``), inner spatial
    loops vectorized. Blocks that cannot move keep their own loops and get their own schedule.
    Decisions: ``parallel`` (the rows), ``<block>.rfactor`` (partials per row reduction, 0:
    none), and the elementwise rule's for blocks scheduled on their own."""
    decide = decide if decide is not None else Decisions()
    infos = block_infos(sch.func)
    params = params_of(sch.func)
    outs = [b for b in infos if any(w in params for w in b.written())]
    if len(outs) != 1:
        return _each_block(sch, ctx, decide)
    out = outs[0]
    depth = _row_depth(sch.func, out)
    if out.is_reduction:
        # Keep the output block's innermost spatial loop out of the rows when that leaves some.
        spatial = sum(1 for iv in out.block.iter_vars if iv.kind == "spatial")
        depth = min(depth, max(spatial - 1, 0)) if spatial > 1 else min(depth, spatial)
    if depth == 0:
        return ", ".join([_each_block(sch, ctx, decide)] + _rfactor_rows(sch, ctx, decide))
    rows = loop_rvs(out)[:depth]
    moved = 0
    for info in reversed(infos):
        if info.name == out.name:
            continue
        try:
            sch.compute_at(info.rv, rows[-1])
            moved += 1
        except ScheduleError:
            break
    row_loop = sch.fuse(*rows) if depth > 1 else rows[0]
    extents = [static_extent(f) for f in out.loops]
    total = math.prod(e for e in extents if e is not None) if None not in extents else None
    parts = [f"rows {depth}", f"{moved} block(s) at rows"]
    big = total is None or total >= ctx.parallel_min_elements
    if decide.choose("parallel", [False, True], default=big):
        parallel_by_work(sch, row_loop, ctx)
        parts.append("parallel")
    parts += _rfactor_rows(sch, ctx, decide)
    vec = _vectorize_inner(sch)
    if vec:
        parts.append(f"vectorize {vec} inner loop(s)")
    others = [b for b in block_infos(sch.func) if not b.loops or
              not any(f.loop_var is row_loop.var for f in b.loops)]
    for b in others:
        if not b.is_reduction and b.loops and b.loops[0].kind == "serial":
            schedule_spatial(sch, b.name, ctx, decide)
    return "reduction: " + ", ".join(parts)


def _rfactor_rows(sch: Schedule, ctx: PassContext, decide: Decisions) -> List[str]:
    """Contiguous row reductions rfactored into vector partials (``schedule_row_reduce.py``),
    as a description part."""
    if not ctx.vectorize_reductions:
        return []
    # (imported here: schedule_row_reduce builds on this module's helpers)
    from .schedule_row_reduce import vectorize_row_reductions
    done = vectorize_row_reductions(sch, ctx, decide)
    return [f"rfactor {len(done)} reduction(s)"] if done else []


def _vectorize_inner(sch: Schedule) -> int:
    """Vectorize the innermost loop of each spatial block whose innermost loop is serial and
    of a constant extent (reduction loops cannot be: ``vectorize_row_reductions`` rfactors
    those it can first); returns how many."""
    count = 0
    for info in block_infos(sch.func):
        if not info.loops or info.is_reduction:
            continue
        f = info.loops[-1]
        extent = static_extent(f)
        if f.kind != "serial" or extent is None or extent < 2:
            continue
        try:
            # Codegen strip-mines a vectorized loop into target-width chunks itself.
            sch.vectorize(LoopRV(f.loop_var))
            count += 1
        except ScheduleError:
            continue
    return count


def _each_block(sch: Schedule, ctx: PassContext, decide: Decisions) -> str:
    """No shared rows: each block on its own (spatial: elementwise rule; reduction: parallel
    over its leading spatial loops)."""
    parts = []
    for info in block_infos(sch.func):
        if info.loops and info.loops[0].kind != "serial":
            continue
        if not info.is_reduction:
            parts.append(schedule_spatial(sch, info.name, ctx, decide))
            continue
        lead = []
        spatial_vars = set()
        for iv, value in zip(info.block.iter_vars, info.realize.iter_values):
            if iv.kind == "spatial":
                spatial_vars |= set(collect(value, Var))
        for f in info.loops:
            if f.loop_var not in spatial_vars:
                break
            lead.append(LoopRV(f.loop_var))
        extents = [static_extent(f) for f in info.loops]
        big = None in extents or math.prod(extents) >= ctx.parallel_min_elements
        if lead and decide.choose(f"{info.name}.parallel", [False, True], default=big):
            loop = sch.fuse(*lead) if len(lead) > 1 else lead[0]
            parallel_by_work(sch, loop, ctx)
            parts.append("parallel rows")
        else:
            parts.append("serial")
    return "per block: " + ", ".join(parts) if parts else "none"


def serial_loops_only(func: PrimFunc) -> bool:
    """True when no loop of ``func`` is parallel, vectorized, unrolled or bound (unscheduled)."""
    return all(f.kind == "serial" for f in collect(func.body, For))
