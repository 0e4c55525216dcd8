"""Small llvmlite helpers shared by the lowering code (in the spirit of numba's cgutils):
types of Kiln dtypes, constants that splat over vectors, intrinsic declarations with their
type-mangled names, loops, string function attributes and loop metadata.

Everything here works on scalars and vectors alike, so the lowering and the math library are
written once for both.
"""
from __future__ import annotations

import contextlib
from typing import Iterable, Optional, Sequence

from llvmlite import ir

from ..ir import dtype as dt

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()

_SCALAR = {"bool": I1, "int8": I8, "int16": I16, "int32": I32, "int64": I64, "uint8": I8,
           "uint16": I16, "uint32": I32, "uint64": I64,
           "float16": F16, "float32": F32, "float64": F64}
# Sub-byte integers are i4/i2 in registers (LLVM's casts and arithmetic handle any width); in
# memory they are packed into bytes, which lower_expr reads and writes a field at a time.
_SCALAR.update({"int4": ir.IntType(4), "uint4": ir.IntType(4), "int2": ir.IntType(2),
                "uint2": ir.IntType(2)})


# Narrow floats are their bits in registers and memory; only conversions touch them
# (narrow_float.py).
_SCALAR.update({"bfloat16": I16, "float8_e4m3fn": I8, "float8_e4m3fnuz": I8, "float8_e5m2": I8,
                "float8_e5m2fnuz": I8, "float8_e8m0fnu": I8, "float4_e2m1fn": ir.IntType(4)})


def scalar_type(dtype: str) -> ir.Type:
    """The register type of a dtype's element (bool is i1)."""
    return _SCALAR[dt.element(dtype)]


def memory_type(dtype: str) -> ir.Type:
    """The in-memory type of a buffer element: like ``scalar_type`` but bool is a byte (DLPack),
    and a sub-byte integer's is the byte that holds it."""
    return I8 if dt.is_bool(dtype) or dt.is_subbyte(dtype) else _SCALAR[dt.element(dtype)]


def is_vector(value) -> bool:
    return isinstance(value.type, ir.VectorType)


def lanes_of(value) -> int:
    return value.type.count if is_vector(value) else 1


def element_type(ty: ir.Type) -> ir.Type:
    return ty.element if isinstance(ty, ir.VectorType) else ty


def with_lanes(ty: ir.Type, lanes: int) -> ir.Type:
    """``ty``'s element type with ``lanes`` lanes (a scalar when lanes is 1)."""
    e = element_type(ty)
    return e if lanes == 1 else ir.VectorType(e, lanes)


def is_float_type(ty: ir.Type) -> bool:
    return isinstance(element_type(ty), (ir.HalfType, ir.FloatType, ir.DoubleType))


def int_width(ty: ir.Type) -> int:
    return element_type(ty).width


