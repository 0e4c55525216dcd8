"""The register-tile schedule for contractions: matmul, linear, batched matmul, conv.

It is the recipe of ``bench/matmul.py`` (packed-panel GEMM, ~0.9x numpy) generalized from the
shape of the contraction block ``C[..] = C[..] + A[..] * B[..]``:

- ``V``: the output's last axis (``j`` of matmul, ``x`` of NCHW conv), split by NR and
  vectorized: the operand that varies along it is loaded as a vector;
- ``U``: a spatial axis that vector operand does not depend on (``i`` of matmul, the output
  channel of conv), split by MR and unrolled: each vector load is reused MR times;
- the MR x NR block of C lives in a local buffer (``cache_write``) across the whole reduction,
  written back once per tile with the elementwise epilogue (bias, relu, ...) folded into the
  write-back (``reverse_compute_inline``);
- the reduction's init is split off (``decompose_reduction``) and vectorized;
- a panel-pack block (``kiln.layout = pack``, see ``layout.py``) is computed per column
  block (``compute_at``), or per chunk of K within it when K is blocked, so a panel stays in
  cache while every row block streams past it;
- the outer loops (batch, column blocks, output rows) run in parallel, split among the threads
  by column blocks, or, when A is large next to B and B fits in a quarter of L2 (``split_rows``),
  by row blocks (then outside the column blocks): each core then reads only its rows of A,
  which a kernel before it split alike wrote into this core's cache, rather than all of A,
  half of it from the other core;
- a matmul whose packed panel (K x NR), the next panel and the rows of A that stream past
  them do not fit in L2 has its reduction blocked
  (``k_block``): per column block, K in chunks of ``kc``, every row block running over one
  chunk before the next, so the chunk of the panel and of A stay in L2; the tile of C then
  lives in a local buffer of the panel's rows (L1), re-read at each chunk;
- a matmul whose A does not fit in L2 takes its rows in blocks (``row_block``), outside the
  column blocks: each block of A stays in L2 while every panel of B streams past it, instead
  of all of A streaming from L3 past each panel (1024^3 on AVX2: 0.8 -> 0.96x OpenBLAS);
- a matmul split by column panels of a packed weight has each row tile fetch part of the next
  panel into L2 (``prefetch.prefetch_next_block``, the decision ``prefetch``): inside a model
  the weight is in memory, and the panel's first row tile would wait on it.

Tile sizes (``layout.py``, shared with the weight packing so both agree): NR divides the
vector axis (16, 8, else the largest divisor down to 4, else the whole axis up to 16) or is
the panel width of a packed weight. A matmul's MR is picked by a cost model within 12 vector
accumulators (``layout.matmul_tile_rows``: 6 x 16 for 64 rows, 4 x 16 for 32) and need not
divide the rows; a conv's MR fills the accumulator budget (8 vectors for the default
``tile_rows=4`` x 16 lanes) and divides the row axis, or is the row panel of a packed conv
weight. With no row axis to unroll (one row) the tile unrolls over
2-4 column blocks instead (``tile 1x4x16``), unless B is given at run time and larger than
half of L2: then the product walks B's rows in wide strips, the strip's sums in L1
(``walk_strip``; ``B's rows in strips of 2048``). A symbolic row axis gets the full MR: its last
tile is guarded (``split``), and lowering partitions that tile off (``partition_loops``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

from ..ir import Add, BufferLoad, FloorDiv, FloorMod, Mul, PrimFunc, Var, collect
from ..ir.expr import IntImm
from ..schedule import LoopRV, Schedule, ScheduleError
from .infra import PassContext
from .kernels import PACK_ANNOTATION
from ..schedule.decisions import Decisions
from .layout import divisor_at_most, matmul_tile_rows, tile_rows, vector_tile, vectors
from .prefetch import prefetch_next_block
from .schedule_rules import (BlockInfo, block_infos, consumers, find, params_of,
                             schedule_spatial, static_extent)


@dataclass
class Contraction:
    """Where the roles of a contraction block's loops are (indices into ``info.loops``)."""
    info: BlockInfo
    spatial: List[int]          # loops bound to spatial iterators, in loop order
    reduce: List[int]           # loops bound to reduction iterators
    v: int                      # the vector axis (a spatial loop index)
    u: Optional[int]            # the unrolled axis, or None
    packed: int                 # the panel width when the vector operand is a packed weight, else 0
    rows_packed: int = 0        # the rows per panel when the broadcast operand is packed, else 0


