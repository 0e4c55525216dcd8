"""One GPU kernel as an LLVM function for the NVPTX backend.

The statement and expression lowering is the CPU one (``kiln.codegen.lower.FuncLowerer`` and
its ``ExprLowerer``): same buffers, loops, blocks, casts and math. What differs on the GPU is
handled here:

* a loop bound to ``blockIdx.*`` / ``threadIdx.*`` is no loop: its variable is the special
  register (``llvm.nvvm.read.ptx.sreg.ctaid.x`` ...), guarded when the loop is shorter than
  the launched block;
* a ``shared`` scratch buffer is a static array in address space 3 (``.shared`` in PTX),
  addressed through a generic pointer (LLVM's address-space inference turns the accesses into
  ``ld.shared``/``st.shared``); other scratch buffers are per-thread arrays (``.local``), and
  must have a constant size (a kernel cannot call malloc);
* ``Barrier`` is ``llvm.nvvm.barrier0`` (``bar.sync 0``);
* a ``threadIdx.x`` loop annotated ``kiln.cuda.warp_reduce`` (``gpu_rules``: 32 lanes reducing
  into one element) accumulates in a register per lane, combines the lanes with
  ``shfl.sync.bfly`` (``warp_reduce.py``) and lane 0 stores the result;
* the function is a kernel entry (``ptx_kernel`` calling convention) that returns nothing;
  ``.maxntid`` tells ptxas the block size it will be launched with.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ...ir import dtype as dt
from ...ir.stmt import BufferStore, For, SeqStmt
from .. import cgutils as cg
from ..errors import CodegenError
from ..lower import STACK_LIMIT_BYTES, FuncLowerer, ModuleContext
from ..lower_expr import BufInfo
from .kernels import KernelPlan
from .prepare import SHARED, Barrier
from .warp_reduce import is_warp_loop, lower_warp_loop

# Shared memory a block may use without opting in to more (all GPUs since Kepler).
MAX_STATIC_SHARED_BYTES = 48 * 1024
_SREG = {"blockIdx": "ctaid", "threadIdx": "tid"}


class KernelLowerer(FuncLowerer):
    """Lowers one ``KernelPlan`` body into the kernel function ``fn``."""

    def __init__(self, mctx: ModuleContext, fn: ir.Function, label: str, plan: KernelPlan):
        super().__init__(mctx, fn, None, label)
        self.plan = plan
        self.shared_bytes = 0

    def stmt(self, s) -> None:
        if isinstance(s, Barrier):
            self.b.call(cg.declare(self.b.module, "llvm.nvvm.barrier0", ir.VoidType(), []), [])
        elif isinstance(s, SeqStmt) and any(is_warp_loop(x) for x in s.seq):
            seq, k = list(s.seq), 0
            while k < len(seq):     # a warp loop takes the initialisation just before it
                init = seq[k] if isinstance(seq[k], BufferStore) and k + 1 < len(seq) \
                    and is_warp_loop(seq[k + 1]) else None
                if init is not None and lower_warp_loop(self, seq[k + 1], init):
                    k += 2
                else:
                    self.stmt(seq[k])
                    k += 1
        elif is_warp_loop(s):
            lower_warp_loop(self, s, None)
        elif isinstance(s, For) and s.kind == "thread_binding":
            self._thread_loop(s)
        elif isinstance(s, For) and s.kind == "parallel":
            raise CodegenError(f"loop '{s.loop_var.name}' in '{self.label}' is a CPU parallel "
                               "loop; on the CUDA target bind it to a thread axis instead")
        else:
            super().stmt(s)

    def thread_index(self, tag: str, name: str):
        """The i64 value of ``tag`` (``threadIdx.x``, ``blockIdx.y``, ...) in this thread."""
        kind, axis = tag.split(".")
        reg = cg.declare(self.b.module, f"llvm.nvvm.read.ptx.sreg.{_SREG[kind]}.{axis}", cg.I32, [])
        return self.b.zext(self.b.call(reg, []), cg.I64, name=name)

    def _thread_loop(self, s: For) -> None:
        kind, axis = s.thread_binding.split(".")
        idx = self.thread_index(s.thread_binding, s.loop_var.name)
        self.vars[s.loop_var] = self._iarith("add", self.scalar_index(s.min), idx, "int64")
        launched = self.plan.block["xyz".index(axis)] if kind == "threadIdx" else None
        extent = cg.constant_int(self.scalar_index(s.extent))
        if launched is not None and extent is not None and extent < launched:
            # Another loop on this axis launched more threads than this one has iterations.
            self.guard(self.b.icmp_signed("<", idx, cg.I64(extent)), lambda: self.stmt(s.body))
        else:
            self.stmt(s.body)
        self.vars.pop(s.loop_var, None)

    def alloc(self, buf) -> None:
        shape = [getattr(s, "value", None) for s in buf.shape]
        if not all(isinstance(s, int) for s in shape):
            raise CodegenError(f"scratch buffer '{buf.name}' in '{self.label}' has the symbolic "
                               f"shape {tuple(buf.shape)}; GPU scratch buffers need a constant size")
        nbytes = math.prod(shape) * max(1, dt.bits(buf.dtype) // 8)
        if buf.scope == SHARED:
            self._shared(buf, max(1, math.prod(shape)), nbytes)
            return
        if nbytes > STACK_LIMIT_BYTES:
            raise CodegenError(f"scratch buffer '{buf.name}' ({nbytes} bytes) in '{self.label}' is "
                               f"too big for a GPU thread's local memory (<= {STACK_LIMIT_BYTES})")
        super().alloc(buf)

    def _shared(self, buf, count: int, nbytes: int) -> None:
        self.shared_bytes += nbytes
        if self.shared_bytes > MAX_STATIC_SHARED_BYTES:
            raise CodegenError(f"'{self.label}' needs {self.shared_bytes} bytes of shared memory "
                               f"(buffer '{buf.name}' is the last); a block has "
                               f"{MAX_STATIC_SHARED_BYTES}: use smaller tiles")
        module = self.b.module
        ty = ir.ArrayType(cg.memory_type(buf.dtype), count)
        gv = ir.GlobalVariable(module, ty, self.m.fresh(f"{self.fn.name}.{buf.name}."), addrspace=3)
        gv.linkage = "internal"
        gv.initializer = ir.Constant(ty, ir.Undefined)
        gv.align = 16
        with self.b.goto_block(self.entry):
            ptr = self.b.addrspacecast(gv, cg.PTR)
        self.bufs[buf] = BufInfo(ptr, self._strides(buf.shape, hoist=False))

    def finish(self) -> None:
        b = self.b
        b.branch(self.exit)
        b.position_at_end(self.entry)
        b.branch(self.prologue)
        b.position_at_end(self.prologue)
        b.branch(self._body)
        b.position_at_end(self.exit)
        b.ret_void()


def declare_kernel(mctx: ModuleContext, name: str, n_ptrs: int, n_ints: int) -> ir.Function:
    """The kernel entry ``void name(ptr, ..., i64, ...)``: buffer data pointers (which never
    alias: Kiln's kernel contract), then symbolic dimensions."""
    fn = mctx.new_function(name, ir.VoidType(), [cg.PTR] * n_ptrs + [cg.I64] * n_ints,
                           internal=False)
    fn.calling_convention = "ptx_kernel"
    for arg in fn.args[:n_ptrs]:
        arg.add_attribute("noalias")
    return fn


def annotate_block_size(module: ir.Module, fn: ir.Function, block) -> None:
    """``.maxntid x, y, z`` for ``fn``: ptxas allocates registers for that many threads."""
    for axis, n in zip("xyz", block):
        module.add_named_metadata("nvvm.annotations",
                                  [fn, ir.MetaDataString(module, f"maxntid{axis}"), cg.I32(n)])
