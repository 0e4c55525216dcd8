"""Splitting a lowered tensor program into GPU kernels, and their launch dimensions.

Each top-level statement of the program (under its root block) is one kernel, launched in
order. Its loops bound to ``blockIdx.x/y/z`` give the grid, its loops bound to
``threadIdx.x/y/z`` the thread block::

    for i_0 in T.thread_binding(n // 64, thread="blockIdx.x"):     grid  = (n // 64, 1, 1)
        for i_1 in T.thread_binding(64, thread="threadIdx.x"):     block = (64, 1, 1)
            B[i_0 * 64 + i_1] = A[i_0 * 64 + i_1] + 1.0

Grid sizes may be symbolic (expressions of the parameters' shape variables, evaluated when
the kernel is launched); thread-block sizes must be constants. A loop outside every thread
loop that is not bound itself would run the whole kernel serially, so it is an error naming
the loop, as is a block of more threads than the hardware has.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ...ir import (Add, BlockRealize, FloorDiv, FloorMod, For, IfThenElse, IntImm, Max, Min, Mul,
                   PrimExpr, PrimFunc, SeqStmt, Stmt, Sub, Var, structural_equal)
from ..errors import CodegenError

MAX_THREADS_PER_BLOCK = 1024
# Per-dimension limits of the CUDA programming guide (all compute capabilities >= 5.0).
MAX_BLOCK_DIM = {"x": 1024, "y": 1024, "z": 64}
MAX_GRID_DIM = {"x": 2 ** 31 - 1, "y": 65535, "z": 65535}
AXES = ("x", "y", "z")


@dataclass
class KernelPlan:
    """One kernel: its body (a statement of the lowered program), the loops bound to each
    thread axis, and the launch sizes (``grid``: expressions, ``block``: ints)."""
    name: str
    body: Stmt
    loops: Dict[str, List[For]] = field(default_factory=dict)
    grid: Tuple[PrimExpr, PrimExpr, PrimExpr] = ()
    block: Tuple[int, int, int] = (1, 1, 1)

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.block[0] * self.block[1] * self.block[2]


def global_scratch(func: PrimFunc) -> List:
    """The root block's scratch buffers: intermediates between the kernels of one program. They
    live in device memory that the caller allocates for each call (``kiln.runtime.cuda_device``)
    and are passed to the kernels after the parameters."""
    body = func.body
    if isinstance(body, BlockRealize) and not body.block.iter_vars:
        for buf in body.block.alloc_buffers:
            if buf.scope not in ("global", ""):
                raise CodegenError(f"scratch buffer '{buf.name}' (scope '{buf.scope}') is used by "
                                   "more than one kernel: only global memory outlives a kernel; "
                                   f"stage it through '{buf.scope}' inside the thread-bound loops")
        return list(body.block.alloc_buffers)
    return []


def _top_statements(func: PrimFunc) -> List[Stmt]:
    body = func.body
    if isinstance(body, BlockRealize) and not body.block.iter_vars:
        body = body.block.body
    return list(body.seq) if isinstance(body, SeqStmt) else [body]


def _collect(stmt: Stmt, label: str, loops: Dict[str, List[For]], bound_above: bool) -> None:
    """Gather the thread-bound loops under ``stmt``; raise on a loop outside every one."""
    if isinstance(stmt, For):
        if stmt.kind == "thread_binding":
            tag = stmt.thread_binding
            if tag == "vthread":
                raise CodegenError(f"loop '{stmt.loop_var.name}' in '{label}' is bound to vthread, "
                                   "which the CUDA target does not support")
            loops.setdefault(tag, []).append(stmt)
            _collect(stmt.body, label, loops, True)
            return
        if not bound_above:
            raise CodegenError(
                f"loop '{stmt.loop_var.name}' in '{label}' is not bound to a GPU thread: on the "
                "CUDA target every loop outside the thread-bound loops must be bound with "
                "sch.bind(loop, 'blockIdx.x' | 'threadIdx.x' | ...); it would run the whole "
                "kernel serially")
        if stmt.kind == "parallel":
            raise CodegenError(f"loop '{stmt.loop_var.name}' in '{label}' is a CPU parallel loop; "
                               "on the CUDA target bind it to a thread axis instead")
        _collect(stmt.body, label, loops, bound_above)
    elif isinstance(stmt, SeqStmt):
        for s in stmt.seq:
            _collect(s, label, loops, bound_above)
    elif isinstance(stmt, BlockRealize):
        _collect(stmt.block.body, label, loops, bound_above)
    elif isinstance(stmt, IfThenElse):
        _collect(stmt.then_case, label, loops, bound_above)
        if stmt.else_case is not None:
            _collect(stmt.else_case, label, loops, bound_above)


def _const(e) -> Optional[int]:
    return e.value if isinstance(e, IntImm) else None


def _block_dim(tag: str, loops: List[For], label: str) -> int:
    extents = [_const(f.extent) for f in loops]
    for f, n in zip(loops, extents):
        if n is None:
            raise CodegenError(f"loop '{f.loop_var.name}' in '{label}' is bound to {tag} with the "
                               f"symbolic extent {f.extent}; thread-block sizes must be constants "
                               "(split the loop by a constant factor first)")
    # Loops of one axis with smaller extents than the block are guarded in the kernel.
    return max(extents)


def _grid_dim(tag: str, loops: List[For], label: str) -> PrimExpr:
    first = loops[0].extent
    for f in loops[1:]:
        if not structural_equal(f.extent, first):
            raise CodegenError(f"loops '{loops[0].loop_var.name}' and '{f.loop_var.name}' in "
                               f"'{label}' are both bound to {tag} but have different extents "
                               f"({first} and {f.extent})")
    return first


def plan_kernels(func: PrimFunc, name: str) -> List[KernelPlan]:
    """The kernels of the lowered ``func`` (named ``name``), with their launch sizes."""
    plans = []
    tops = _top_statements(func)
    for k, stmt in enumerate(tops):
        label = name if len(tops) == 1 else f"{name} (kernel {k})"
        loops: Dict[str, List[For]] = {}
        _collect(stmt, label, loops, False)
        grid, block = [], []
        for axis in AXES:
            bl = loops.get(f"blockIdx.{axis}")
            g = _grid_dim(f"blockIdx.{axis}", bl, label) if bl else IntImm(1, "int64")
            if _const(g) is not None and not 0 <= _const(g) <= MAX_GRID_DIM[axis]:
                raise CodegenError(f"'{label}': grid dimension {axis} is {_const(g)}, beyond the "
                                   f"limit of {MAX_GRID_DIM[axis]}")
            grid.append(g)
            tl = loops.get(f"threadIdx.{axis}")
            n = _block_dim(f"threadIdx.{axis}", tl, label) if tl else 1
            if n > MAX_BLOCK_DIM[axis]:
                raise CodegenError(f"loop '{tl[0].loop_var.name}' in '{label}' is bound to "
                                   f"threadIdx.{axis} with {n} threads; the limit is "
                                   f"{MAX_BLOCK_DIM[axis]}")
            block.append(n)
        plan = KernelPlan(f"{name}_kernel{k}" if len(tops) > 1 else f"{name}_kernel", stmt, loops,
                          tuple(grid), tuple(block))
        if plan.threads > MAX_THREADS_PER_BLOCK:
            names = ", ".join(f"'{f.loop_var.name}' ({f.thread_binding}: {f.extent})"
                              for tag in sorted(loops) if tag.startswith("threadIdx")
                              for f in loops[tag][:1])
            raise CodegenError(f"'{label}': a thread block of {plan.threads} threads (loops "
                               f"{names}) is more than the {MAX_THREADS_PER_BLOCK} a GPU block "
                               "can have; split a thread loop and bind the outer part to blockIdx")
        plans.append(plan)
    return plans


# ---- launch sizes as data: the artifact stores them, the runtime evaluates them ---------------

_OPS = {Add: "add", Sub: "sub", Mul: "mul", FloorDiv: "floordiv", FloorMod: "floormod",
        Min: "min", Max: "max"}


def expr_to_json(e: PrimExpr, label: str):
    """A launch size as JSON: an int, a variable name, or ``[op, a, b]``."""
    if isinstance(e, IntImm):
        return int(e.value)
    if isinstance(e, Var):
        return e.name
    op = _OPS.get(type(e))
    if op is None:
        raise CodegenError(f"'{label}': the grid size {e} uses {type(e).__name__}, which launch "
                           "sizes cannot (only + - * // % min max of shape variables)")
    return [op, expr_to_json(e.a, label), expr_to_json(e.b, label)]


def eval_json(e, env: Dict[str, int]) -> int:
    """Evaluate an ``expr_to_json`` expression with the shape variables of ``env``."""
    if isinstance(e, int):
        return e
    if isinstance(e, str):
        return env[e]
    op, a, b = e[0], eval_json(e[1], env), eval_json(e[2], env)
    return {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b),
            "floordiv": a // b if b else 0, "floormod": a % b if b else 0}[op]