def analyze_contraction(func: PrimFunc, info: BlockInfo) -> Optional[Contraction]:
    """The roles of ``info``'s loops if it is a sum-of-products reduction with one loop per
    iterator, else None."""
    blk, store = info.block, info.store
    if store is None or blk.init is None or not blk.is_reduction:
        return None
    if not isinstance(store.value, Add) or not collect(store.value, Mul):
        return None
    if len(info.loops) != len(blk.iter_vars):
        return None
    loop_of_iter = {}
    for k, (iv, value) in enumerate(zip(blk.iter_vars, info.realize.iter_values)):
        vs = collect(value, Var)
        if len(vs) != 1 or vs[0] is not info.loops[k].loop_var:
            return None
        loop_of_iter[iv.var] = k
    spatial = [k for k, iv in enumerate(blk.iter_vars) if iv.kind == "spatial"]
    reduce = [k for k, iv in enumerate(blk.iter_vars) if iv.kind == "reduce"]
    if not spatial or not reduce or spatial != list(range(len(spatial))):
        return None
    last = store.indices[-1] if store.indices else None
    if not isinstance(last, Var) or last not in loop_of_iter:
        return None
    v = loop_of_iter[last]
    loads = [ld for ld in collect(store.value, BufferLoad) if ld.buffer is not store.buffer]
    # Two operands, each read along the reduction; one varies along the vector axis, the
    # other does not (it is broadcast). ``sum(x * x)`` (a norm) or a pool is no contraction.
    reduce_vars = {iv.var for iv in blk.iter_vars if iv.kind == "reduce"}
    if len(loads) != 2 or loads[0].buffer is loads[1].buffer:
        return None
    if not all(reduce_vars & set(collect(ld, Var)) for ld in loads):
        return None
    vec_loads = [ld for ld in loads if last in collect(ld, Var)]
    if len(vec_loads) != 1:
        return None
    used = set()
    for ld in vec_loads:
        used |= set(collect(ld, Var))
    rows = [k for k in spatial if k != v and blk.iter_vars[k].var not in used
            and any(blk.iter_vars[k].var in collect(i, Var) for i in store.indices)]
    # The last such axis (the one nearest the vector axis), unless it is a single row and
    # another is longer: (L, 1, E) @ W, PyTorch's sequence-first attention projections, has
    # its L rows in the batch axis; unrolling the 1 would make each a one-row product.
    longer = [k for k in rows if static_extent(info.loops[k]) != 1]
    u = (longer or rows or [None])[-1]
    packed = _panel(vec_loads[0], last) or 0
    # A broadcast operand packed along an axis (conv weight [O/MR, I, KH, KW, MR]) fixes
    # that axis as the unrolled one, and its panel width as the rows of the tile.
    bcast = next(ld for ld in loads if ld is not vec_loads[0])
    rows_packed = 0
    for k in spatial:
        iv = blk.iter_vars[k].var
        p = _panel(bcast, iv)
        if p and k != v and iv not in used:
            u, rows_packed = k, p
    return Contraction(info, spatial, reduce, v, u, packed, rows_packed)


def _panel(load: BufferLoad, var: Var) -> Optional[int]:
    """P when ``load`` reads a packed layout along ``var``: ``W[var // P, ..., var % P]``."""
    idx = load.indices
    if len(idx) < 2 or not isinstance(idx[0], FloorDiv) or not isinstance(idx[-1], FloorMod):
        return None
    d, m = idx[0], idx[-1]
    if d.a is var and m.a is var and isinstance(d.b, IntImm) and isinstance(m.b, IntImm) \
            and d.b.value == m.b.value:
        return d.b.value
    return None


