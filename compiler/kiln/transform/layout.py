"""Weight layout rewrite: packing the weight of a contraction into the order its register tile
reads it (DESIGN.md: "weight pre-packing done once at compile time"), and the tile shapes
that the packing and the schedule (``schedule_tile.py``) must agree on.

A weight is packed along one dimension ``d`` (the one the tile unrolls or vectorizes over):
``Wp[o, *rest, i] = W[... d = o*P + i ...]``, shape ``(ceil(S_d/P),) + rest + (P,)``. The
operator's compute reads the weight through a view ``W[idx] = Wp[idx[d] // P, rest, idx[d] % P]``
that the schedule inlines, so its loads become contiguous along the tile:

- ``linear`` ``W[N, K]`` packed along N by NR: panels ``[N/NR, K, NR]``, vector loads;
- ``matmul`` ``B[K, N]`` (2-D) packed along N by NR: the same panels;
- ``conv2d`` ``W[O, I, KH, KW]`` (groups = 1) packed along O by MR: ``[O/MR, I, KH, KW, MR]``,
  so the MR weights the tile broadcasts per step sit in one cache line;
- a channel-blocked ``conv2d`` (``conv_blocked.py``) packed along O by its channel block with
  the other dims reordered (``PackRule.rest``): ``[O/bn, KH, KW, I, bn]``.

When the weight is a Constant the pack is a separate ``call_tir`` that ``fold_constant``
evaluates at compile time; a run-time ``linear``/``matmul`` weight is packed inside its
kernel, one panel per column block, once enough rows reuse each panel, or, a ``matmul`` B
larger than half of L2 whose A does not fit in L2, by that same pack ``call_tir`` run just
before the product (``packs_ahead``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from .. import te
from ..ir import PrimFunc
from ..ir.expr import const
from ..ir.graph import Call, TensorType
from .infra import PassContext

@dataclass(frozen=True)
class PackRule:
    arg: int          # which argument is the weight
    dim: int          # the weight dimension split into panels
    layout: str       # a short name for kernel names: pack_<layout><P>
    by: str           # "cols": P is the vector width NR; "rows": P is the unrolled rows MR
    rest: Optional[Tuple[int, ...]] = None   # the other dims' order in the panel (None: as is)

    def order(self, ndim: int) -> Tuple[int, ...]:
        """The weight dims (other than ``dim``) in the order the packed weight holds them."""
        others = tuple(k for k in range(ndim) if k != self.dim)
        return others if self.rest is None else tuple(others[k] for k in self.rest)


PACK_RULES = {
    "linear": PackRule(1, 0, "nk", "cols"),
    "matmul": PackRule(1, 1, "kn", "cols"),
    "conv2d": PackRule(1, 0, "oihw", "rows"),
}


@dataclass(frozen=True)
class PackPlan:
    rule: PackRule
    shape: Tuple[int, ...]    # the weight's shape
    lanes: int                # P
    rows: Optional[int]       # rows of the input that reuse each panel (None: symbolic)

    @property
    def packed_shape(self) -> Tuple[int, ...]:
        d, s = self.rule.dim, self.shape
        rest = tuple(s[k] for k in self.rule.order(len(s)))
        return (-(-s[d] // self.lanes),) + rest + (self.lanes,)

    @property
    def name(self) -> str:
        return f"pack_{self.rule.layout}{self.lanes}"


# ---- tile shapes -------------------------------------------------------------------------------
def vector_tile(extent: Optional[int], want: int) -> Optional[int]:
    """The vector width NR for an output axis of ``extent``: ``want`` or ``want/2`` when it
    divides, else the largest divisor from ``want`` down to 4, else the whole axis when it is
    at most ``want``, else None (not vectorized)."""
    if extent is None or extent <= 1:
        return None
    for nr in (want, want // 2):
        if nr >= 4 and extent % nr == 0:
            return nr
    for nr in range(want, 3, -1):
        if extent % nr == 0:
            return nr
    return extent if extent <= want else None


def vectors(width: Optional[int], ctx: PassContext) -> int:
    """Vector registers one row of ``width`` float32 lanes takes on ``ctx``'s target."""
    return max(1, -(-(width or 1) // ctx.simd_lanes))


def tile_rows(nr: Optional[int], ctx: PassContext) -> int:
    """Rows MR of an NCHW conv's register tile: as many vector accumulators as ``tile_rows``
    rows of a ``pack_lanes``-wide tile use (4 x 16 floats = 8 AVX2 registers, 4 x 64 = 16
    AVX-512 ones: enough FMAs in flight to hide their latency), spread over rows of ``nr``;
    at most 8."""
    budget = min(ctx.tile_rows * vectors(ctx.pack_lanes, ctx), ctx.tile_accumulators)
    return max(1, min(8, budget // vectors(nr, ctx)))


# The cost model of a register tile's reduction step (shared with the conv tiles'
# ``conv_blocked.tile_score``): a step costs at least ``ctx.min_accumulators`` accumulators'
# worth of FMA issue slots (FMA pipes x latency: fewer accumulators leave pipes idle), plus
# STEP_OVERHEAD slots for the vector operand's loads, the loop and address updates.
STEP_OVERHEAD = 2


def row_tile_score(rows: int, vecs: int, mr: int, min_acc: int = 8) -> float:
    """Useful multiply-adds per issue slot of ``rows`` rows computed in tiles of ``mr`` rows x
    ``vecs`` vectors (higher is better). The rows take ``ceil(rows / mr)`` tiles, the last
    one guarded, and each tile step costs ``max(mr * vecs, min_acc) + STEP_OVERHEAD`` slots
    whether or not all its rows are real: so a tile that leaves a short last tile scores lower."""
    tiles = -(-rows // mr)
    return rows * vecs / (tiles * (max(mr * vecs, min_acc) + STEP_OVERHEAD))


def matmul_tile_rows(rows: Optional[int], nr: Optional[int], ctx: PassContext) -> int:
    """Rows MR of a matmul's register tile over ``rows`` output rows with ``nr``-wide vectors:
    the MR (at most half the vector registers: 8 on AVX2, 16 on AVX-512; with ``MR * vectors(nr)`` accumulators within
    ``ctx.tile_accumulators``) with the best ``row_tile_score``; on a tie the larger. MR need
    not divide ``rows``: the last tile is guarded (``split``) and lowering peels it off
    (``partition_loops``). A symbolic row count is scored as a long run (the most
    accumulators). E.g. on AVX2 (12 accumulators), 64 rows x 16 lanes: 6 (11 tiles of 12
    accumulators; 4 would be 16 tiles of 8); 32 rows: 4; 16 rows: 4. On AVX-512 (24
    accumulators of 16 lanes), 64 lanes wide: 6."""
    vecs = vectors(nr, ctx)
    # Each row's broadcast of A is a load and, without AVX-512's embedded broadcasts, a
    # register: rows are capped at half the register file.
    most = max(1, min(ctx.machine.vector_registers // 2, ctx.tile_accumulators // vecs))
    if rows is not None:
        most = min(most, rows)
    run = rows if rows is not None else 1 << 20
    return max(range(1, most + 1),
               key=lambda mr: (row_tile_score(run, vecs, mr, ctx.min_accumulators), mr))


def divisor_at_most(extent: Optional[int], want: int) -> int:
    """The largest of want, want/2, ..., 2 that divides ``extent`` (1 if none, or symbolic)."""
    if extent is None:
        return 1
    m = want
    while m >= 2:
        if m <= extent and extent % m == 0:
            return m
        m //= 2
    return 1


# ---- planning -------------------------------------------------------------------------------
def pack_plan(call: Call, ctx: PassContext) -> Optional[PackPlan]:
    """How to pack ``call``'s weight, or None when it has no rule or does not fit one."""
    rule = PACK_RULES.get(call.op)
    if rule is None or len(call.args) <= rule.arg:
        return None
    w_ty, x_ty = call.args[rule.arg].ty, call.args[0].ty
    if not isinstance(w_ty, TensorType) or not isinstance(x_ty, TensorType):
        return None
    shape = w_ty.static_shape()
    x_shape = x_ty.static_shape()
    if shape is None or rule.dim >= len(shape):
        return None
    if rule.by == "cols":
        if len(shape) != 2 or shape[rule.dim] < ctx.pack_lanes // 2:
            return None   # narrower than half a panel: packing would mostly copy zeros
        rows = None if x_shape is None else int(np.prod(x_shape[:-1], dtype=np.int64))
        options, lanes = panel_options(shape[rule.dim], rows, ctx)
        if ctx.tuning_db and x_shape is not None:
            from ..tune.layers import PANEL, recorded_choice
            lanes = recorded_choice(call, ctx, PANEL, options) or lanes
        return PackPlan(rule, shape, lanes, rows)
    # conv2d: MR output channels per tile, as the schedule will pick them from the width.
    if dict(call.attrs).get("groups", 1) != 1 or not isinstance(call.ty, TensorType):
        return None
    out = call.ty.static_shape()
    if out is None:
        return None
    lanes = divisor_at_most(shape[0], tile_rows(vector_tile(out[-1], ctx.pack_lanes), ctx))
    return PackPlan(rule, shape, lanes, None) if lanes > 1 else None


# Input rows up to which a weight may be packed in panels wider than the register tile's
# vector (``panel_options``).
WIDE_PANEL_ROWS = 4


def panel_options(n: int, rows: Optional[int], ctx: PassContext) -> Tuple[List[int], int]:
    """(the panel widths a ``linear``/``matmul`` weight of ``n`` columns may be packed in,
    the default): ``pack_lanes`` and half of it where they divide ``n``, and ``pack_lanes``
    with a padded last panel where it does not (the default: the first that divides, unless
    padding to ``pack_lanes`` adds at most an eighth); for at most ``WIDE_PANEL_ROWS`` input
    rows also 2 and 4 times ``pack_lanes`` (a matrix-vector product's tile spans several
    panels, each a stream of its own; one wide panel is one stream). The tuner's ``panel``
    decision picks among them (``tune/layers.py``)."""
    lanes = ctx.pack_lanes
    fits = [p for p in (lanes, lanes // 2) if p >= 4 and n % p == 0]
    default = fits[0] if fits else lanes
    if n % lanes and (-n % lanes) * 8 <= n:
        # Full panels and a padded last one when that adds at most an eighth, rather than
        # half-width panels: 1,000 columns on AVX2 in panels of 8 got 8 x 8 tiles of one vector
        # per row (a load per FMA); in 16s, 5 x 16 tiles: 49 x 4608 x 1000 with B constant
        # 68 -> 85 GFLOP/s on one core (OpenBLAS 80).
        default = lanes
    options = fits + ([lanes] if lanes not in fits else [])
    if rows is not None and rows <= WIDE_PANEL_ROWS:
        options += [p for p in (2 * lanes, 4 * lanes) if n % p == 0]
    return options, default


# ---- the te computes --------------------------------------------------------------------------
def pack_compute(w: te.Tensor, plan: PackPlan) -> te.Tensor:
    """``Wp`` from ``w``; a last partial panel is padded with zeros."""
    d, p, size = plan.rule.dim, plan.lanes, plan.shape[plan.rule.dim]
    order = plan.rule.order(len(plan.shape))

    def value(o, *rest):
        *others, i = rest
        c = o * p + i
        # Clamped so that padding lanes never index past the weight (Select evaluates both
        # sides in the reference evaluator).
        idx = [None] * len(plan.shape)
        idx[d] = c if size % p == 0 else te.min(c, size - 1)
        for k, v in zip(order, others):
            idx[k] = v
        idx = tuple(idx)
        if size % p == 0:
            return w[idx]
        return te.if_then_else(c < size, w[idx], const(0, w.dtype))
    return te.compute(plan.packed_shape, value, name="pack_weight")


def unpack_view(wp: te.Tensor, plan: PackPlan) -> te.Tensor:
    """The weight as the operator expects it, read from the packed ``wp``."""
    d, p = plan.rule.dim, plan.lanes
    order = plan.rule.order(len(plan.shape))

    def value(*idx):
        rest = tuple(idx[k] for k in order)
        return wp[(idx[d] // p,) + rest + (idx[d] % p,)]
    return te.compute(plan.shape, value, name="weight_view")


# Attributes of a pack kernel saying what it does, so that fold_constant can run it with numpy
# (``pack_array``) instead of the element-by-element reference evaluator: a weight of a large
# model would take minutes there.
ATTR_PACK_DIM, ATTR_PACK_LANES = "kiln.pack_dim", "kiln.pack_lanes"
ATTR_PACK_ORDER = "kiln.pack_order"


def pack_kernel(w_ty: TensorType, plan: PackPlan) -> PrimFunc:
    """The PrimFunc ``(W, Wp)`` writing the packed weight (run by fold_constant)."""
    w = te.placeholder(plan.shape, w_ty.dtype, name="W")
    func = te.create_prim_func([w, pack_compute(w, plan)])
    attrs = dict(func.attrs)
    attrs.update({ATTR_PACK_DIM: plan.rule.dim, ATTR_PACK_LANES: plan.lanes})
    if plan.rule.rest is not None:
        attrs[ATTR_PACK_ORDER] = tuple(plan.rule.order(len(plan.shape)))
    return PrimFunc(func.params, func.body, tuple(attrs.items()))


def pack_array(w: np.ndarray, dim: int, lanes: int, order=None) -> np.ndarray:
    """What ``pack_kernel`` computes, with numpy: ``Wp[o, *rest, i] = W[.. o*P + i ..]``,
    zero-padded to whole panels; ``order`` lists the other dims in the order ``rest`` holds
    them (None: as they are)."""
    size = w.shape[dim]
    panels = -(-size // lanes)
    pad = [(0, 0)] * w.ndim
    pad[dim] = (0, panels * lanes - size)
    wp = np.pad(w, pad) if pad[dim][1] else w   # no padding: no copy before the one below
    wp = wp.reshape(w.shape[:dim] + (panels, lanes) + w.shape[dim + 1:])
    # axes of wp: the weight's dims with dim split into (panels, lanes) at dim, dim + 1
    axis = [k if k < dim else k + 1 for k in range(w.ndim)]
    rest = [axis[k] for k in (order if order is not None else
                              [k for k in range(w.ndim) if k != dim])]
    return np.array(wp.transpose([dim] + rest + [dim + 1]), order="C")   # always a new array


def fold_pack(func: PrimFunc, inputs) -> Optional[np.ndarray]:
    """The packed array if ``func`` is a pack kernel (see ``pack_kernel``), else None."""
    attrs = dict(func.attrs)
    if ATTR_PACK_DIM not in attrs or len(inputs) != 1:
        return None
    return pack_array(np.asarray(inputs[0]), attrs[ATTR_PACK_DIM], attrs[ATTR_PACK_LANES],
                      attrs.get(ATTR_PACK_ORDER))


def packs_in_kernel(plan: PackPlan, ctx: PassContext) -> bool:
    """Whether a weight that arrives at run time is packed inside its kernel (panel by panel,
    as bench/matmul.py does): for linear and 2-D matmul, once enough rows reuse each panel
    (linear also when the row count is symbolic).
    (Without it, linear reads W[N, K] with strided gathers and a large matmul walks B[K, N]
    a few cache lines per row of K.) A last partial panel is padded with zeros when that adds
    at most an eighth: lowering splits the parallel panel loop so that only the last panel
    pays for the guard (49 x 4608 x 1000 with B at run time, on a Xeon: 96 -> 166 GFLOP/s at
    two threads)."""
    size = plan.shape[plan.rule.dim]
    if plan.rule.by != "cols" or (size % plan.lanes and (-size % plan.lanes) * 8 > size):
        return False        # small or odd weights stay as they are
    if plan.rows is None:   # a symbolic row count: linear's strided gathers are the worse bet
        return plan.rule.layout == "nk"
    return plan.rows >= ctx.pack_min_rows


def packs_ahead(plan: PackPlan, ctx: PassContext) -> bool:
    """Whether a run-time ``matmul`` B that its kernel would pack (``packs_in_kernel``) is
    packed instead by a kernel of its own just before the product: when neither B (half of
    L2) nor A (all of it) fits in L2. The product then reads B packed, as it reads a constant
    weight, and takes A in row blocks that stay in L2 (``schedule_tile.row_block``), where
    packing panel by panel inside the kernel streams all of A past each panel. The pack
    kernel reads B a block of rows at a time (``schedule_pack``). 1024^3 compiled for AVX2 on
    a Xeon: 61 -> 90 GFLOP/s on one core (OpenBLAS 96); on AVX-512 0.95 -> 1.01 of numpy.
    Not when A fits: 49 x 4608 x 1000 lost more to writing and re-reading its 18 MB packed B
    than it gained (AVX-512: 86 -> 55 GFLOP/s)."""
    if plan.rule.layout != "kn" or plan.rows is None or not packs_in_kernel(plan, ctx):
        return False
    k, n = plan.shape
    return 4 * k * n > ctx.machine.l2_bytes // 2 and 4 * plan.rows * k > ctx.machine.l2_bytes
