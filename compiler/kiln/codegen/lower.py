"""Lowering of tensor programs (PrimFuncs) to LLVM IR: statements, loops, blocks, scratch
buffers and parallel regions. Expressions and buffer accesses are in ``lower_expr``; vectorized
loops in ``vectorize``; the kernel ABI (entry points, argument unpacking, the library table) in
``abi``.

Each LLVM function built here (a kernel's body, or an outlined parallel loop body) has the
layout::

    entry:     static allocas (scratch buffers, closures)        -> prologue
    prologue:  strides of symbolic shapes, heap scratch buffers  -> body (or fail if OOM)
    body...:   the statements                                    -> exit
    exit:      free heap scratch, return the status code

so stack buffers are promotable by SROA/mem2reg and heap buffers are allocated once per call
(per task in a parallel loop), not once per loop iteration.
"""
from __future__ import annotations

import math
import re
from typing import Dict, List, Optional

from llvmlite import ir

from ..ir import dtype as dt
from ..ir.expr import Buffer, BufferLoad, Var
from ..ir.functor import pre_order_visit
from ..ir.stmt import (PARALLEL_MIN_EXTENT, Block, BlockRealize, BufferRegion, BufferStore, Evaluate,
                       For, IfThenElse, SeqStmt)
from . import cgutils as cg
from .abi import launch_parallel
from .errors import CodegenError
from .lower_expr import BufInfo, ExprLowerer, VecState
from .tree_combine import lower_combine, lower_reduction, match_combine
from .vectorize import lower_vectorized, masked_region

# Scratch buffers of constant size up to this many bytes live on the stack; larger or
# symbolically sized ones are heap allocated. Worker threads may have small stacks, hence modest.
STACK_LIMIT_BYTES = 32 * 1024
# An "unrolled" loop with a constant extent up to this is emitted as that many copies of its
# body; longer ones become a loop with llvm.loop.unroll.full metadata.
MAX_UNROLL_COPIES = 256
# Status a kernel returns when a heap scratch allocation fails (0 is success).
STATUS_OUT_OF_MEMORY = 2
ALIGN = 64


class ModuleContext:
    """What all functions of one LLVM module share: the module, the target, name counters and
    notes about loops that had to fall back (reported on ``CompiledModule.notes``)."""

    def __init__(self, module: ir.Module, target):
        self.module = module
        self.target = target
        self.notes: List[str] = []
        self._counter = 0
        # Analyses of IR nodes that depend on the node alone (e.g. whether a vectorized loop
        # can be lowered lane-parallel), keyed by id: an unrolled loop lowers its body once per
        # copy, and must not redo them per copy. The node is kept so its id stays unique.
        self._memo: Dict[tuple, tuple] = {}

    def memo(self, what: str, node, compute):
        """``compute(node)``, computed once per node for this module."""
        key = (what, id(node))
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = (node, compute(node))
        return hit[1]

    def fresh(self, base: str) -> str:
        self._counter += 1
        return f"{base}{self._counter}"

    def new_function(self, name: str, ret: ir.Type, args: List[ir.Type], internal: bool,
                     inline: bool = False) -> ir.Function:
        fn = ir.Function(self.module, ir.FunctionType(ret, args), name)
        fn.linkage = "internal" if internal else "dso_local"
        cg.set_attributes(fn, ["nounwind"] + (["alwaysinline"] if inline else []),
                          self.target.function_attributes())
        return fn


