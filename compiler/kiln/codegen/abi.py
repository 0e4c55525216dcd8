"""The kernel ABI in LLVM IR: what ``runtime_c/include/kiln_kernel_abi.h`` declares, emitted.

For every PrimFunc ``name`` of a module, the library defines (version 1 of the ABI)::

    int32_t kiln_fn_<name>(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t num_args);

``<name>`` is the function's name with every character outside [A-Za-z0-9_] replaced by '_'
(and a numeric suffix if two names collide). It reads, for each parameter k in order,
``args[k]->data + args[k]->byte_offset`` and, for each symbolic dimension, ``shape[axis]`` of
the first parameter that has it. A scalar (Var) parameter is passed as a 0-d DLTensor of its
dtype. Nothing else of the DLTensor is read: the runtime has checked dtype, ndim, shape,
device and compactness against the library table before the call. ``num_args`` is not
re-checked either.

Returns 0 on success; 2 when a heap scratch allocation failed; any non-zero status a parallel
task returned (the runtime's ``parallel_launch`` forwards it).

Contract the generated code relies on, and which callers must honour:
  * the DLTensors' data do not overlap (the data pointers are marked ``noalias``; this is what
    lets LLVM hoist loads and vectorize without runtime alias checks);
  * data is row-major and compact; no alignment is assumed for argument data (the runtime's
    own tensors are 64-byte aligned, but external ones need not be); scratch buffers the kernel
    allocates itself are 64-byte aligned;
  * ``ctx`` may be NULL: parallel loops then run serially on the calling thread. Otherwise
    ``ctx->parallel_launch(ctx->pool, task, closure, n)`` is called with
    n = min(extent, ctx->num_threads) (at least 1), and task t runs the iterations
    [t*extent/n, (t+1)*extent/n). Kernels call no other runtime symbol; they use only libc
    (aligned_alloc, free) and libm (for float64 tanh/erf, pow, sin, cos).

The library also exports ``kiln_library_info`` (a ``kiln_library_info_t``) listing every kernel:
its name, function pointer, parameters (name, DLPack dtype code/bits/lanes, ndim, shape where a
negative entry -1-k names symbolic dimension k) and the symbolic dimensions' names.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional

from llvmlite import ir

from ..ir import dtype as dt
from ..ir.derived_dims import DerivedDim, DimError, DimTable
from ..ir.expr import Buffer, Var
from ..ir.function import PrimFunc
from ..ir.functor import collect
from ..ir.stmt import BufferStore
from . import cgutils as cg
from .errors import CodegenError
from .opaque_dims import abstract_unbound_dims

ABI_VERSION = 3  # runtime_c/include/kiln_kernel_abi.h (3: derived dimensions)
PARAM_WRITTEN = 1
LIBRARY_SYMBOL = "kiln_library_info"

# struct DLTensor { void* data; DLDevice device; int32 ndim; DLDataType dtype; int64* shape;
#                   int64* strides; uint64 byte_offset; }
DLTENSOR = ir.LiteralStructType([cg.PTR, ir.LiteralStructType([cg.I32, cg.I32]), cg.I32,
                                 ir.LiteralStructType([cg.I8, cg.I8, cg.I16]), cg.PTR, cg.PTR, cg.I64])
_DATA, _SHAPE, _BYTE_OFFSET = 0, 4, 6
# struct kiln_kernel_ctx_t { uint32 abi_version; int32 num_threads; void* pool; parallel_launch; }
CTX = ir.LiteralStructType([cg.I32, cg.I32, cg.PTR, cg.PTR])
TASK_FN = ir.FunctionType(cg.I32, [cg.I64, cg.I64, cg.PTR])
# int32_t kiln_fn_<name>(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t num_args)
ENTRY_FN = ir.FunctionType(cg.I32, [cg.PTR, cg.PTR, cg.I32])
LAUNCH_FN = ir.FunctionType(cg.I32, [cg.PTR, cg.PTR, cg.PTR, cg.I64])
PARAM = ir.LiteralStructType([cg.PTR, cg.I8, cg.I8, cg.I16, cg.I32, cg.I32, cg.PTR])
KERNEL = ir.LiteralStructType([cg.PTR, cg.PTR, cg.I32, cg.PTR, cg.I32, cg.PTR, cg.I32, cg.PTR])
# struct kiln_derived_dim_t { uint32 op; uint32 flags; int64 a; int64 b; }
DERIVED = ir.LiteralStructType([cg.I32, cg.I32, cg.I64, cg.I64])
LIBRARY = ir.LiteralStructType([cg.I32, cg.I32, cg.PTR])

_DL_CODE = {"int": 0, "uint": 1, "float": 2, "bool": 6}


@dataclass
class ParamInfo:
    name: str
    dtype: str
    shape: List[int]   # >= 0 fixed, < 0: symbolic (or, from len(sym_names) on, derived) dimension -1-k
    written: bool = False  # the kernel stores into it (KILN_PARAM_WRITTEN)


@dataclass
class KernelInfo:
    """One kernel of a library, as listed in ``kiln_library_info``."""
    name: str
    symbol: str
    params: List[ParamInfo]
    sym_names: List[str]
    fn: Optional[ir.Function] = None
    derived: List[DerivedDim] = field(default_factory=list)


def kernel_symbol(name: str, taken: set) -> str:
    base = "kiln_fn_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
    sym, k = base, 1
    while sym in taken:
        k += 1
        sym = f"{base}_{k}"
    taken.add(sym)
    return sym


def _dl_dtype(dtype: str):
    e = dt.element(dtype)
    if e in dt.NARROW_FLOAT_DLPACK:
        return dt.NARROW_FLOAT_DLPACK[e] + (dt.lanes(dtype),)
    kind = "bool" if e == "bool" else ("uint" if e.startswith("uint") else ("float" if dt.is_float(e) else "int"))
    return _DL_CODE[kind], (8 if kind == "bool" else dt.bits(e)), dt.lanes(dtype)


def describe(name: str, func: PrimFunc, symbol: str) -> KernelInfo:
    """The parameter table of a PrimFunc; symbolic dimensions numbered by first appearance,
    then the derived ones (expressions such as ``past + n``, ``kiln.ir.derived_dims``)."""
    syms: List[Var] = []
    for p in func.params:
        for extent in p.shape if isinstance(p, Buffer) else ():
            if isinstance(extent, Var) and extent not in syms:
                syms.append(extent)
    if len({s.name for s in syms}) != len(syms):
        raise CodegenError(f"'{name}': two different symbolic dimensions share a name ({[s.name for s in syms]})")
    table = DimTable([s.name for s in syms])
    params = []
    written = {id(s.buffer) for s in collect(func.body, BufferStore)}
    for p in func.params:
        if isinstance(p, Var):
            params.append(ParamInfo(p.name, p.dtype, []))
            continue
        if not isinstance(p, Buffer):
            raise CodegenError(f"parameter {p!r} of '{name}' is neither a buffer nor a scalar variable")
        shape = []
        for axis, extent in enumerate(p.shape):
            try:
                shape.append(table.code(extent, f"parameter '{p.name}' of '{name}' axis {axis}"))
            except DimError as e:
                raise CodegenError(str(e)) from None
        params.append(ParamInfo(p.name, p.dtype, shape, id(p) in written))
    return KernelInfo(name, symbol, params, [s.name for s in syms], derived=list(table.derived))


def lower_kernel(mctx, name: str, func: PrimFunc, symbol: str) -> KernelInfo:
    """Emit ``symbol`` (the ABI entry point) and the body it calls for one PrimFunc."""
    from .lower import FuncLowerer  # late: lower imports this module
    func = abstract_unbound_dims(name, func)  # b * s seen only whole: one symbolic dimension
    info = describe(name, func, symbol)
    bufs = [p for p in func.params if isinstance(p, Buffer)]
    sym_vars: List[Var] = []
    for p in bufs:
        for e in p.shape:
            if isinstance(e, Var) and e not in sym_vars:
                sym_vars.append(e)
    scalars = [p for p in func.params if isinstance(p, Var)]
    held = {v: _held_type(v.dtype) for v in sym_vars}
    held.update({v: _held_type(v.dtype) for v in scalars})
    entry_vars = sym_vars + [v for v in scalars if v not in sym_vars]

    # The body takes the unpacked arguments as parameters so the data pointers can be marked
    # noalias; it is always inlined into the entry point, where LLVM turns that into alias
    # scopes on every access.
    impl = mctx.new_function(symbol + ".impl", cg.I32,
                             [cg.PTR] + [cg.PTR] * len(bufs) + [held[v] for v in entry_vars],
                             internal=True, inline=True)
    for arg in impl.args[1:1 + len(bufs)]:
        arg.add_attribute("noalias")
    fl = FuncLowerer(mctx, impl, impl.args[0], name)
    for v, arg in zip(entry_vars, impl.args[1 + len(bufs):]):
        fl.bind_entry_var(v, arg)
    for buf, arg in zip(bufs, impl.args[1:1 + len(bufs)]):
        fl.bind_buffer(buf, arg)
    fl.stmt(func.body)
    fl.finish()

    fn = mctx.new_function(symbol, ENTRY_FN.return_type, list(ENTRY_FN.args), internal=False)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx, args = fn.args[0], fn.args[1]
    data, values = {}, {}
    for k, p in enumerate(func.params):
        t = b.load(b.gep(args, [cg.I64(k)], inbounds=True, source_etype=cg.PTR), typ=cg.PTR)
        raw = b.load(b.gep(t, [cg.I32(0), cg.I32(_DATA)], inbounds=True, source_etype=DLTENSOR), typ=cg.PTR)
        off = b.load(b.gep(t, [cg.I32(0), cg.I32(_BYTE_OFFSET)], inbounds=True, source_etype=DLTENSOR), typ=cg.I64)
        ptr = b.gep(raw, [off], inbounds=True, source_etype=cg.I8)
        if isinstance(p, Var):
            v = b.load(ptr, typ=cg.memory_type(p.dtype))
            values[p] = _to_held(b, v, p.dtype)
            continue
        data[p] = ptr
        shape_ptr = None
        for axis, e in enumerate(p.shape):
            if isinstance(e, Var) and e not in values:
                if shape_ptr is None:
                    shape_ptr = b.load(b.gep(t, [cg.I32(0), cg.I32(_SHAPE)], inbounds=True,
                                             source_etype=DLTENSOR), typ=cg.PTR)
                n = b.load(b.gep(shape_ptr, [cg.I64(axis)], inbounds=True, source_etype=cg.I64), typ=cg.I64)
                values[e] = n if held[e] == cg.I64 else b.trunc(n, held[e])
    status = b.call(impl, [ctx] + [data[p] for p in bufs] + [values[v] for v in entry_vars])
    b.ret(status)
    info.fn = fn
    return info


def _held_type(dtype: str) -> ir.Type:
    # Index-like integers are held in i64 (see lower_expr); other scalars as themselves.
    return cg.I64 if dt.element(dtype) in ("int32", "int64") else cg.scalar_type(dtype)


def _to_held(b, v, dtype):
    if dt.is_bool(dtype):
        return b.icmp_unsigned("!=", v, cg.const_like(v, 0))
    want = _held_type(dtype)
    return b.sext(v, want) if v.type != want else v


def launch_parallel(fl, name: str, impl: ir.Function, lo, ext, captured: list, least=None):
    """Emit the task function for an outlined loop body ``impl(ctx, begin, end, captured...)``
    and the code that runs it; returns the i32 status. With ``least`` (an i64), an extent
    below it runs as one task on the calling thread, as it does without a thread pool."""
    b, mctx = fl.b, fl.m
    closure_ty = ir.LiteralStructType([cg.I64, cg.I64] + [v.type for v in captured])
    closure = cg.entry_alloca(b, closure_ty, name="closure")
    for k, v in enumerate([lo, ext] + captured):
        b.store(v, b.gep(closure, [cg.I32(0), cg.I32(k)], inbounds=True, source_etype=closure_ty))

    task = mctx.new_function(name, cg.I32, list(TASK_FN.args), internal=True)
    tb = ir.IRBuilder(task.append_basic_block("entry"))
    t, n, cl = task.args
    fields = [tb.load(tb.gep(cl, [cg.I32(0), cg.I32(k)], inbounds=True, source_etype=closure_ty), typ=ty)
              for k, ty in enumerate(closure_ty.elements)]
    t_lo, t_ext = fields[0], fields[1]
    begin = tb.add(t_lo, tb.sdiv(tb.mul(t, t_ext), n))
    end = tb.add(t_lo, tb.sdiv(tb.mul(tb.add(t, cg.I64(1)), t_ext), n))
    tb.ret(tb.call(impl, [fields[2], begin, end] + fields[3:]))

    slot = cg.entry_alloca(b, cg.I32, name="par.status")
    b.store(cg.I32(0), slot)
    with b.if_then(b.icmp_signed(">", ext, cg.I64(0))):
        ctx = fl.ctx
        alone = b.icmp_unsigned("==", ctx, ir.Constant(cg.PTR, None))
        if least is not None:
            alone = b.or_(alone, b.icmp_signed("<", ext, least))
        with b.if_else(alone) as (serial, pooled):
            with serial:
                b.store(b.call(task, [cg.I64(0), cg.I64(1), closure]), slot)
            with pooled:
                def field(k, ty):
                    return b.load(b.gep(ctx, [cg.I32(0), cg.I32(k)], inbounds=True, source_etype=CTX), typ=ty)
                threads = b.sext(field(1, cg.I32), cg.I64)
                ntasks = b.select(b.icmp_signed("<", ext, threads), ext, threads)
                ntasks = b.select(b.icmp_signed("<", ntasks, cg.I64(1)), cg.I64(1), ntasks)
                launch = field(3, cg.PTR)
                launch.type = LAUNCH_FN.as_pointer()  # llvmlite finds an indirect callee's type here
                b.store(b.call(launch, [field(2, cg.PTR), task, closure, ntasks]), slot)
    return b.load(slot, typ=cg.I32)


def emit_library_info(module: ir.Module, kernels: List[KernelInfo]) -> None:
    """Emit the exported ``kiln_library_info`` table describing ``kernels``."""
    counter = [0]

    def private(ty, init, base):
        counter[0] += 1
        g = ir.GlobalVariable(module, ty, f".kiln.{base}.{counter[0]}")
        g.linkage, g.global_constant, g.initializer = "private", True, init
        g.unnamed_addr = True
        return g

    def string(text: str):
        data = bytearray(text.encode("utf-8") + b"\0")
        return private(ir.ArrayType(cg.I8, len(data)), ir.Constant(ir.ArrayType(cg.I8, len(data)), data), "str")

    def array(elem_ty, items, base):
        if not items:
            return ir.Constant(cg.PTR, None)
        ty = ir.ArrayType(elem_ty, len(items))
        return private(ty, ir.Constant(ty, items), base)

    entries = []
    for k in kernels:
        params = []
        for p in k.params:
            code, bits, lanes = _dl_dtype(p.dtype)
            shape = array(cg.I64, [cg.I64(s) for s in p.shape], "shape")
            flags = PARAM_WRITTEN if p.written else 0
            params.append(ir.Constant(PARAM, [string(p.name), cg.I8(code), cg.I8(bits), cg.I16(lanes),
                                              cg.I32(len(p.shape)), cg.I32(flags), shape]))
        syms = array(cg.PTR, [string(s) for s in k.sym_names], "syms")
        derived = array(DERIVED, [ir.Constant(DERIVED, [cg.I32(d.op), cg.I32(d.flags), cg.I64(d.a), cg.I64(d.b)])
                                  for d in k.derived], "derived")
        entries.append(ir.Constant(KERNEL, [string(k.name), k.fn, cg.I32(len(k.params)),
                                            array(PARAM, params, "params"), cg.I32(len(k.sym_names)), syms,
                                            cg.I32(len(k.derived)), derived]))
    lib = ir.GlobalVariable(module, LIBRARY, LIBRARY_SYMBOL)
    lib.global_constant = True
    lib.storage_class = "dso_local"
    lib.initializer = ir.Constant(LIBRARY, [cg.I32(ABI_VERSION), cg.I32(len(kernels)),
                                            array(KERNEL, entries, "kernels")])
