"""``kiln.tune``: the auto-tuner. It searches each kernel's schedule decisions (the named
choices of the default rules, ``kiln.schedule.decisions``), measures candidates for real
through the C runtime in separate processes, and keeps every measurement in a JSON-lines
database that ``PassContext(tuning_db=...)`` / ``kiln.compile(..., tuning_db=...)`` apply.

    report = kiln.tune(mod, target="llvm", db="tuning.jsonl", trials=64)
    print(report)
    ex = kiln.compile(mod, "llvm", pipeline="default", tuning_db="tuning.jsonl")

Modules, one job each: ``workload`` (stable kernel keys), ``tasks`` (the kernels of a model),
``database`` (records), ``workers`` (crash- and hang-proof worker processes), ``measure``
(executors: build and run candidates), ``search`` (candidates), ``tuner`` (the loop and its
report), ``apply`` (records -> schedules). See docs/tuning.md.

The package itself is callable: ``kiln.tune(...)`` is ``kiln.tune.tune(...)``. (A function
``kiln.tune`` beside a package ``kiln.tune`` cannot work: importing any submodule, as
``default_schedule`` does for ``tuning_db``, sets the attribute ``kiln.tune`` to the package.)
"""
import sys
import types

from .database import Database, merge
from .measure import Executor, LocalExecutor, MeasureInput, MeasureOptions, MeasureResult
from .tasks import Task, extract_tasks
from .tuner import KernelReport, TuneReport, tune
from .workload import workload_hash


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs) -> TuneReport:
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["Database", "Executor", "KernelReport", "LocalExecutor", "MeasureInput",
           "MeasureOptions", "MeasureResult", "Task", "TuneReport", "extract_tasks", "merge",
           "tune", "workload_hash"]
