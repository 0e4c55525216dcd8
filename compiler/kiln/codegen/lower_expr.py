"""Lowering of tensor-IR expressions and buffer accesses to LLVM IR (a dispatch table on node
type), for scalar code and for the inside of vectorized loops alike.

Values. A lowered expression is one of
  * an ``ir.Value`` scalar: the same in every lane ("uniform");
  * an ``ir.Value`` vector: one element per lane of the vectorized loop ("varying");
  * an ``Affine(base, stride)``: an integer whose lane k holds ``base + stride*k``. The
    vectorized loop variable starts as ``Affine(start, 1)``; add/sub/mul-by-constant keep the
    form, and so do ``//`` and ``%`` by a constant where the lanes stay within one multiple
    of it, so a buffer index can be recognised as contiguous (stride 1: one vector load),
    uniform (stride 0: one scalar load, splatted) or neither (a gather).

Integers. Loop variables, block iterators and symbolic dimensions are held in i64 even when
their dtype is int32, so index arithmetic is 64-bit throughout (no sign extensions in address
computations, and the ``nsw`` flags let LLVM reason about induction variables). An int32
value may therefore be held wider than its dtype; it is truncated where a value of exactly its
dtype is needed (stores, casts). Overflow of int32/int64 index arithmetic is undefined (as in
C); narrower integer dtypes (int8/int16/uint8) wrap.

Floats. fadd/fsub/fmul carry the ``contract`` flag, so LLVM may fuse ``a*b + c`` into one FMA
(like ``-ffp-contract=fast``): one rounding instead of two, which is what makes matmul inner
loops run at FMA throughput. No other fast-math flag is set: NaN, inf and signed zeros keep
IEEE semantics.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
from llvmlite import ir

from ..ir import dtype as dt
from ..ir.expr import (BITWISE_INTRINSICS, Add, And, BufferLoad, Call, Cast, Div, EQ, FloatImm, FloorDiv, FloorMod, GE,
                       GT, IntImm, LE, LT, Max, Min, Mul, NE, Not, Or, Select, Sub, Var)
from ..ir.functor import pre_order_visit
from . import cgutils as cg
from . import mathfuncs, narrow_float
from .errors import CodegenError

CONTRACT = ("contract",)
# Loads with a constant lane stride up to this are contiguous loads plus shuffles
# (``_strided_load``); larger strides gather.
MAX_SHUFFLE_STRIDE = 4


def _lanes_const(idx):
    """A shufflevector mask."""
    return ir.Constant(ir.VectorType(ir.IntType(32), len(idx)), [int(i) for i in idx])


@dataclass(frozen=True)
class Affine:
    """An integer that is ``base + stride * k`` in lane k of the current vectorized loop;
    ``base`` is known to be a multiple of ``align`` (1: nothing known). A vector loop's chunks
    start at multiples of its width, which is what lets ``i // 16`` over 8 lanes from such a
    start be one value (``_floor_divmod``)."""
    base: ir.Value
    stride: int
    align: int = 1


@dataclass(frozen=True)
class VecState:
    """Lowering is inside a vectorized loop chunk of ``lanes`` lanes, of which ``mask`` (an i1
    vector, or None for all) are active."""
    lanes: int
    mask: Optional[ir.Value] = None


@dataclass
class BufInfo:
    """Where a buffer lives: its data pointer and row-major strides (ints or i64 values)."""
    ptr: ir.Value
    strides: list


_SIGNED: dict = {}


def _signed(dtype: str) -> bool:
    r = _SIGNED.get(dtype)
    if r is None:
        r = _SIGNED[dtype] = not (dt.is_uint(dtype) or dt.is_bool(dtype))
    return r


class ExprLowerer:
    """Expression half of the function lowerer. Needs ``self.b`` (IRBuilder), ``self.vars``
    (Var -> value), ``self.bufs`` (Buffer -> BufInfo) and ``self.vec`` (VecState or None)."""

    b: ir.IRBuilder
    vec: Optional[VecState]
    # Loop variables of unrolled loops left to LLVM (FuncLowerer sets it): selects on them stay
    # selects, for LLVM to fold per copy (_select).
    llvm_unrolled: frozenset = frozenset()

    # ---- entry points ----------------------------------------------------------------------
    def expr(self, e):
        """Lower ``e`` to a scalar, vector or Affine value."""
        rule = _RULES.get(type(e))
        if rule is None:
            raise CodegenError(f"codegen cannot lower expression {type(e).__name__}: {e!r}")
        return rule(self, e)

    def value(self, e):
        """Lower ``e`` to a plain LLVM value (an Affine becomes a vector)."""
        return self.materialize(self.expr(e))

    def scalar_index(self, e):
        """Lower a uniform integer expression (a loop bound, a shape) to a scalar i64."""
        v = self.expr(e)
        if isinstance(v, Affine) or cg.is_vector(v):
            raise CodegenError(f"expression {e!r} varies across the lanes of a vectorized loop "
                               "but is used where one value is needed (a loop bound or shape)")
        return self._widen(v, 64, _signed(e.dtype))

    def materialize(self, v):
        if not isinstance(v, Affine):
            return v
        lanes = self.vec.lanes
        return self.b.add(cg.broadcast(self.b, v.base, lanes),
                          cg.iota(v.base.type, lanes, 0, v.stride), flags=("nsw",))

    # ---- operand plumbing --------------------------------------------------------------------
    def _widen(self, v, width: int, signed: bool):
        """Bring an integer value to ``width`` bits (values are never narrowed here)."""
        if isinstance(v, Affine):
            return Affine(self._widen(v.base, width, signed), v.stride, v.align)
        have = cg.int_width(v.type)
        if have >= width:
            return v
        ty = cg.with_lanes(ir.IntType(width), cg.lanes_of(v))
        c = cg.constant_int(v)
        if c is not None:
            return ir.Constant(ty, c if signed or c >= 0 else c + (1 << have))
        return self.b.sext(v, ty) if signed else self.b.zext(v, ty)

    def _pair(self, a, b, dtype: str):
        """Materialise two operands and give them one type (int width, lane count)."""
        a, b = self.materialize(a), self.materialize(b)
        if a.type is b.type:
            return a, b            # the common case: nothing to widen or broadcast
        if not cg.is_float_type(a.type):
            w = max(cg.int_width(a.type), cg.int_width(b.type))
            a, b = self._widen(a, w, _signed(dtype)), self._widen(b, w, _signed(dtype))
        lanes = max(cg.lanes_of(a), cg.lanes_of(b))
        return cg.broadcast(self.b, a, lanes), cg.broadcast(self.b, b, lanes)

    def fit(self, v, dtype: str):
        """A value of exactly ``dtype``'s register type (truncating a widened int)."""
        v = self.materialize(v)
        want = cg.with_lanes(cg.scalar_type(dtype), cg.lanes_of(v))
        if v.type == want or cg.is_float_type(want):
            return v
        if cg.int_width(v.type) > cg.int_width(want):
            return self.b.trunc(v, want)
        return self._widen(v, cg.int_width(want), _signed(dtype))

    def _iarith(self, op: str, a, b, dtype: str):
        """Integer add/sub/mul keeping the Affine form where possible."""
        builder = self.b
        if isinstance(a, Affine) or isinstance(b, Affine):
            sa, sb = (a.stride if isinstance(a, Affine) else 0), (b.stride if isinstance(b, Affine) else 0)
            ba, bb = (a.base if isinstance(a, Affine) else a), (b.base if isinstance(b, Affine) else b)
            if not cg.is_vector(ba) and not cg.is_vector(bb):
                if op in ("add", "sub"):
                    base = self._iarith(op, ba, bb, dtype)
                    stride = sa + sb if op == "add" else sa - sb
                    align = math.gcd(_align_of(a), _align_of(b))
                    return Affine(base, stride, align) if stride else base
                c = cg.constant_int(bb) if sb == 0 else (cg.constant_int(ba) if sa == 0 else None)
                if c is not None:
                    aff = a if isinstance(a, Affine) else b
                    base = self._iarith("mul", aff.base, ir.Constant(aff.base.type, c), dtype)
                    return Affine(base, aff.stride * c, aff.align * abs(c) or 1) \
                        if aff.stride * c else base
        a, b = self._pair(a, b, dtype)
        ca, cb = cg.constant_int(a), cg.constant_int(b)
        if ca is not None and cb is not None or op == "mul" and (ca == 0 or cb == 0):
            # Fold here what LLVM would fold anyway (index arithmetic of unrolled copies is
            # mostly constant): less IR to build, print, parse and optimize. Wraps like the
            # instruction would.
            w = a.type.width
            r = 0 if op == "mul" and (ca == 0 or cb == 0) else \
                {"add": int.__add__, "sub": int.__sub__, "mul": int.__mul__}[op](ca, cb)
            r &= (1 << w) - 1
            if w > 1 and r >> (w - 1):
                r -= 1 << w
            return ir.Constant(a.type, r)
        if op == "mul" and (ca == 1 or cb == 1):
            return b if ca == 1 else a
        if op in ("add", "sub") and cb == 0:
            return a
        if op == "add" and ca == 0:
            return b
        # Widened (index) arithmetic cannot overflow in a valid program: say so, for LLVM.
        flags = ("nsw",) if cg.int_width(a.type) > dt.bits(dtype) else ()
        return getattr(builder, op)(a, b, flags=flags)

    # ---- memory ------------------------------------------------------------------------------
    def buf(self, buffer) -> BufInfo:
        try:
            return self.bufs[buffer]
        except KeyError:
            raise CodegenError(f"buffer '{buffer.name}' is used but is neither a parameter of the "
                               "function nor allocated by an enclosing block") from None

    def offset(self, buffer, indices):
        """The flat (row-major) element offset of ``buffer[indices]`` in i64."""
        info = self.buf(buffer)
        if len(indices) != len(info.strides):
            raise CodegenError(f"buffer '{buffer.name}' has {len(info.strides)} dimensions but is "
                               f"indexed with {len(indices)}")
        off = cg.I64(0)
        for idx, stride in zip(indices, info.strides):
            v = self._widen(self.expr(idx), 64, _signed(idx.dtype))
            s = cg.I64(stride) if isinstance(stride, int) else stride
            off = self._iarith("add", off, self._iarith("mul", v, s, "int32"), "int32")
        return off

    def load(self, buffer, indices):
        info = self.buf(buffer)
        mty = cg.memory_type(buffer.dtype)
        align = max(1, dt.bits(buffer.dtype) // 8)
        off = self.offset(buffer, indices)
        b = self.b
        if dt.is_subbyte(buffer.dtype):
            return self._load_subbyte(buffer, info, off)
        if isinstance(off, Affine) and off.stride == 1:
            ptr = b.gep(info.ptr, [off.base], inbounds=True, source_etype=mty)
            vty = ir.VectorType(mty, self.vec.lanes)
            if self.vec.mask is None:
                v = b.load(ptr, typ=vty, align=align)
            else:
                fn = cg.intrinsic(b.module, "llvm.masked.load", vty, [cg.PTR, cg.I32, self.vec.mask.type, vty],
                                  [vty, cg.PTR])
                v = b.call(fn, [ptr, cg.I32(align), self.vec.mask, ir.Constant(vty, ir.Undefined)])
        elif isinstance(off, Affine) and self.vec.mask is None and self.vec.lanes > 1 \
                and 2 <= off.stride <= MAX_SHUFFLE_STRIDE:
            v = self._strided_load(info.ptr, off, mty, align)
        elif isinstance(off, Affine) or cg.is_vector(off):
            v = self._gather(info.ptr, self.materialize(off), mty, align)
        else:
            v = b.load(b.gep(info.ptr, [off], inbounds=True, source_etype=mty), typ=mty, align=align)
        if dt.is_bool(buffer.dtype):
            v = b.icmp_unsigned("!=", v, cg.const_like(v, 0))
        return v

    # Sub-byte elements (int4/uint4/int2/uint2) are fields of a byte: element i is bits
    # [(i % per) * w, (i % per + 1) * w) of byte i // per (per = 8 // w). A loop touching such a
    # buffer is never vectorized or run in parallel (FuncLowerer._for): two lanes or threads
    # writing fields of one byte would race on its read-modify-write. So these are scalar.
    def _field(self, buffer, off):
        """(byte address, bit shift) of the element at flat offset ``off`` of a sub-byte buffer."""
        if isinstance(off, Affine) or cg.is_vector(off):
            raise CodegenError(f"buffer '{buffer.name}' of {buffer.dtype} is accessed in a vectorized "
                               "loop; sub-byte elements are read and written one at a time")
        b, w = self.b, dt.bits(buffer.dtype)
        per_log2 = (8 // w).bit_length() - 1
        byte = b.ashr(off, cg.I64(per_log2))
        shift = b.mul(b.and_(off, cg.I64((1 << per_log2) - 1)), cg.I64(w))
        return b.gep(self.buf(buffer).ptr, [byte], inbounds=True, source_etype=cg.I8), b.trunc(shift, cg.I8)

    def _load_subbyte(self, buffer, info, off):
        ptr, shift = self._field(buffer, off)
        byte = self.b.load(ptr, typ=cg.I8, align=1)
        return self.b.trunc(self.b.lshr(byte, shift), cg.scalar_type(buffer.dtype))

    def _store_subbyte(self, buffer, info, off, v):
        b = self.b
        ptr, shift = self._field(buffer, off)
        mask = b.shl(cg.I8((1 << dt.bits(buffer.dtype)) - 1), shift)
        old = b.load(ptr, typ=cg.I8, align=1)
        new = b.or_(b.and_(old, b.not_(mask)), b.shl(b.zext(v, cg.I8), shift))
        b.store(new, ptr, align=1)

    def _strided_load(self, base, off: "Affine", mty, align):
        """Lanes ``base + stride * k`` (small constant stride, every lane active) as contiguous
        vector loads of the span they cover, picked out with shuffles: a stride-2 pool or conv
        reads two vectors and shuffles once instead of gathering lane by lane. The loads stay
        inside the span from the first lane's element to the last one's, which a gather of
        the same lanes touches too."""
        lanes, stride, b = self.vec.lanes, off.stride, self.b
        vty = ir.VectorType(mty, lanes)
        need = stride * (lanes - 1) + 1
        starts = list(range(0, need - lanes + 1, lanes))
        if starts[-1] + lanes < need:
            starts.append(need - lanes)      # the last chunk ends at the last lane's element
        chunks = [b.load(b.gep(base, [b.add(off.base, cg.I64(st)) if st else off.base],
                               inbounds=True, source_etype=mty), typ=vty, align=align)
                  for st in starts]
        # The chunk (and the lane in it) each result lane comes from: the first that holds it.
        src = []
        for k in range(lanes):
            e = stride * k
            c = next(i for i, st in enumerate(starts) if st <= e < st + lanes)
            src.append((c, e - starts[c]))
        if len(chunks) == 1:
            return b.shuffle_vector(chunks[0], chunks[0], _lanes_const([lane for _, lane in src]))
        # Lanes of chunks not merged yet take a placeholder (0) and are overwritten later.
        result = b.shuffle_vector(chunks[0], chunks[1], _lanes_const(
            [lane if ch == 0 else lanes + lane if ch == 1 else 0 for ch, lane in src]))
        for c in range(2, len(chunks)):
            result = b.shuffle_vector(result, chunks[c], _lanes_const(
                [lanes + lane if ch == c else k for k, (ch, lane) in enumerate(src)]))
        return result

    def _vector_ptrs(self, base, offs, mty):
        ptrs = self.b.gep(base, [offs], inbounds=True, source_etype=mty)
        ptrs.type = ir.VectorType(cg.PTR, offs.type.count)  # llvmlite types vector GEPs as scalar
        return ptrs

    def _all_or_mask(self, lanes):
        return self.vec.mask if self.vec.mask is not None else cg.const(ir.VectorType(cg.I1, lanes), 1)

    def _gather(self, base, offs, mty, align):
        lanes = offs.type.count
        vty = ir.VectorType(mty, lanes)
        ptrs = self._vector_ptrs(base, offs, mty)
        mask = self._all_or_mask(lanes)
        fn = cg.intrinsic(self.b.module, "llvm.masked.gather", vty, [ptrs.type, cg.I32, mask.type, vty],
                          [vty, ptrs.type])
        return self.b.call(fn, [ptrs, cg.I32(align), mask, ir.Constant(vty, ir.Undefined)])

    def store(self, buffer, value, indices):
        info = self.buf(buffer)
        mty = cg.memory_type(buffer.dtype)
        align = max(1, dt.bits(buffer.dtype) // 8)
        b = self.b
        v = self.fit(self.expr(value), buffer.dtype)
        off = self.offset(buffer, indices)
        if dt.is_subbyte(buffer.dtype):
            return self._store_subbyte(buffer, info, off, v)
        if dt.is_bool(buffer.dtype):
            v = b.zext(v, cg.with_lanes(cg.I8, cg.lanes_of(v)))
        if self.vec is None or not (isinstance(off, Affine) or cg.is_vector(off)):
            if cg.is_vector(v):  # a uniform address in a vectorized loop: the last lane wins
                if self.vec.mask is not None:
                    raise CodegenError(f"store to '{buffer.name}' at an index that does not vary with "
                                       "the vectorized loop, under a lane-dependent condition")
                v = b.extract_element(v, cg.I32(cg.lanes_of(v) - 1))
            b.store(v, b.gep(info.ptr, [off], inbounds=True, source_etype=mty), align=align)
            return
        lanes = self.vec.lanes
        v = cg.broadcast(b, v, lanes)
        if isinstance(off, Affine) and off.stride == 1:
            ptr = b.gep(info.ptr, [off.base], inbounds=True, source_etype=mty)
            if self.vec.mask is None:
                b.store(v, ptr, align=align)
            else:
                fn = cg.intrinsic(b.module, "llvm.masked.store", ir.VoidType(),
                                  [v.type, cg.PTR, cg.I32, self.vec.mask.type], [v.type, cg.PTR])
                b.call(fn, [v, ptr, cg.I32(align), self.vec.mask])
            return
        if isinstance(off, Affine) and self.vec.mask is None:
            # A constant stride (a channel-blocked conv's write-back into NCHW planes): one
            # scalar store per lane at a constant offset from one address. LLVM would scalarize
            # a scatter too, but through a vector of pointers (vector adds and an extract per
            # lane); here each store is an extract to [base + k * stride].
            for k in range(lanes):
                at = b.add(off.base, cg.I64(k * off.stride)) if k else off.base
                b.store(b.extract_element(v, cg.I32(k)),
                        b.gep(info.ptr, [at], inbounds=True, source_etype=mty), align=align)
            return
        # Scatter: lanes are written in order, so colliding addresses keep the last lane's
        # value, as a sequential loop would.
        ptrs = self._vector_ptrs(info.ptr, self.materialize(off), mty)
        mask = self._all_or_mask(lanes)
        fn = cg.intrinsic(b.module, "llvm.masked.scatter", ir.VoidType(), [v.type, ptrs.type, cg.I32, mask.type],
                          [v.type, ptrs.type])
        b.call(fn, [v, ptrs, cg.I32(align), mask])


# ---- expression rules: one function per node type ---------------------------------------------

def _var(self: ExprLowerer, e: Var):
    try:
        return self.vars[e]
    except KeyError:
        raise CodegenError(f"variable '{e.name}' is used outside the scope that binds it (not a "
                           "loop variable, block iterator or symbolic dimension of a parameter)") from None


def _int_imm(self, e: IntImm):
    return ir.Constant(cg.scalar_type(e.dtype), int(e.value))


def _float_imm(self, e: FloatImm):
    if dt.is_narrow_float(e.dtype):   # held as bits: the nearest value's encoding
        bits = np.asarray(float(e.value), np.float32).astype(dt.to_numpy(e.dtype))
        return ir.Constant(cg.scalar_type(e.dtype), int(bits.view(f"uint{max(8, dt.bits(e.dtype))}")))
    return ir.Constant(cg.scalar_type(e.dtype), float(e.value))


def _arith(op_int: str, op_float: str):
    def rule(self: ExprLowerer, e):
        a, b = self.expr(e.a), self.expr(e.b)
        if dt.is_float(e.dtype):
            a, b = self._pair(a, b, e.dtype)
            return getattr(self.b, op_float)(a, b, flags=CONTRACT)
        return self._iarith(op_int, a, b, e.dtype)
    return rule


def _div(self: ExprLowerer, e: Div):
    if not dt.is_float(e.dtype):
        raise CodegenError(f"'/' on {e.dtype} values is not defined; use FloorDiv ('//'): {e!r}")
    a, b = self._pair(self.expr(e.a), self.expr(e.b), e.dtype)
    return self.b.fdiv(a, b)


def _floor_divmod(is_mod: bool):
    def rule(self: ExprLowerer, e):
        a, b = self.expr(e.a), self.expr(e.b)
        c = cg.constant_int(b) if not isinstance(b, Affine) else None
        if isinstance(a, Affine) and c and c > 0 and a.stride % c == 0:
            # (base + s*k) // c == base // c + (s/c)*k exactly when c divides s.
            q = _int_floordiv(self, a.base, ir.Constant(a.base.type, c), True, is_mod)
            return q if is_mod or a.stride == 0 else Affine(q, a.stride // c)
        if isinstance(a, Affine) and c and c > 0 and _within_one_multiple(self, a, c):
            # Every lane in [base // c * c, that + c): the quotient is base's (uniform), the
            # remainder base's plus s*k. A permute's index (i1 // 16, i1 % 16 over 8 or 16
            # lanes of a chunk starting at a multiple of 16) loads a vector instead of a gather
            # (AVX-512) or a lane at a time (AVX2): ConvNeXt's NCHW16c -> rows copy 32 -> 14 us on
            # AVX-512, 91 -> 16 us on AVX2.
            q = _int_floordiv(self, a.base, ir.Constant(a.base.type, c), True, is_mod)
            return Affine(q, a.stride, math.gcd(a.align, c)) if is_mod else q
        a, b = self._pair(a, b, e.dtype)
        if dt.is_float(e.dtype):
            return _float_floordiv(self.b, a, b, is_mod)
        return _int_floordiv(self, a, b, _signed(e.dtype), is_mod)
    return rule


def _align_of(v) -> int:
    """What ``v`` (an Affine or a scalar) is known to be a multiple of: an Affine's ``align``,
    a constant's value (0: a multiple of everything), else 1."""
    if isinstance(v, Affine):
        return v.align
    c = cg.constant_int(v) if not cg.is_vector(v) else None
    return 1 if c is None else abs(c)


def _within_one_multiple(self, a: Affine, c: int) -> bool:
    """Whether all lanes of ``a`` (stride >= 0) lie between the same two multiples of ``c``:
    from base's residue mod c (known when base is a constant, else at most ``c - gcd(align,
    c)``) the last lane adds ``stride * (lanes - 1)``."""
    if self.vec is None or a.stride < 0:
        return False
    span = a.stride * (self.vec.lanes - 1)
    base = cg.constant_int(a.base)
    if base is not None:
        return base % c + span < c
    return span < math.gcd(a.align, c)


def _int_floordiv(self, a, b, signed: bool, is_mod: bool):
    bl = self.b
    if self.vec is not None and self.vec.mask is not None and cg.is_vector(b):
        # Inactive lanes hold whatever a masked load left there; integer division traps on a
        # zero divisor, so give those lanes a harmless one.
        b = bl.select(self.vec.mask, b, cg.const_like(b, 1))
    if not signed:
        return bl.urem(a, b) if is_mod else bl.udiv(a, b)
    c = cg.constant_int(b)
    if c is not None and c > 0 and c & (c - 1) == 0:  # power of two: shifts are exact floors
        return bl.and_(a, cg.const_like(a, c - 1)) if is_mod else bl.ashr(a, cg.const_like(a, c.bit_length() - 1))
    q, r = bl.sdiv(a, b), bl.srem(a, b)
    zero = cg.const_like(r, 0)
    # C division truncates; floor differs when the remainder is non-zero and its sign differs
    # from the divisor's.
    fix = bl.and_(bl.icmp_signed("!=", r, zero), bl.icmp_signed("<", bl.xor(r, b), zero))
    if is_mod:
        return bl.add(r, bl.select(fix, b, zero))
    return bl.sub(q, bl.zext(fix, q.type))


def _float_floordiv(bl: ir.IRBuilder, a, b, is_mod: bool):
    """numpy's floor_divide / remainder on floats (npy_divmod), branch-free."""
    zero = cg.const_like(a, 0.0)
    mod = bl.frem(a, b)
    fix = bl.and_(bl.fcmp_ordered("!=", mod, zero),
                  bl.icmp_unsigned("!=", bl.fcmp_ordered("<", b, zero), bl.fcmp_ordered("<", mod, zero)))
    if is_mod:
        m = bl.select(fix, bl.fadd(mod, b), mod)
        return bl.select(bl.fcmp_ordered("==", m, zero), cg.call_intrinsic(bl, "llvm.copysign", zero, b), m)
    div = bl.fdiv(bl.fsub(a, mod), b)
    div = bl.select(fix, bl.fsub(div, cg.const_like(a, 1.0)), div)
    fl = cg.call_intrinsic(bl, "llvm.floor", div)
    fl = bl.select(bl.fcmp_ordered(">", bl.fsub(div, fl), cg.const_like(a, 0.5)),
                   bl.fadd(fl, cg.const_like(a, 1.0)), fl)
    quot = bl.fdiv(a, b)
    res = bl.select(bl.fcmp_ordered("!=", div, zero), fl, cg.call_intrinsic(bl, "llvm.copysign", zero, quot))
    return bl.select(bl.fcmp_ordered("==", b, zero), quot, res)


def _minmax(is_min: bool):
    def rule(self: ExprLowerer, e):
        a, b = self._pair(self.expr(e.a), self.expr(e.b), e.dtype)
        # Python's min(a, b) keeps a unless b < a (max: unless b > a); this select is also the
        # exact semantics of x86 minps/maxps, so it costs one instruction.
        op = "<" if is_min else ">"
        if dt.is_float(e.dtype):
            c = self.b.fcmp_ordered(op, b, a)
        elif _signed(e.dtype):
            c = self.b.icmp_signed(op, b, a)
        else:
            c = self.b.icmp_unsigned(op, b, a)
        return self.b.select(c, b, a)
    return rule


_SWAPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_FOLD = {"<": int.__lt__, "<=": int.__le__, ">": int.__gt__, ">=": int.__ge__, "==": int.__eq__,
         "!=": int.__ne__}


def _affine_compare(self: ExprLowerer, op: str, a, b):
    """``base + s*k OP c`` as ``s*k OP (c - base)``: one compare of a constant i32 vector with a
    splatted scalar, instead of materialising 64-bit lane indices (split-loop predicates)."""
    if not isinstance(a, Affine):
        a, b, op = b, a, _SWAPPED[op]
    if isinstance(b, Affine):
        if b.stride != a.stride:
            return None
        return self.b.icmp_signed(op, *self._pair(a.base, b.base, "int64"))  # lane-independent
    if cg.is_vector(b) or abs(a.stride) * self.vec.lanes >= 2 ** 31:
        return None
    bl = self.b
    d = self._iarith("sub", self._widen(b, 64, True), self._widen(a.base, 64, True), "int32")
    lo, hi = cg.I64(-2 ** 31), cg.I64(2 ** 31 - 1)   # saturate: lanes' offsets fit in i32
    d = bl.select(bl.icmp_signed("<", d, lo), lo, bl.select(bl.icmp_signed(">", d, hi), hi, d))
    d = cg.broadcast(bl, bl.trunc(d, cg.I32), self.vec.lanes)
    return bl.icmp_signed(op, cg.iota(cg.I32, self.vec.lanes, 0, a.stride), d)


def _compare(op: str):
    def rule(self: ExprLowerer, e):
        a, b = self.expr(e.a), self.expr(e.b)
        if (isinstance(a, Affine) or isinstance(b, Affine)) and _signed(e.a.dtype):
            r = _affine_compare(self, op, a, b)
            if r is not None:
                return r
        ca, cb = cg.constant_int(a), cg.constant_int(b)
        if ca is not None and cb is not None and _signed(e.a.dtype):
            # Constant indices (unrolled loops): fold, so that a Select on them lowers one arm.
            return ir.Constant(cg.I1, int(_FOLD[op](ca, cb)))
        a, b = self._pair(a, b, e.a.dtype)
        if dt.is_float(e.a.dtype):  # != is true on NaN, the others false (IEEE, like numpy)
            return (self.b.fcmp_unordered if op == "!=" else self.b.fcmp_ordered)(op, a, b)
        if _signed(e.a.dtype):
            return self.b.icmp_signed(op, a, b)
        return self.b.icmp_unsigned(op, a, b)
    return rule


def _logic(op: str):
    def rule(self: ExprLowerer, e):
        a, b = self._pair(self.expr(e.a), self.expr(e.b), e.dtype)
        return getattr(self.b, op)(a, b)
    return rule


def _not(self: ExprLowerer, e: Not):
    a = self.value(e.a)
    if cg.int_width(a.type) != 1:
        a = self.b.icmp_unsigned("!=", a, cg.const_like(a, 0))
    return self.b.not_(a)


def _select(self: ExprLowerer, e: Select):
    cond = self.value(e.condition)
    if cg.constant_int(cond) is not None:   # a folded condition: only its arm is lowered
        return self.expr(e.true_value if cg.constant_int(cond) else e.false_value)
    if not cg.is_vector(cond) and self.vec is not None and self.vec.lanes > 1 \
            and dt.is_float(e.dtype) and _contains(e.true_value, _is_load) \
            and _contains(e.false_value, _is_load) \
            and not _contains(e.condition, lambda n: isinstance(n, Var) and n in self.llvm_unrolled):
        return _select_by_branch(self, cond, e)
    t, f = self._pair(self.expr(e.true_value), self.expr(e.false_value), e.dtype)
    if cg.is_vector(cond) and not cg.is_vector(t):
        t, f = cg.broadcast(self.b, t, cond.type.count), cg.broadcast(self.b, f, cond.type.count)
    return self.b.select(cond, t, f)


def _is_load(n) -> bool:
    return isinstance(n, BufferLoad)


def _contains(e, pred) -> bool:
    """Whether a node of expression ``e`` satisfies ``pred``. (Used by _select: a select on the
    index of a loop that LLVM unrolls is folded by LLVM once each copy's index is a constant;
    made a branch, the Winograd transforms, whose matrix rows are such selects, ran 5-9%
    slower.)"""
    found = []
    pre_order_visit(e, lambda n: False if found else (found.append(n) if pred(n) else None))
    return bool(found)


def _select_by_branch(self: ExprLowerer, cond, e: Select):
    """A select of vectors on one condition for all their lanes, both arms reading memory,
    lowered as a branch: only the arm taken is computed. A concat's element is a chain of
    selects, one per part, each arm a load of its part (clamped inside it, since a select
    computes both arms): as selects, a vector of DenseNet's concats loaded from every part (LLVM
    turns a select of two loads into a load of a selected address only where the arms are
    plain loads); branched, it loads one: DenseNet-121's 14- and 31-part concats (with the
    batch norm and relu after them) 19% and 33% faster, the model 1-3%. A select of a load and
    a constant (a conv's zero padding) stays a select: both arms are cheap."""
    b = self.b
    arms = [b.append_basic_block("select.true"), b.append_basic_block("select.false")]
    end = b.append_basic_block("select.end")
    b.cbranch(cond, *arms)
    values, ends = [], []
    for block, arm in zip(arms, (e.true_value, e.false_value)):
        b.position_at_end(block)
        values.append(self.materialize(self.expr(arm)))
        ends.append(b.block)
    lanes = max(cg.lanes_of(v) for v in values)
    for k, block in enumerate(ends):
        b.position_at_end(block)
        values[k] = cg.broadcast(b, values[k], lanes)
        b.branch(end)
    b.position_at_end(end)
    phi = b.phi(values[0].type)
    for v, block in zip(values, ends):
        phi.add_incoming(v, block)
    return phi


def _cast(self: ExprLowerer, e: Cast):
    src, dst = e.value.dtype, e.dtype
    v = self.expr(e.value)
    if dt.element(src) == dt.element(dst):
        return v
    if isinstance(v, Affine) and dt.is_int(src) and dt.is_int(dst):
        return Affine(convert(self.b, v.base, src, dst), v.stride, v.align)
    return convert(self.b, self.materialize(v), src, dst)


def convert(b: ir.IRBuilder, v, src: str, dst: str):
    """Convert ``v`` (of dtype ``src``, possibly held in a wider int) to dtype ``dst``."""
    if dt.is_narrow_float(src) or dt.is_narrow_float(dst):
        return narrow_float.convert(b, v, src, dst, convert)
    lanes = cg.lanes_of(v)
    to = cg.with_lanes(cg.scalar_type(dst), lanes)
    if dt.is_bool(dst):
        if dt.is_float(src):   # NaN is truthy, as in Python
            return b.fcmp_unordered("!=", v, cg.const_like(v, 0.0))
        return b.icmp_unsigned("!=", v, cg.const_like(v, 0))
    if dt.is_float(src) and dt.is_float(dst):
        fb, tb = dt.bits(src), dt.bits(dst)
        return v if fb == tb else (b.fpext(v, to) if tb > fb else b.fptrunc(v, to))
    if dt.is_float(dst):
        return b.sitofp(v, to) if _signed(src) else b.uitofp(v, to)
    if dt.is_float(src):
        # Saturating conversion (NaN -> 0, no poison), then wrap to narrower types like numpy's
        # astype does for in-range-of-int32 values.
        wide = cg.I64 if dt.bits(dst) == 64 else cg.I32
        wty = cg.with_lanes(wide, lanes)
        r = cg.call_intrinsic(b, "llvm.fptosi.sat", v, ret=wty, mangle=[wty, v.type])
        return r if wide.width == dt.bits(dst) else b.trunc(r, to)
    have, want = cg.int_width(v.type), dt.bits(dst)
    if have == want:
        return v
    if have > want:
        return b.trunc(v, to)
    return b.sext(v, to) if _signed(src) else b.zext(v, to)


def _bitwise(self: "ExprLowerer", e: Call, args):
    """The bitwise intrinsics on integers and bools (``ir.expr.BITWISE_INTRINSICS``)."""
    b = self.b
    if dt.is_float(e.dtype):
        raise CodegenError(f"intrinsic {e.op} needs integer or bool arguments, got {e.dtype}: {e!r}")
    x = self.fit(args[0], e.dtype)
    if e.op == "bitwise_not":
        return b.not_(x)
    x, y = self._pair(x, self.fit(args[1], e.dtype), e.dtype)
    if e.op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        return {"bitwise_and": b.and_, "bitwise_or": b.or_, "bitwise_xor": b.xor}[e.op](x, y)
    # Shifts: LLVM's result is poison for an amount outside [0, width); ONNX's (and numpy's) is
    # every bit shifted out: 0, or the sign for an arithmetic right shift.
    width = dt.bits(e.dtype)
    ok = b.icmp_unsigned("<", y, cg.const_like(y, width))   # negative amounts are huge unsigned
    if e.op == "shift_right" and _signed(e.dtype):
        return b.ashr(x, b.select(ok, y, cg.const_like(y, width - 1)))
    r = b.shl(x, y) if e.op == "shift_left" else b.lshr(x, y)
    return b.select(ok, r, cg.const_like(r, 0))


def _reinterpret(self: "ExprLowerer", e: Call, x):
    """The bits of ``x`` as ``e.dtype`` (same width). A bool is one byte in memory (0 or 1) but
    an i1 in registers: widened first, or tested against 0 when it is the result."""
    src, dst = e.args[0].dtype, e.dtype
    b = self.b
    x = self.fit(x, src)
    lanes = cg.lanes_of(x)       # (a vectorized loop's chunk: the value is a vector)
    if dt.is_bool(src):
        x = b.zext(x, cg.with_lanes(cg.I8, lanes))
    if dt.is_bool(dst):
        y = b.bitcast(x, cg.with_lanes(cg.I8, lanes))
        return b.icmp_unsigned("!=", y, cg.const_like(y, 0))
    return b.bitcast(x, cg.with_lanes(cg.scalar_type(dst), lanes))


def _prefetch(self: ExprLowerer, e: Call):
    """``llvm.prefetch`` of the address its BufferLoad argument would read (read, into L2:
    locality 2, as ``prefetcht1``); the value is 0."""
    load = e.args[0]
    if not isinstance(load, BufferLoad):
        raise CodegenError(f"prefetch takes a buffer element, got {load!r}")
    b = self.b
    off = self.offset(load.buffer, load.indices)
    if isinstance(off, Affine):     # in a vectorized loop: the first lane's line
        off = off.base
    if cg.is_vector(off):
        raise CodegenError(f"prefetch of a gathered address: {e!r}")
    ptr = b.gep(self.buf(load.buffer).ptr, [off], inbounds=True,
                source_etype=cg.memory_type(load.buffer.dtype))
    fn = cg.intrinsic(b.module, "llvm.prefetch", ir.VoidType(),
                      [cg.PTR, cg.I32, cg.I32, cg.I32], [cg.PTR])
    b.call(fn, [ptr, cg.I32(0), cg.I32(2), cg.I32(1)])
    return cg.I32(0)


def _call(self: ExprLowerer, e: Call):
    if e.op == "prefetch":
        return _prefetch(self, e)
    b = self.b
    args = [self.value(a) for a in e.args]
    if e.op in BITWISE_INTRINSICS:
        return _bitwise(self, e, args)
    if e.op == "reinterpret":
        return _reinterpret(self, e, args[0])
    if e.op == "abs" and not dt.is_float(e.dtype):
        x = self.fit(args[0], e.dtype)
        if not _signed(e.dtype):
            return x
        return cg.call_intrinsic(b, "llvm.abs", x, extra=[cg.I1(0)])
    if not dt.is_float(e.dtype):
        raise CodegenError(f"intrinsic {e.op} needs float arguments, got {e.dtype}: {e!r}")
    args = [self.fit(a, e.dtype) for a in args]
    x = args[0]
    if e.op in mathfuncs._FUNCS:
        return mathfuncs.apply(b, e.op, x)
    if e.op == "rsqrt":
        return b.fdiv(cg.const_like(x, 1.0), cg.call_intrinsic(b, "llvm.sqrt", x))
    if e.op == "pow":
        x, y = self._pair(x, args[1], e.dtype)
        return cg.call_intrinsic(b, "llvm.pow", x, y)
    name = {"sqrt": "llvm.sqrt", "abs": "llvm.fabs", "floor": "llvm.floor", "ceil": "llvm.ceil",
            "round": "llvm.roundeven", "sin": "llvm.sin", "cos": "llvm.cos"}[e.op]
    return cg.call_intrinsic(b, name, x)


_RULES = {
    Var: _var, IntImm: _int_imm, FloatImm: _float_imm,
    Add: _arith("add", "fadd"), Sub: _arith("sub", "fsub"), Mul: _arith("mul", "fmul"),
    Div: _div, FloorDiv: _floor_divmod(False), FloorMod: _floor_divmod(True),
    Min: _minmax(True), Max: _minmax(False),
    EQ: _compare("=="), NE: _compare("!="), LT: _compare("<"), LE: _compare("<="),
    GT: _compare(">"), GE: _compare(">="),
    And: _logic("and_"), Or: _logic("or_"), Not: _not, Select: _select, Cast: _cast,
    BufferLoad: lambda self, e: self.load(e.buffer, e.indices),
    Call: _call,
}