def const(ty: ir.Type, value) -> ir.Constant:
    """A constant of ``ty``; for a vector type, ``value`` is splatted over every lane."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def const_like(value, c) -> ir.Constant:
    """A constant with the type of ``value`` (scalar or vector)."""
    return const(value.type, c)


def constant_int(value) -> Optional[int]:
    """The Python int of a scalar integer ``ir.Constant``, else None."""
    if isinstance(value, ir.Constant) and isinstance(value.type, ir.IntType) \
            and isinstance(value.constant, int):
        return value.constant
    return None


def broadcast(b: ir.IRBuilder, value, lanes: int):
    """Splat a scalar over ``lanes`` lanes (a vector passes through)."""
    if lanes == 1 or is_vector(value):
        return value
    if isinstance(value, ir.Constant) and not isinstance(value.constant, (list, tuple)):
        return const(ir.VectorType(value.type, lanes), value.constant)
    vty = ir.VectorType(value.type, lanes)
    one = b.insert_element(ir.Constant(vty, ir.Undefined), value, I32(0))
    return b.shuffle_vector(one, ir.Constant(vty, ir.Undefined), ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))


def iota(ty: ir.Type, lanes: int, start: int = 0, step: int = 1) -> ir.Constant:
    """The constant vector ``<start, start+step, ...>`` of ``lanes`` elements of ``ty``."""
    return ir.Constant(ir.VectorType(ty, lanes), [start + step * k for k in range(lanes)])


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type],
              mangle: Iterable[ir.Type]) -> ir.Function:
    """Declare (once) the LLVM intrinsic ``name`` overloaded on the types ``mangle``:
    ``intrinsic(m, "llvm.sqrt", v8f32, [v8f32], [v8f32])`` is ``@llvm.sqrt.v8f32``."""
    full = name + "".join("." + _mangle(t) for t in mangle)
    fn = module.globals.get(full)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, list(args)), full)
    return fn


def _mangle(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_mangle(t.element)}"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    if isinstance(t, ir.PointerType):
        return "p0"
    return {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}[type(t)]


def call_intrinsic(b: ir.IRBuilder, name: str, *args, ret: Optional[ir.Type] = None,
                   mangle: Optional[Sequence[ir.Type]] = None, extra=()):
    """Call an elementwise intrinsic overloaded on its first argument's type, e.g.
    ``call_intrinsic(b, "llvm.fabs", x)``; ``extra`` are trailing non-overloaded args."""
    ret = ret or args[0].type
    mangle = mangle if mangle is not None else [args[0].type]
    fn = intrinsic(b.module, name, ret, [a.type for a in args] + [e.type for e in extra], mangle)
    return b.call(fn, list(args) + list(extra))


def declare(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    """Declare (once) an external C function such as ``malloc``."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, list(args)), name)
    return fn


class FunctionAttributes(ir.values.FunctionAttributes):
    """llvmlite's attribute set, also accepting ``"key"="value"`` string attributes."""

    def add(self, name):
        if name.startswith('"'):
            return set.add(self, name)
        return super().add(name)


def set_attributes(fn: ir.Function, flags: Iterable[str] = (), strings: Optional[dict] = None) -> None:
    attrs = FunctionAttributes()
    for f in flags:
        attrs.add(f)
    for k, v in (strings or {}).items():
        attrs.add(f'"{k}"="{v}"')
    fn.attributes = attrs


class _LoopID(ir.values.MDValue):
    """A loop's ``distinct !{!self, ...}`` metadata node (llvmlite cannot make self-references)."""

    def descr(self, buf):
        ops = ", ".join([self.get_reference()] + [o.get_reference() for o in self.operands])
        buf += (f"distinct !{{ {ops} }}", "\n")

    def __eq__(self, other):
        return self is other

    __hash__ = object.__hash__


def loop_metadata(module: ir.Module, hints: dict) -> ir.values.MDValue:
    """A loop ID carrying ``hints`` such as ``{"llvm.loop.vectorize.enable": True}``."""
    ops = []
    for key, value in hints.items():
        if isinstance(value, bool):
            ops.append(module.add_metadata([ir.MetaDataString(module, key), I1(int(value))]))
        elif value is None:
            ops.append(module.add_metadata([ir.MetaDataString(module, key)]))
        else:
            ops.append(module.add_metadata([ir.MetaDataString(module, key), I32(value)]))
    return _LoopID(module, ops, name=str(len(module.metadata)))


@contextlib.contextmanager
def for_range(b: ir.IRBuilder, start, stop, name: str = "i", hints: Optional[dict] = None):
    """``for i in range(start, stop)`` over i64 (or whatever type ``start`` has); yields the
    induction variable with the builder positioned in the body. The body may add blocks."""
    ty = start.type
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    iv = b.phi(ty, name=name)
    iv.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", iv, stop), body, done)
    b.position_at_end(body)
    yield iv
    nxt = b.add(iv, ir.Constant(ty, 1), flags=("nsw",))
    latch = b.branch(head)
    if hints:
        latch.set_metadata("llvm.loop", loop_metadata(b.module, hints))
    iv.add_incoming(nxt, b.block)
    b.position_at_end(done)


