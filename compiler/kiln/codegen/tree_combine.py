"""The combine step of an ``rfactor``-ed row reduction, lowered as a tree of vector operations.

``schedule_row_reduce`` leaves each row reduction as ``lanes`` vector partials and a short
serial loop that folds them into the row's result; after ``lower.opaque_blocks`` it reads::

    S[0] = T.float32(0)
    for k in range(32):
        S[0] = S[0] + S_rf[0, k]

Lowered as written, that is a chain of 32 dependent adds (about 4 cycles each): 128 cycles a
row, more than the vector part of a 256-wide layer norm takes, twice per row (mean and
variance; softmax's max and sum). Here such a loop becomes one vector load of the partials and
``log2(lanes)`` steps that each combine the two halves of the vector (5 steps for 32 partials),
then one combine with ``S``'s value. The rfactor already reassociated the reduction; this
reassociates its last step the same way (a pairwise sum, as numpy's ``sum`` does).

The same store in a loop the schedule's rfactor could not split is lowered as a vector of
partials, a vector of ``x`` at a time and the last one masked, then the same tree
(``lower_reduction``): a loop over a symbolic extent (a softmax over a prompt's keys; the 4
attention kernels of a 64-token prompt 403 -> 306 µs), or over a constant extent that no
vector width divides (the softmax over 60 or 197 keys) when ``x`` reads its operands
contiguously along the loop (else lanes would be gathers).

Which loops: serial, from 0, of a constant power-of-two extent from 4 to 64 (a combine step),
or any other serial loop as above (a reduction), whose body is one store ``S[i] = S[i] op x``
(op ``+``, ``max`` or ``min`` on float32 or float64; ``x + S[i]`` too) where ``i`` does not
vary with the loop and ``x`` does not read ``S``. Anything else is lowered as a serial loop.
The result is the serial loop's up to rounding: sums are reassociated, and ``max`` and
``min`` skip NaNs in ``x`` as the serial loop's selects do.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from llvmlite import ir

from ..arith import unit_step
from ..ir.expr import Add, BufferLoad, Max, Min, PrimExpr, Var
from ..ir.functor import collect, pre_order_visit, uses_var
from ..ir.stmt import BufferStore, For
from . import cgutils as cg
from .lower_expr import Affine, VecState
from .vectorize import _same

_OPS = (Add, Max, Min)
# ``S = max(S, x)`` lowers to ``x > S ? x : S``: a NaN in x never wins, so the serial loop's
# result is the largest value that is not NaN (or S's start). maxnum gives that for any
# pairing of the halves too; a plain select would keep a NaN that lands on its left.
_NAN_IGNORING = {Max: "llvm.maxnum", Min: "llvm.minnum"}
MIN_LANES, MAX_LANES = 4, 64


@dataclass(frozen=True)
class Combine:
    """A matched loop's store ``S[i] = S[i] op x``, and ``x``; ``reduction``: the loop is a
    whole reduction (``lower_reduction``), else a combine step (``lower_combine``)."""
    store: BufferStore
    x: PrimExpr
    reduction: bool = False


def _reads(e, buffer) -> bool:
    found = []
    pre_order_visit(e, lambda n: found.append(n) if isinstance(n, BufferLoad) and n.buffer is buffer else None)
    return bool(found)


def match_combine(loop: For) -> Optional[Combine]:
    """The ``Combine`` that ``loop`` is (module docstring), or None."""
    if loop.kind != "serial":
        return None
    n = getattr(loop.extent, "value", None)
    combine = n is not None and getattr(loop.min, "value", None) == 0 and \
        MIN_LANES <= n <= MAX_LANES and not n & (n - 1)
    st = loop.body
    if not isinstance(st, BufferStore) or st.buffer.dtype not in ("float32", "float64") or \
            type(st.value) not in _OPS or any(uses_var(i, loop.loop_var) for i in st.indices):
        return None
    v = st.value
    acc = BufferLoad(st.buffer, st.indices)
    if isinstance(v.a, BufferLoad) and _same(v.a, acc):
        x = v.b
    elif isinstance(v.b, BufferLoad) and _same(v.b, acc) and type(v) is Add:
        x = v.a
    else:
        return None
    if _reads(x, st.buffer) or not uses_var(x, loop.loop_var):
        return None
    if n is not None and not combine and not _contiguous(x, loop.loop_var):
        return None
    return Combine(st, x, reduction=not combine)


def _contiguous(x, var) -> bool:
    """Every load in ``x`` that ``var`` moves steps along its last index by 1."""
    return all(not any(uses_var(i, var) for i in ld.indices[:-1]) and unit_step(ld.indices[-1], var)
               for ld in collect(x, BufferLoad) if uses_var(ld, var))


def lower_combine(fl, loop: For, c: Combine) -> None:
    """Lower the combine loop ``loop`` matched as ``c`` (module docstring) into ``fl``."""
    n = loop.extent.value
    # All of x as one vector: the loop runs over its lanes.
    fl.vec = VecState(n)
    fl.vars[loop.loop_var] = Affine(fl._iarith("add", fl.scalar_index(loop.min), cg.I64(0), "int32"), 1)
    x = fl.value(c.x)
    fl.vec = None
    fl.vars.pop(loop.loop_var)
    _store(fl, c, _tree(fl, x, n, type(c.store.value)))


def lower_reduction(fl, loop: For, c: Combine) -> None:
    """Lower a reduction loop ``S[i] = S[i] op x`` (a softmax over a prompt's keys) as one
    vector of partials: ``x`` a vector at a time (the last vector masked, its idle lanes the
    op's identity), then the tree of ``lower_combine`` and one combine with ``S``. Like the
    rfactor a row gets at schedule time when a vector width divides it; the rfactor cannot
    split a symbolic extent or a constant one no width divides (its last partials would not
    all be initialized)."""
    b = fl.b
    dtype = c.store.buffer.dtype
    op = type(c.store.value)
    lanes = fl.m.target.lanes(64 if dtype == "float64" else 32)
    if lanes < 2 or getattr(loop.extent, "value", lanes) < lanes:
        # (a target without vectors, or a constant row shorter than one vector)
        return fl.serial_loop(loop)
    vty = ir.VectorType(cg.scalar_type(dtype), lanes)
    identity = ir.Constant(vty, [_IDENTITY[op]] * lanes)
    acc = cg.entry_alloca(b, vty, name="partials")
    b.store(identity, acc)
    lo, ext = fl.scalar_index(loop.min), fl.scalar_index(loop.extent)
    full = b.sdiv(ext, cg.I64(lanes))

    def chunk(start, mask=None):
        fl.vec = VecState(lanes, mask)
        fl.vars[loop.loop_var] = Affine(fl._iarith("add", lo, start, "int32"), 1)
        x = fl.value(c.x)
        fl.vec = None
        if mask is not None:
            x = b.select(mask, x, identity)
        b.store(_combine(b, op, b.load(acc, typ=vty), x), acc)

    with cg.for_range(b, cg.I64(0), full, name=loop.loop_var.name + ".vec") as k:
        chunk(b.mul(k, cg.I64(lanes), flags=("nsw",)))
    done = b.mul(full, cg.I64(lanes), flags=("nsw",))
    rest = b.sub(ext, done)
    with b.if_then(b.icmp_signed(">", rest, cg.I64(0))):
        chunk(done, b.icmp_signed("<", cg.iota(cg.I64, lanes), cg.broadcast(b, rest, lanes)))
    fl.vars.pop(loop.loop_var)
    _store(fl, c, _tree(fl, b.load(acc, typ=vty), lanes, op))


# The start of each op's partials: what leaves the other operand as it is.
_IDENTITY = {Add: 0.0, Max: float("-inf"), Min: float("inf")}


def _combine(b, op, x, y):
    """``x op y`` lane by lane: an add, or max / min skipping NaNs (``_NAN_IGNORING``)."""
    return b.fadd(x, y) if op is Add else cg.call_intrinsic(b, _NAN_IGNORING[op], x, y)


def _tree(fl, x, n: int, op):
    """The ``n`` lanes of ``x`` combined pairwise, halves at a time, into a scalar."""
    b = fl.b
    while n > 1:
        n //= 2
        if n > 1:
            lower = b.shuffle_vector(x, x, _lanes(range(n)))
            upper = b.shuffle_vector(x, x, _lanes(range(n, 2 * n)))
        else:
            lower, upper = (b.extract_element(x, cg.I32(k)) for k in (0, 1))
        x = _combine(b, op, lower, upper)
    return x


def _store(fl, c: Combine, total) -> None:
    """``S[i] = S[i] op total``, in the store's own operand order."""
    op = type(c.store.value)
    tree = Var("tree", c.store.buffer.dtype)
    fl.vars[tree] = total
    acc = BufferLoad(c.store.buffer, c.store.indices)
    fl.store(c.store.buffer, op(tree, acc) if c.store.value.a is c.x else op(acc, tree), c.store.indices)
    fl.vars.pop(tree)


def _lanes(ks) -> ir.Constant:
    """A shufflevector mask selecting lanes ``ks``."""
    ks = list(ks)
    return ir.Constant(ir.VectorType(cg.I32, len(ks)), ks)