def k_block(k: Optional[int], nr: Optional[int], ctx: PassContext,
            rows: Optional[int] = None) -> int:
    """The reduction chunk of a matmul (0: no blocking) whose working set overflows L2: its
    ``k`` x ``nr`` float32 panel, the next panel (fetched while this one is used:
    ``prefetch_next_block``) and the ``rows`` x ``k`` of A that stream past them, more than
    7/8 of L2 (the rest goes to the output and the cache's associativity). The chunk is the
    largest divisor of ``k``, a multiple of 8, whose panel chunk takes at most an eighth of
    L2. 49 x 4608 x 1000 on a 2 MiB L2 with 64-wide panels: chunks of 768 (a 192 KiB panel
    chunk), where the whole 1.2 MiB panel and A's 0.9 MiB would evict each other;
    ConvNeXt-T's 49 x 3072 x 768 (two 768 KiB panels and 588 KiB of A): chunks of 1024,
    7.3 -> 6.5 ms a layer at one thread; its 49 x 768 x 3072 (A 147 KiB) stays whole, where
    chunks ran 15% slower."""
    if not k or not nr:
        return 0
    if 2 * k * nr * 4 + (rows or 0) * k * 4 <= ctx.machine.l2_bytes * 7 // 8:
        return 0
    fits = [d for d in k_block_options(k) if d * nr * 4 <= ctx.machine.l2_bytes // 8]
    return max(fits) if fits else 0


def k_block_options(k: Optional[int]) -> List[int]:
    """Chunks a reduction of ``k`` can be blocked in: divisors that are multiples of 8, from
    64 up to half of ``k``."""
    if not k:
        return []
    return [d for d in range(64, k // 2 + 1, 8) if k % d == 0]


def row_block(m: Optional[int], k: Optional[int], n: Optional[int], mr: int, nr: Optional[int],
              ctx: PassContext) -> int:
    """Rows of A per block (0: no blocks) for a matmul whose A does not fit in L2.
    Column blocks outside row blocks stream all of A past each panel of B: ``n / nr`` passes
    over A, from L3 when it does not fit in L2 (1024^3 on AVX2: 64 passes over 4 MiB, 0.8x
    OpenBLAS). With blocks of rows that do fit, each block stays in L2 while every panel
    streams past it: B is read ``m / mc`` times instead. Blocks of equal size, each a multiple
    of ``mr`` rows taking at most half of L2, when that reads fewer bytes in all."""
    if not m or not k or not n or not nr or m * k * 4 <= ctx.machine.l2_bytes:
        return 0
    rows = ctx.machine.l2_bytes // 2 // (k * 4) // mr * mr
    if rows < 2 * mr or rows >= m:
        return 0
    # Blocks of equal size (a last block of a few rows would leave one core idle at the end
    # of the parallel loop: 1024 rows in blocks of 252 ran 15% slower on two cores).
    blocks = -(-m // rows)
    per_block = -(-m // blocks)
    rows = -(-per_block // mr) * mr
    unblocked = -(-n // nr) * m * k + k * n       # A once per panel, B once
    blocked = m * k + -(-m // rows) * k * n       # A once, B once per block
    return rows if blocked < unblocked else 0


def row_block_options(m: Optional[int], mr: int) -> List[int]:
    """Row blocks the tuner may try: 2 to 64 row tiles, fewer than all of ``m``."""
    if not m:
        return []
    return [t * mr for t in (2, 4, 8, 16, 32, 64) if t * mr < m]


# A byte of A that the other core wrote costs about this many bytes of B streamed from L3: the
# GPT-style decoder's projections (64 rows) split by rows when N <= 8 x 64 (the attention
# output and MLP down projections, 256 columns: 1t unchanged, 2t 5-15% faster per kernel)
# and by columns when wider (QKV, 768; the MLP up projection, 1024: 5-18% slower by rows).
REMOTE_BYTE_COST = 8


def split_rows(m: Optional[int], k: Optional[int], n: Optional[int], mr: int, ctx: PassContext) -> bool:
    """Whether a matmul ``m x k x n`` splits its row blocks (of ``mr`` rows) among the threads
    instead of its column blocks: per thread, a column split reads all of A (``m x k``), the
    part other cores wrote from their caches, and ``1/cores`` of B; a row split ``1/cores`` of
    A and all of B, once per row block (the row blocks are then the outer loop), so B must
    stay in L2 across the row blocks while A, C and the next kernel's weights stream past it.
    So rows when ``REMOTE_BYTE_COST x A >= B``, B takes at most a quarter of L2 (half was too
    much: with 2 MiB of L2 the decoder's 64 x 1024 x 256 went by rows, its 1 MiB of B
    re-read from L3 by every row block, and the model ran 1.5-3.5% slower at one thread than
    split by columns), and there are row blocks for twice the cores. 64 x 256 x 256:
    rows; 64 x 256 x 1024: columns; 1024 x 1024 x 1024: columns (B is 4 MiB); 1 row:
    columns."""
    if ctx.cores < 2 or not m or not k or not n:
        return False
    return REMOTE_BYTE_COST * m * k >= k * n and 4 * k * n <= ctx.machine.l2_bytes // 4 \
        and -(-m // mr) >= 2 * ctx.cores


# A product whose B element serves fewer rows than this waits on B's stream from memory more
# than on its multiply-adds: a decode step's 1 x 256 x 768 projection took 27 us on one thread,
# as long as a register tile doing 8 times its multiply-adds. Its work is weighed so when
# deciding whether it runs in parallel (two threads: 27 -> 14 us; onnxruntime splits it too).
STREAMED_B_COST = 8


# Vector multiply-adds per trip of a register tile's K loop, at most (``k_unroll``). A step of
# the tile is 12 FMAs on AVX2 (6 x 16) or 24 on AVX-512 (6 x 64), with its loads; the loop's own
# add, add and branch per trip share ports 0 and 1 with the FMAs on Intel cores. Constant B,
# one thread, GFLOP/s, one step a trip -> the default (four on AVX2, two on AVX-512):
# AVX-512 1024^3 147 -> 165, 64 x 256 x 768 160 -> 172, 49 x 4608 x 1000 123 -> 132; AVX2
# (a Xeon running -mcpu=haswell code; OpenBLAS's Haswell kernels in brackets) 1024^3 73 -> 87
# (79), 577 x 768 x 3072 68 -> 79 (82), 64 x 1024 x 256 98 -> 114 (94). Four steps on AVX-512
# (96 FMAs a trip) were no faster than two, and on 577 x 768 x 3072 half as fast.
TRIP_FMAS = 48
K_STEPS = (1, 2, 4)


def k_unroll_options(steps: int) -> List[int]:
    """The K steps a trip may run (the decision ``ku``'s options): those dividing ``steps``."""
    return [u for u in K_STEPS if steps % u == 0]


def k_unroll(step_fmas: int, options=K_STEPS) -> int:
    """K steps a trip of the tile's loop runs (``ku``): the most of ``options`` whose
    multiply-adds stay within ``TRIP_FMAS`` (12-FMA AVX2 steps: 4; 24-FMA AVX-512 steps: 2).

    >>> k_unroll(12), k_unroll(24), k_unroll(40)
    (4, 2, 1)
    """
    return max(u for u in options if u == 1 or u * step_fmas <= TRIP_FMAS)


# The widest strip of B's rows a one-row product walks: its sums (4 B a column) stay in L1.
STRIP_MOST = 4096
# Rows of B added to a piece of the strip's sums (a panel's width) at a time: the piece's sums
# stay in registers across the rows (OpenBLAS's gemv adds 4 columns of its matrix at a time,
# the same idea), and that many rows stream from memory at once. 8 rather than 4: 1 x 4096 x
# 4096 on AMD Zen 4, strips of 2048, AVX-512 code 10.5 -> 13.0 GFLOP/s at one thread and 21.0
# -> 22.7 at two (numpy 15.6 / 22.4), AVX2 code 11.1 -> 13.5 and 24.6 -> 34.9; 16 rows were
# slower than 8 (12.4 / 18.2).
STRIP_ROWS = 8


def strip_widths(n: Optional[int], ctx: PassContext) -> List[int]:
    """The strip widths a one-row product may walk B's rows in (``walk_strip``): multiples of
    the panel width dividing ``n``, from 256 columns (1 KiB of a row, what a register tile
    reads) to ``STRIP_MOST``."""
    if not n:
        return []
    w = ctx.pack_lanes
    return [s for s in range(w, min(n, STRIP_MOST) + 1, w) if n % s == 0 and s >= max(256, 2 * w)]


def walk_strip(k: Optional[int], n: Optional[int], ctx: PassContext) -> int:
    """For a one-row product ``x @ B`` (``1 x k x n``) with B given at run time: the width of the
    strips of B's rows it walks, or 0 for the register tile. The tile reads 1 KiB of each of
    B's rows, the rows ``4n`` bytes apart: the L2 streamer prefetches within a 4 KiB page, so
    each row's first lines miss. A strip reads 4-16 KiB of each row, and its sums live in L1,
    ``STRIP_ROWS`` rows added to each 64-column piece of them at a time. Only when B does not
    fit in half of L2 (else the tile is faster); one strip per core, or the fewest strips of
    at most ``STRIP_MOST`` columns. 1 x 4096 x 4096 on 2 cores: strips of 2048, 9.4 -> 13.5
    GFLOP/s on one AVX-512 core (numpy 14.4), 18.7 -> 28.9 on two (numpy 28.0)."""
    if not k or not n or 4 * k * n <= ctx.machine.l2_bytes // 2:
        return 0
    fits = [s for s in strip_widths(n, ctx) if n // s >= ctx.cores]
    return max(fits, default=0)


def schedule_contraction(sch: Schedule, c: Contraction, ctx: PassContext, kind: str,
                         decide: Optional[Decisions] = None) -> str:
    """Apply the register-tile recipe (module docstring); returns a description. Its choices
    are ``decide``'s: ``nr`` (vector width, when the weight is not packed), ``mr`` (rows),
    ``cols`` (column blocks of a one-row tile), ``kc`` (reduction chunk of a matmul, 0: none;
    ``k_block``), ``parallel`` (how many outer loops are fused into the parallel loop; 0:
    serial), ``split`` (a matmul's parallel loop over column blocks or row blocks;
    ``split_rows``), ``strip`` and ``strip_rows`` (a one-row product with B given at run time:
    the width of the strips of B's rows it walks, 0: the register tile; ``walk_strip``),
    ``prefetch`` (a packed weight split by column panels: the next panel fetched)."""
    decide = decide if decide is not None else Decisions()
    info = c.info
    loops = [LoopRV(f.loop_var) for f in info.loops]
    extents = [static_extent(f) for f in info.loops]
    out_buf = info.written()[0]
    v_ext = extents[c.v]
    nr = c.packed or vector_tile(v_ext, ctx.pack_lanes)
    if not c.packed and nr is not None and v_ext is not None and nr % ctx.simd_lanes \
            and -v_ext % ctx.pack_lanes <= v_ext // 8:
        # No multiple of the vector width divides the axis (1,000 columns): full panels and a
        # guarded last one (its lanes masked only there) when that pads the axis by at most an
        # eighth, rather than tiles of a divisor (5 x 50) whose every row ends in a partial
        # vector: 49 x 4608 x 1000 with B given at run time 49 -> 100 GFLOP/s on one AVX-512
        # core. 200 columns keep 50-wide tiles: 64-wide ones would compute 256.
        nr = ctx.pack_lanes
    if not c.packed and nr is not None and v_ext is not None:
        widths = [w for w in range(ctx.simd_lanes, ctx.pack_lanes + 1, ctx.simd_lanes)
                  if w <= v_ext and v_ext % w == 0]
        nr = decide.choose("nr", widths + [nr], default=nr)
    packs_here = any(b.annotated(PACK_ANNOTATION) for b in block_infos(sch.func))
    strip = 0
    if kind == "matmul" and not c.packed and not packs_here and len(c.reduce) == 1 \
            and extents[c.reduce[0]] is not None \
            and all(extents[k] == 1 for k in c.spatial if k != c.v):
        options = strip_widths(v_ext, ctx)
        if options:
            strip = decide.choose("strip", [0] + options,
                                  default=walk_strip(extents[c.reduce[0]], v_ext, ctx))
            nr = strip or nr
    if c.u is None:
        mr = 1
    elif c.rows_packed:
        mr = c.rows_packed
    else:
        if kind == "matmul":
            # Rows by the tile cost model: 64 rows get 6 x 16 on AVX2 (12 accumulators, 10
            # tiles and a guarded one), which streams the packed panel past 1.5x more FMAs
            # per load than 4 x 16.
            mr = matmul_tile_rows(extents[c.u], nr, ctx)
        elif extents[c.u] is None:
            # A symbolic row count (batch x sequence of a dynamic-shape model): a full tile of
            # rows, the last tile guarded (split's T.where), rather than one row at a time.
            mr = tile_rows(nr, ctx)
        else:
            want = tile_rows(nr, ctx)
            mr = divisor_at_most(extents[c.u], want)
            if mr < want < extents[c.u]:
                mr = want   # 50 rows: tiles of 4 and a guarded last one, not tiles of 2
        most = max(1, ctx.tile_accumulators // vectors(nr, ctx))
        if extents[c.u] is not None:
            most = min(most, extents[c.u])
        mr = decide.choose("mr", list(range(1, most + 1)) + [mr], default=mr)

    # Split the vector and row axes into an outer (tile) and inner (register) part.
    v0 = v1 = u0 = u1 = None
    if nr is not None and v_ext is not None and nr < v_ext:
        v0, v1 = sch.split(loops[c.v], [None, nr])
    elif nr is not None:
        v1 = loops[c.v]
    if c.u is not None and mr > 1:
        if extents[c.u] is None or mr < extents[c.u]:
            u0, u1 = sch.split(loops[c.u], [None, mr])
        else:
            u1 = loops[c.u]
    cols = 1
    if u1 is None and v0 is not None:
        # No rows to unroll (one row, or a symbolic number of them): unroll over several
        # column blocks instead, so that several accumulators are in flight.
        blocks = -(-v_ext // nr)
        fits = [c2 for c2 in (8, 4, 2) if 1 < c2 < blocks and blocks % c2 == 0
                and c2 * vectors(nr, ctx) <= ctx.tile_accumulators]
        # Of the two, the one that leaves the cores equal shares of column blocks (12 panels,
        # a QKV projection of width 768: 6 blocks of 2, not 3 of 4 split 2:1 on two cores).
        preferred = [c2 for c2 in (ctx.tile_rows, 2) if c2 in fits]
        cols = next((c2 for c2 in preferred if blocks // c2 % ctx.cores == 0),
                    preferred[0] if preferred else 1)
        cols = decide.choose("cols", [1] + fits, default=cols)
        if cols > 1:
            v0, u1 = sch.split(v0, [None, cols])
    outer: List[LoopRV] = []
    for k in c.spatial:
        if k == c.v:
            if v0 is not None:
                outer.append(v0)
            elif v1 is None:
                outer.append(loops[k])
        elif k == c.u and u1 is not None and cols == 1:
            if u0 is not None:
                outer.append(u0)
        else:
            outer.append(loops[k])
    by_rows = False
    if kind == "matmul" and v0 is not None and u0 is not None:
        k_ext = extents[c.reduce[0]] if len(c.reduce) == 1 else None
        # Only for a kernel that will run in parallel; not for a batch of products, whose batch
        # loops run in parallel (a Winograd GEMM split by rows inside each of its 36 products
        # ran ResNet-18 10% slower); not with B packed in the kernel (each core would pack
        # every panel into the one panel buffer).
        batch = [extents[k] for k in c.spatial if k not in (c.u, c.v)]
        rows = split_rows(extents[c.u], k_ext, v_ext, mr, ctx) and all(e == 1 for e in batch) \
            and math.prod(e for e in extents if e is not None) >= ctx.parallel_min_elements * 16
        if not packs_here:
            by_rows = decide.choose("split", ["cols", "rows"],
                                    default="rows" if rows else "cols") == "rows"
        # Column blocks outside row blocks: one (packed) panel of B serves every row block.
        # Split by rows, the row blocks go outside: the parallel loop; every row block then
        # reads all of B, which ``split_rows`` keeps to a quarter of L2.
        iu, iv = outer.index(u0), outer.index(v0)
        if (iu < iv) != by_rows:
            outer[iu], outer[iv] = outer[iv], outer[iu]
    inner = [x for x in (u1, v1) if x is not None]
    reduce = [loops[k] for k in c.reduce]
    mc = 0
    if kind == "matmul" and not by_rows and not packs_here and v0 is not None \
            and u0 is not None and outer and outer[-1] is u0 and len(c.reduce) == 1:
        m_ext, k_ext = extents[c.u], extents[c.reduce[0]]
        default = row_block(m_ext, k_ext, v_ext, mr, nr, ctx)
        mc = decide.choose("mc", [0] + row_block_options(m_ext, mr) + [default], default=default)
    if mc:
        # Blocks of rows outside the column blocks (module docstring).
        mo, u0 = sch.split(u0, [None, mc // mr])
        iv = outer.index(v0)
        outer = outer[:iv] + [mo] + outer[iv:-1] + [u0]
    kc = 0
    if kind == "matmul" and len(reduce) == 1 and v0 is not None and u0 is not None \
            and outer and outer[-1] is u0:
        k_ext = extents[c.reduce[0]]
        a_rows = mc or extents[c.u]       # A's rows that stream past each panel
        kc = decide.choose("kc", [0] + k_block_options(k_ext),
                           default=k_block(k_ext, nr, ctx, a_rows))
    if kc:
        # Chunks of K between the column block and the row blocks (module docstring).
        ko, ki = sch.split(reduce[0], [None, kc])
        outer = outer[:-1] + [ko, outer[-1]]
        reduce = [ki]
    sch.reorder(*(outer + reduce + inner))
    strip_rows = 1
    if strip:
        # Per group of rows of B, per piece of the strip: the piece's sums in registers across
        # the rows (``walk_strip``).
        k_ext = extents[c.reduce[0]]
        row_counts = [r for r in (1, 2, 4, 8) if k_ext % r == 0]
        strip_rows = decide.choose("strip_rows", row_counts,
                                   default=max(r for r in row_counts if r <= STRIP_ROWS))
        k0, k1 = sch.split(reduce[0], [None, strip_rows])
        piece, v1 = sch.split(v1, [None, ctx.pack_lanes])
        sch.reorder(k0, piece, k1, v1)
        sch.unroll(k1)
        reduce = [k0]

    k_in = kc or extents[c.reduce[0]]
    if not strip and len(reduce) == 1 and u1 is not None and v1 is not None \
            and isinstance(k_in, int):
        # K steps unrolled (``k_unroll``): one trip of the loop runs ku steps of the tile. (Not
        # a conv's several reduction loops: a step of the outer one is a whole loop nest.)
        step = (mr if cols == 1 else cols) * vectors(nr, ctx)
        options = k_unroll_options(k_in)
        # (With K in chunks the tile's accumulators cross the chunks in a larger buffer;
        # ``lower.promote_accumulators`` keeps them in registers over each chunk's loop.)
        ku = decide.choose("ku", options, default=k_unroll(step, options))
        if ku > 1:
            k0, k1 = sch.split(reduce[0], [None, ku])
            sch.unroll(k1)
            reduce = [k0]
    # The tile accumulates in a local buffer; the epilogue joins its write-back.
    params = params_of(sch.func)
    write_back = sch.cache_write(info.rv, 0, "local")
    epilogue = "none"
    if out_buf not in params:
        left = []
        for e in consumers(sch.func, out_buf):
            if e.name == write_back.name:
                continue
            try:
                sch.reverse_compute_inline(e.rv)
                epilogue = "inlined"
            except ScheduleError:
                left.append(e)
        if left:
            epilogue = "separate"
    if strip:
        parts = [f"B's rows in strips of {strip}, {strip_rows} rows at a time"]
    else:
        parts = [f"tile {mr}x{nr or 1}" if cols == 1 else f"tile 1x{cols}x{nr}"]
    if kc:
        parts.append(f"k chunks of {kc}")
    if mc:
        parts.append(f"row blocks of {mc}")
    # The tile of C is written back after its reduction: per row block, or with K chunks
    # once per column block (the loop outside the chunks).
    at = outer[-3] if kc else (outer[-1] if outer else None)
    if at is not None:
        sch.reverse_compute_at(write_back, at)
        if epilogue == "separate":
            for e in consumers(sch.func, find(sch.func, write_back.name).written()[0]):
                try:
                    sch.reverse_compute_at(e.rv, at)
                    epilogue = "at tile"
                except ScheduleError:
                    pass
    init = sch.decompose_reduction(info.rv, outer[-2] if kc else reduce[0])
    if u1 is not None:
        sch.unroll(u1)
    if v1 is not None:
        sch.vectorize(v1)
        init_loops = sch.get_loops(init)
        sch.vectorize(init_loops[-1])
        if u1 is not None and len(init_loops) >= 2:
            sch.unroll(init_loops[-2])
        wb_loops = sch.get_loops(write_back)
        if wb_loops:
            sch.vectorize(wb_loops[-1])
    parts.append(f"epilogue {epilogue}")

    # Pack one panel per column block, right where it is used: with K in chunks, one chunk of
    # the panel at a time (768 x 64 floats stay in L2 between the pack and the row blocks that
    # read it; a whole panel of a 49 x 4608 x 1000 product, 1.2 MB, did not: 75 -> 87 GFLOP/s).
    for b in block_infos(sch.func):
        if b.annotated(PACK_ANNOTATION):
            target = v0 if v0 is not None and v0 in outer else None
            if target is not None and kc:
                target = ko
            if target is not None:
                try:
                    sch.compute_at(b.rv, target)
                    parts.append("pack per panel" if not kc else "pack per panel chunk")
                except ScheduleError:
                    parts.append("pack up front")
            else:
                parts.append("pack up front")
            pl = sch.get_loops(b.rv)
            if pl and static_extent(find(sch.func, b.name).loops[-1]):
                sch.vectorize(pl[-1])
    if c.packed:
        parts.append("packed weight")

    # Parallel over the outer loops but the innermost (where the tile is written back). A
    # symbolic extent (a prompt's tokens) counts as long, as it does for the tile's rows: a
    # 16-token prompt's QKV projection (16 x 256 x 768) ran on one thread when it counted 1.
    work = math.prod(e if e is not None else ctx.parallel_min_elements * 16 for e in extents)
    rows_ext = extents[c.u] if c.u is not None else None
    if kind == "matmul" and rows_ext is not None and rows_ext < STREAMED_B_COST:
        work *= STREAMED_B_COST // rows_ext
    if outer:
        # Outer loops but the last (where the tile is written back) run in parallel; when
        # they hold fewer iterations than twice the cores (a one-row matvec: its row loop has
        # one), the last joins them, so every core gets work.
        exts = [static_extent(f) for f in find(sch.func, info.name).loops[:len(outer)]]
        depth = len(outer[:-1] or outer[:1])
        tasks = math.prod(e if e is not None else 1 << 20 for e in exts[:depth])
        # (Not a symbolic last loop: fused with the others, its tile loop would be found by a
        # modulo, and lowering could not peel its guarded last tile off: the rows unrolled up to
        # a run-time bound, the accumulators in memory.)
        if tasks < 2 * ctx.cores and exts[-1] is not None:
            depth = len(outer)
        default = depth if work >= ctx.parallel_min_elements * 16 else 0
        # With K chunks only the loops outside the chunks can run in parallel.
        most = len(outer) - 2 if kc else len(outer)
        default = min(default, most)
        depth = decide.choose("parallel", list(range(most + 1)), default=default)
        if depth:
            par = outer[:depth]
            loop = sch.fuse(*par) if len(par) > 1 else par[0]
            sch.parallel(loop)
            parts.append("parallel by rows" if by_rows else "parallel")
            weight = _packed_weight(c) if kind == "matmul" else None
            if weight is not None and not by_rows and not kc and not mc and u0 is not None \
                    and depth == len(outer) - 1 and outer[-1] is u0 \
                    and decide.choose("prefetch", [False, True], default=True):
                # Each row tile of a panel fetches part of the next panel (``prefetch.py``).
                fetched = prefetch_next_block(sch.func, info.name, weight, 1)
                if fetched is not None:
                    sch._set_body(fetched.body)
                    parts.append("prefetch next panel")
    # Blocks left at the root (conv padding, epilogues that could not move): elementwise rule.
    for b in block_infos(sch.func):
        serial = all(f.kind == "serial" for f in b.loops)
        if not b.is_reduction and _at_root(sch.func, b) and serial:
            schedule_spatial(sch, b.name, ctx, decide)
    return f"{kind}: " + ", ".join(parts)


def _packed_weight(c: Contraction):
    """The packed weight ``W[N / P, ..., K, P]`` a contraction reads along its vector axis."""
    last = c.info.store.indices[-1]
    for ld in collect(c.info.store.value, BufferLoad):
        if ld.buffer is not c.info.store.buffer and _panel(ld, last):
            return ld.buffer
    return None


def _at_root(func: PrimFunc, b: BlockInfo) -> bool:
    body = func.body.block.body
    tops = body.seq if hasattr(body, "seq") else (body,)
    return bool(b.loops) and any(b.loops[0] is t for t in tops)
