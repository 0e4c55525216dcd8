"""Tasks: the kernels of a model to tune, as the default pipeline would schedule them.

``extract_tasks(mod, target, threads)`` runs the default pipeline for ``target`` with
``default_schedule`` disabled, so what comes out are exactly the unscheduled kernels that
``default_schedule`` (and so ``PassContext(tuning_db=...)``) will see, and counts how many
times the graph functions call each one (``call_tir``). A kernel nobody would schedule (it
already has a ``kiln.schedule``) or whose arguments cannot be made (a symbolic shape) is left
out, with the reason in ``skipped``.

>>> tasks, skipped = extract_tasks(mod, "llvm", threads=2)     # doctest: +SKIP
>>> tasks[0].name, tasks[0].calls, tasks[0].workload           # doctest: +SKIP
('fused_matmul_add', 1, '6e69e26b4df6146918039e5f')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ..ir import IRModule, PrimFunc, collect
from ..ir.graph import Call, Function, GlobalVar
from ..transform.default_schedule import needs_schedule
from ..transform.infra import PassContext
from ..transform.kernels import ATTR_OPS
from .workload import ArgSpec, arg_specs, rules_version, workload_hash


@dataclass
class Task:
    """One kernel to tune: ``func`` (unscheduled), how many times a model run calls it, its
    database key (``workload``, ``target_key``, ``threads``), the target string it is built
    for, the options it is scheduled with (``ctx``, with ``cores=threads``) and its
    arguments (``args``), and the version of the schedule rules its records are made with
    (``rules``, part of their key)."""
    name: str
    func: PrimFunc
    calls: int
    workload: str
    target: str
    target_key: str
    threads: int
    ctx: PassContext
    args: List[ArgSpec]
    rules: str = ""         # the schedule rules' version (``workload.rules_version``)

    @property
    def ops(self) -> str:
        return str(dict(self.func.attrs).get(ATTR_OPS, self.name))

    @property
    def key(self) -> Tuple[str, str, int]:
        return (self.workload, self.target_key, self.threads)


def unscheduled(mod: IRModule, ctx: PassContext) -> IRModule:
    """``mod`` through the default pipeline for ``ctx`` with ``default_schedule`` off. A
    ``ctx.tuning_db`` then only supplies the layer decisions (``layers.py``: which convs run
    as Winograd), so the kernels are those a compile with that database makes."""
    from ..transform.pipeline import get_pipeline
    off = tuple(ctx.disabled_passes) + ("default_schedule",)
    return get_pipeline("default", ctx.replace(disabled_passes=off))(mod)


def call_counts(mod: IRModule) -> Dict[str, int]:
    """Kernel name -> how many ``call_tir``s of it the graph functions make."""
    counts: Dict[str, int] = {}
    for f in mod.functions.values():
        if not isinstance(f, Function):
            continue
        for c in collect(f, Call):
            if c.op == "call_tir" and c.args and isinstance(c.args[0], GlobalVar):
                counts[c.args[0].name] = counts.get(c.args[0].name, 0) + 1
    return counts


def extract_tasks(mod: IRModule, target="llvm", threads: Optional[int] = None,
                  ctx: Optional[PassContext] = None,
                  pipeline: bool = True,
                  layers_db: Optional[str] = None) -> Tuple[List[Task], Dict[str, str]]:
    """(tasks, skipped: kernel name -> why) of ``mod`` for ``target`` at ``threads`` runtime
    threads (default: every usable core). ``ctx`` gives other pipeline options; with
    ``pipeline=False`` the module's tensor programs are taken as they are (already through a
    pipeline with ``default_schedule`` off). ``layers_db``: a tuning database whose layer
    records decide which convs run as Winograd (``layers.py``; None: the cost rule). Tasks are
    in the module's order; two kernels with the same workload are one task whose ``calls``
    add up."""
    from ..codegen.target import parse_target
    from .measure import default_threads
    target_str = str(target) if not isinstance(target, str) else target
    parse_target(target_str)            # a bad target fails here, with codegen's message
    threads = int(threads or default_threads())
    base = (ctx or PassContext()).replace(target=target_str, cores=threads, tuning_db=None)
    if pipeline:
        mod = unscheduled(mod, base.replace(tuning_db=layers_db))
    counts = call_counts(mod)
    called = _called_kernels(mod, target_str)
    rctx = base.resolved()
    key = rctx.machine.key()
    tasks: Dict[str, Task] = {}
    skipped: Dict[str, str] = {}
    for name, f in mod.functions.items():
        if not isinstance(f, PrimFunc):
            continue
        if not needs_schedule(f):
            skipped[name] = "already scheduled"
            continue
        if called is not None and name not in called:
            skipped[name] = "never called: the memory plan does it (a concat or slice in place)"
            continue
        try:
            args = arg_specs(f)
        except ValueError as e:
            skipped[name] = str(e)
            continue
        w = workload_hash(f)
        calls = max(1, counts.get(name, 0)) if counts else 1
        if w in tasks:
            tasks[w].calls += calls
            continue
        tasks[w] = Task(name, f, calls, w, target_str, key, threads, base, args,
                        rules_version())
    return list(tasks.values()), skipped


def _called_kernels(mod: IRModule, target: str) -> Optional[set]:
    """The kernels the executable's code calls (``executable.lower``: a concat or slice that
    the memory plan does in place calls none); None when ``mod`` has no graph function."""
    from ..executable.lower import LowerError, lower_module
    try:
        spec, _ = lower_module(mod, target)
    except LowerError:
        return None
    return set(spec.kernels)