def entry_alloca(b: ir.IRBuilder, ty: ir.Type, count: int = 1, align: int = 0, name: str = ""):
    """An ``alloca`` placed in the function's entry block, so it is static: SROA/mem2reg can
    promote it to registers and loops do not grow the stack."""
    with b.goto_block(b.function.entry_basic_block):
        slot = b.alloca(ty if count == 1 else ir.ArrayType(ty, count), name=name)
        slot.type = PTR  # opaque, like every other pointer here (llvmlite defaults to typed)
        if align:
            slot.align = align
    return slot


def _type_key(t):
    if isinstance(t, ir.IntType):
        return t.width
    if isinstance(t, ir.VectorType):
        return ("vec", t.count, _type_key(t.element))
    return str(t)


def _operand_key(v):
    if isinstance(v, ir.Constant):        # equal constants are distinct objects: by value
        c = v.constant
        if isinstance(c, int) and isinstance(v.type, ir.IntType):
            return ("int", v.type.width, c)
        return ("const", str(v))
    if isinstance(v, (ir.Value, ir.Block)):
        return id(v)                      # kept alive by the instruction that uses it
    if isinstance(v, ir.Type):
        return ("type", _type_key(v))
    if isinstance(v, (list, tuple)):
        return tuple(_operand_key(x) for x in v)
    return v


class NumberingBuilder(ir.IRBuilder):
    """An ``ir.IRBuilder`` that gives back the instruction it already made when asked for the
    same pure operation on the same operands in the same basic block (local value numbering).
    Lowering recomputes index arithmetic for every access of every unrolled copy (the
    ``//``/``%`` of a fused loop index, strides times loop variables, the same addresses), and
    these repeats were half the instructions of a model: built in Python, printed, parsed and
    then removed again by LLVM's CSE. Reuse is only within one block and only while appending
    at its end, where the earlier instruction always dominates the new use."""

    def __init__(self, block=None):
        super().__init__(block)
        self._numbered = {}


def _key(v):
    return id(v) if not isinstance(v, ir.Constant) else _operand_key(v)


def _numbered(name: str):
    make = getattr(ir.IRBuilder, name)

    def generic(self, *args, **kwargs):
        block = self._block
        if block is None or self._anchor != len(block.instructions):
            return make(self, *args, **kwargs)
        kwargs.pop("name", None)
        key = (name, id(block), *[_operand_key(a) for a in args],
               *[(k, _operand_key(v)) for k, v in sorted(kwargs.items())])
        hit = self._numbered.get(key)
        if hit is None:
            hit = self._numbered[key] = make(self, *args, **kwargs)
        return hit

    def binop(self, lhs, rhs, name="", flags=()):   # the hot ones: index arithmetic
        block = self._block
        if block is None or self._anchor != len(block.instructions):
            return make(self, lhs, rhs, name, flags)
        key = (name_, id(block), _key(lhs), _key(rhs), flags)
        hit = self._numbered.get(key)
        if hit is None:
            hit = self._numbered[key] = make(self, lhs, rhs, "", flags)
        return hit

    name_ = name
    method = binop if name in _BINOPS else generic
    method.__name__ = method.__qualname__ = name
    method.__doc__ = make.__doc__
    return method


_BINOPS = {"add", "sub", "mul", "sdiv", "srem", "udiv", "urem", "and_", "or_", "xor", "shl",
           "ashr", "lshr"}
# Pure (no memory, no side effect) operations only: loads, stores and calls are never reused.
for _name in ("add", "sub", "mul", "sdiv", "srem", "udiv", "urem", "and_", "or_", "xor", "shl",
              "ashr", "lshr", "icmp_signed", "icmp_unsigned", "zext", "sext", "trunc", "select",
              "gep", "extract_element", "insert_element", "shuffle_vector"):
    setattr(NumberingBuilder, _name, _numbered(_name))