class FuncLowerer(ExprLowerer):
    """Lowers statements into one LLVM function. ``ctx`` is the kernel context pointer."""

    def __init__(self, mctx: ModuleContext, fn: ir.Function, ctx: ir.Value, label: str):
        self.m, self.fn, self.ctx, self.label = mctx, fn, ctx, label
        self.entry = fn.append_basic_block("entry")
        self.prologue = fn.append_basic_block("prologue")
        body = fn.append_basic_block("body")
        self.exit = fn.append_basic_block("exit")
        self.b = cg.NumberingBuilder(body)
        self.rc = cg.entry_alloca(self.b, cg.I32, name="rc")
        with self.b.goto_block(self.entry):
            self.b.store(cg.I32(0), self.rc)
        self.vars: Dict[Var, object] = {}
        self.bufs: Dict[Buffer, BufInfo] = {}
        self.vec: Optional[VecState] = None
        self.entry_vars: set = set()
        # Loop variables of unrolled loops left to LLVM's unroll (each copy's index a constant
        # only after it): a select on them is left for LLVM to fold, not made a branch.
        self.llvm_unrolled: set = set()
        self.cleanups: List[ir.Value] = []   # heap buffers live at this point of the body
        self.oom: Optional[ir.Value] = None  # i1 in the prologue: some hoisted allocation failed
        self._body = body

    # ---- function structure ---------------------------------------------------------------
    def bind_entry_var(self, var: Var, value) -> None:
        self.vars[var] = value
        self.entry_vars.add(var)

    def bind_buffer(self, buf: Buffer, ptr) -> None:
        """Make ``buf`` addressable through ``ptr``; strides of symbolic shapes are computed
        once in the prologue."""
        self.bufs[buf] = BufInfo(ptr, self._strides(buf.shape, hoist=True))

    def _strides(self, shape, hoist: bool) -> list:
        strides, acc = [], 1
        for extent in reversed(shape):
            strides.append(acc)
            if isinstance(acc, int) and hasattr(extent, "value") and isinstance(extent.value, int):
                acc *= extent.value
            else:
                if hoist:
                    with self.b.goto_block(self.prologue):
                        acc = self._mul_i64(acc, self.scalar_index(extent))
                else:
                    acc = self._mul_i64(acc, self.scalar_index(extent))
        strides.reverse()
        return strides

    def _mul_i64(self, a, b):
        if isinstance(a, int):
            return b if a == 1 else self.b.mul(cg.I64(a), b, flags=("nsw",))
        return self.b.mul(a, b, flags=("nsw",))

    def finish(self) -> None:
        """Close the function: normal end and prologue branch into their successors."""
        b = self.b
        b.branch(self.exit)
        b.position_at_end(self.entry)
        b.branch(self.prologue)
        b.position_at_end(self.prologue)
        if self.oom is None:
            b.branch(self._body)
        else:
            fail = self.fn.append_basic_block("oom")
            b.cbranch(self.oom, fail, self._body)
            b.position_at_end(fail)
            b.store(cg.I32(STATUS_OUT_OF_MEMORY), self.rc)
            b.branch(self.exit)
        b.position_at_end(self.exit)
        b.ret(b.load(self.rc, typ=cg.I32))

    def fail_if_nonzero(self, status) -> None:
        """Return ``status`` from the function (after freeing live scratch) when non-zero."""
        b = self.b
        fail = self.fn.append_basic_block("fail")
        cont = self.fn.append_basic_block("cont")
        b.cbranch(b.icmp_signed("!=", status, cg.I32(0)), fail, cont)
        b.position_at_end(fail)
        for p in reversed(self.cleanups):
            b.call(_libc(b.module, "free"), [p])
        b.store(status, self.rc)
        b.branch(self.exit)
        b.position_at_end(cont)

    # ---- statements -----------------------------------------------------------------------
    def stmt(self, s) -> None:
        rule = _STMT_RULES.get(type(s))
        if rule is None:
            raise CodegenError(f"codegen cannot lower statement {type(s).__name__} in '{self.label}'")
        rule(self, s)

    def guard(self, cond, body) -> None:
        """Run ``body()`` where ``cond`` holds: a branch for a uniform condition, a narrower lane
        mask for a varying one (skipped entirely when no lane is active)."""
        b = self.b
        if isinstance(cond, ir.Constant) and not cg.is_vector(cond):
            if cond.constant:
                body()
            return
        if not cg.is_vector(cond):
            with b.if_then(cond):
                body()
            return
        masked_region(self, cond, body)

    def _seq(self, s: SeqStmt) -> None:
        for x in s.seq:
            self.stmt(x)

    def _store(self, s: BufferStore) -> None:
        self.store(s.buffer, s.value, s.indices)

    def _evaluate(self, s: Evaluate) -> None:
        self.expr(s.value)

    def _if(self, s: IfThenElse) -> None:
        cond = self.value(s.condition)
        if s.else_case is None:
            self.guard(cond, lambda: self.stmt(s.then_case))
        elif cg.is_vector(cond):
            self.guard(cond, lambda: self.stmt(s.then_case))
            self.guard(self.b.not_(cond), lambda: self.stmt(s.else_case))
        else:
            with self.b.if_else(cond) as (then, other):
                with then:
                    self.stmt(s.then_case)
                with other:
                    self.stmt(s.else_case)

    def _realize(self, r: BlockRealize) -> None:
        self.guard(self.value(r.predicate), lambda: self._block(r))

    def _block(self, r: BlockRealize) -> None:
        block: Block = r.block
        bound = []
        for iv, value in zip(block.iter_vars, r.iter_values):
            self.vars[iv.var] = self.expr(value)
            bound.append(iv.var)
        live = len(self.cleanups)
        for buf in block.alloc_buffers:
            self.alloc(buf)
        if block.init is not None:
            cond = cg.I1(1)
            for iv in block.iter_vars:
                if iv.kind == "reduce":
                    v, lo = self._pair(self.vars[iv.var], self.expr(iv.dom.min), iv.var.dtype)
                    eq = self.b.icmp_signed("==", v, lo)
                    cond = eq if isinstance(cond, ir.Constant) else self.b.and_(cond, eq)
            self.guard(cond, lambda: self.stmt(block.init))
        self.stmt(block.body)
        while len(self.cleanups) > live:   # scratch allocated at this block (not hoisted)
            self.b.call(_libc(self.b.module, "free"), [self.cleanups.pop()])
        for v in bound:
            self.vars.pop(v, None)
        for buf in block.alloc_buffers:
            self.bufs.pop(buf, None)

    def _for(self, s: For) -> None:
        if s.kind == "thread_binding":
            raise CodegenError(f"loop '{s.loop_var.name}' is bound to {s.thread_binding}; the CPU "
                               "target cannot run thread-bound loops")
        if self.vec is not None and s.kind not in ("serial", "unrolled"):
            raise CodegenError(f"a {s.kind} loop '{s.loop_var.name}' cannot be nested in a "
                               "vectorized loop")
        if s.kind == "vectorized" and _touches_subbyte(s.body) or \
                s.kind == "parallel" and _touches_subbyte(s.body, stores_only=True):
            # Packed sub-byte elements are read-modify-written a byte at a time: threads
            # sharing a byte would race, so a parallel loop storing them runs serially (same
            # result; one that only reads them stays parallel). Lanes load and store them
            # one at a time, so a vectorized loop touching them is a serial loop too.
            self.serial_loop(s)
        elif s.kind == "vectorized":
            lower_vectorized(self, s)
        elif s.kind == "parallel":
            self._parallel(s)
        elif s.kind == "unrolled":
            self._unrolled(s)
        elif self.vec is None and (combine := self.m.memo("combine", s, match_combine)) is not None:
            (lower_reduction if combine.reduction else lower_combine)(self, s, combine)
        else:
            self.serial_loop(s)

    def serial_loop(self, s: For, hints: Optional[dict] = None) -> None:
        lo = self.scalar_index(s.min)
        if hints is None and cg.constant_int(self.scalar_index(s.extent)) == 1:
            # One iteration (a batch of 1): its index is a constant for what follows, e.g. the
            # offsets of a register tile that SROA must see as constants.
            self.vars[s.loop_var] = lo
            self.stmt(s.body)
            self.vars.pop(s.loop_var, None)
            return
        hi = self._iarith("add", lo, self.scalar_index(s.extent), "int32")
        with cg.for_range(self.b, lo, hi, name=s.loop_var.name, hints=hints) as iv:
            self.vars[s.loop_var] = iv
            self.stmt(s.body)
        self.vars.pop(s.loop_var, None)

    def _unrolled(self, s: For) -> None:
        lo = self.scalar_index(s.min)
        n = cg.constant_int(self.scalar_index(s.extent))
        if n is None or n > MAX_UNROLL_COPIES or n > 1 and not self._copies_here(s.body):
            # LLVM unrolls it (its full unroll runs before the SROA that promotes a register
            # tile's stack accumulators), or cannot: a loop with llvm.loop.unroll metadata.
            # One iteration is one copy here: its index is then a constant, as in serial_loop.
            hint = "llvm.loop.unroll.enable" if n is None else "llvm.loop.unroll.full"
            self.llvm_unrolled.add(s.loop_var)
            try:
                return self.serial_loop(s, hints={hint: None})
            finally:
                self.llvm_unrolled.discard(s.loop_var)
        for k in range(n):
            # Constant loop indices: after this, accesses to small scratch buffers have constant
            # offsets and SROA can keep them in registers (matmul accumulators).
            self.vars[s.loop_var] = self._iarith("add", lo, cg.I64(k), "int32")
            self.stmt(s.body)
        self.vars.pop(s.loop_var, None)

    def _copies_here(self, body) -> bool:
        """Whether an unrolled loop over ``body`` is copied here rather than left to LLVM's full
        unroll (which gives the same code for a fraction of the lowering time: MobileNetV2
        compiles in half the time). Two kinds of loop are copied, because LLVM's passes that
        run before its unroll would treat them differently than copies:

        - one that reads and writes a buffer not on this function's stack (``x[i] = x[i] +
          ...`` into a heap buffer or a parameter): with constant indices in each copy, LICM
          keeps the elements in registers across an enclosing reduction loop; it does not once
          LLVM has unrolled the loop (the fused attention's QK^T ran at half speed);
        - one that only stores values computed without loads (a tile's zero init): LLVM turns
          that loop into a ``memset`` call first, which a guarded tile then keeps (a 1x1
          convolution with a partial last tile ran 8% slower)."""
        stored, loaded = self.m.memo("stored_loaded", body, _stored_and_loaded)
        if not loaded:
            return True
        return any(not isinstance(self.bufs[b].ptr, ir.AllocaInstr)
                   for b in stored & loaded if b in self.bufs)

    # ---- scratch buffers ------------------------------------------------------------------
    def alloc(self, buf: Buffer) -> None:
        """Allocate a block's scratch buffer: stack when small and constant-sized, else heap
        (hoisted to the prologue when its shape is known at function entry)."""
        mty = cg.memory_type(buf.dtype)
        elem_bytes = max(1, dt.bits(buf.dtype) // 8)
        shape = [getattr(s, "value", None) for s in buf.shape]
        if all(isinstance(s, int) for s in shape) and math.prod(shape) * elem_bytes <= STACK_LIMIT_BYTES:
            ptr = cg.entry_alloca(self.b, mty, max(1, math.prod(shape)), align=ALIGN, name=buf.name)
            self.bufs[buf] = BufInfo(ptr, self._strides(buf.shape, hoist=False))
            return
        free_vars = set()
        for s in buf.shape:
            pre_order_visit(s, lambda n: free_vars.add(n) if isinstance(n, Var) else None)
        hoist = free_vars <= self.entry_vars
        if hoist:
            with self.b.goto_block(self.prologue):
                strides = self._strides(buf.shape, hoist=False)
                ptr = self._malloc(buf, strides, elem_bytes)
                null = self.b.icmp_unsigned("==", ptr, ir.Constant(cg.PTR, None))
                self.oom = null if self.oom is None else self.b.or_(self.oom, null)
            with self.b.goto_block(self.exit):
                self.b.call(_libc(self.b.module, "free"), [ptr])
        else:
            strides = self._strides(buf.shape, hoist=False)
            ptr = self._malloc(buf, strides, elem_bytes)
            null = self.b.icmp_unsigned("==", ptr, ir.Constant(cg.PTR, None))
            self.fail_if_nonzero(self.b.select(null, cg.I32(STATUS_OUT_OF_MEMORY), cg.I32(0)))
            self.cleanups.append(ptr)
        self.bufs[buf] = BufInfo(ptr, strides)

    def _malloc(self, buf: Buffer, strides, elem_bytes: int):
        b = self.b
        n = cg.I64(1) if buf.ndim == 0 else self._mul_i64(strides[0], self.scalar_index(buf.shape[0]))
        nbytes = b.mul(n, cg.I64(elem_bytes), flags=("nsw",))
        # aligned_alloc wants a multiple of the alignment, and never 0 (which may give NULL).
        nbytes = b.and_(b.add(nbytes, cg.I64(ALIGN - 1)), cg.I64(-ALIGN))
        nbytes = b.select(b.icmp_signed("==", nbytes, cg.I64(0)), cg.I64(ALIGN), nbytes)
        size_t = _size_t(b.module)
        if size_t is not cg.I64:   # 32-bit targets (armv7): size_t is i32 in the C ABI
            nbytes = b.trunc(nbytes, size_t)
        return b.call(_libc(b.module, "aligned_alloc"), [ir.Constant(size_t, ALIGN), nbytes],
                      name=buf.name)

    # ---- parallel loops -------------------------------------------------------------------
    def _parallel(self, s: For) -> None:
        """Outline the loop body into ``int32 task(i64 t, i64 n, void* closure)`` and run it
        through ``ctx->parallel_launch`` (or directly, serially, when ctx is NULL)."""
        lo = self.scalar_index(s.min)
        ext = self.scalar_index(s.extent)
        free_vars, bufs = _captures(s, self)
        # Captured constants (the index of a one-iteration loop) stay constants in the body.
        const_vars = [v for v in free_vars if isinstance(self.vars.get(v), ir.Constant)]
        cap_vars = [v for v in free_vars if v in self.vars and v not in const_vars]
        impl_name = self.m.fresh(f"{self.fn.name}.par")
        arg_types = [cg.PTR, cg.I64, cg.I64] + [cg.PTR] * len(bufs) + \
                    [self.vars[v].type for v in cap_vars]
        impl = self.m.new_function(impl_name + ".impl", cg.I32, arg_types, internal=True, inline=True)
        for k, arg in enumerate(impl.args[3:3 + len(bufs)]):
            arg.add_attribute("noalias")  # parameters never alias: kiln's kernel contract
        sub = FuncLowerer(self.m, impl, impl.args[0], self.label)
        for v, arg in zip(cap_vars, impl.args[3 + len(bufs):]):
            sub.bind_entry_var(v, arg)
        for v in const_vars:
            sub.bind_entry_var(v, self.vars[v])
        for buf, arg in zip(bufs, impl.args[3:3 + len(bufs)]):
            sub.bind_buffer(buf, arg)
        with cg.for_range(sub.b, impl.args[1], impl.args[2], name=s.loop_var.name) as iv:
            sub.vars[s.loop_var] = iv
            sub.stmt(s.body)
        sub.finish()
        captured = [self.ctx] + [self.bufs[b].ptr for b in bufs] + [self.vars[v] for v in cap_vars]
        least = dict(s.annotations).get(PARALLEL_MIN_EXTENT)
        status = launch_parallel(self, impl_name, impl, lo, ext, captured,
                                 None if least is None else cg.I64(least))
        self.fail_if_nonzero(status)


def _captures(s: For, fl: FuncLowerer):
    """Variables and buffers a loop uses from outside it, in first-use order (buffer shapes
    included: strides are recomputed from them in the outlined function)."""
    vars_, bufs, inner_bufs = {}, {}, set()

    def visit(n):
        if isinstance(n, Var):
            vars_.setdefault(n, None)
        elif isinstance(n, (BufferLoad, BufferStore, BufferRegion)):
            add_buf(n.buffer)
        elif isinstance(n, Block):
            for buf in n.alloc_buffers:
                inner_bufs.add(buf)
                for e in buf.shape:
                    pre_order_visit(e, visit)
        return None

    def add_buf(buf):
        if buf not in bufs:
            bufs[buf] = None
            for e in buf.shape:
                pre_order_visit(e, visit)

    pre_order_visit(s, visit)
    outer_bufs = [b for b in bufs if b not in inner_bufs]
    for b in outer_bufs:
        fl.buf(b)  # raises a clear error for an unbound buffer
    return list(vars_), outer_bufs


def _stored_and_loaded(body):
    """(buffers ``body`` stores to, buffers it loads from)."""
    stored, loaded = set(), set()

    def visit(n):
        if isinstance(n, BufferStore):
            stored.add(n.buffer)
        elif isinstance(n, BufferLoad):
            loaded.add(n.buffer)
    pre_order_visit(body, visit)
    return stored, loaded


def _touches_subbyte(body, stores_only: bool = False) -> bool:
    """Whether ``body`` reads or writes (``stores_only``: writes) a buffer of packed sub-byte
    elements (int4, uint2...)."""
    kinds = (BufferStore,) if stores_only else (BufferLoad, BufferStore)
    found = []
    pre_order_visit(body, lambda n: found.append(n) if isinstance(n, kinds)
                    and dt.is_subbyte(n.buffer.dtype) else None)
    return bool(found)


def _size_t(module: ir.Module) -> ir.Type:
    """C's size_t on the module's target: i32 where pointers are 32 bits (its data layout says
    "p:32:..."), else i64."""
    return cg.I32 if re.search(r"(^|-)p:32:", module.data_layout or "") else cg.I64


def _libc(module: ir.Module, name: str) -> ir.Function:
    size_t = _size_t(module)
    sig = {"free": (ir.VoidType(), [cg.PTR]), "aligned_alloc": (cg.PTR, [size_t, size_t])}[name]
    fn = cg.declare(module, name, *sig)
    if name == "aligned_alloc":
        fn.return_value.add_attribute("noalias")
    return fn


_STMT_RULES = {
    SeqStmt: FuncLowerer._seq, BufferStore: FuncLowerer._store, Evaluate: FuncLowerer._evaluate,
    IfThenElse: FuncLowerer._if, BlockRealize: FuncLowerer._realize, For: FuncLowerer._for,
}
