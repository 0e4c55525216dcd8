"""``kiln.tune``: the auto-tuner. It searches each kernel's schedule decisions (the named
choices of the default rules, ``kiln.schedule.decisions``), measures candidates for real
through the C runtime in separate processes, and keeps every measurement in a JSON-lines
database that ``PassContext(tuning_db=...)`` / ``kiln.compile(..., tuning_db=...)`` apply.

    report = kiln.tune(mod, target="llvm", db="tuning.jsonl", trials=64)
    print(report)
    ex = kiln.compile(mod, "llvm", pipeline="default", tuning_db="tuning.jsonl")

Modules, one job each: ``workload`` (stable kernel keys), ``tasks`` (the kernels of a model),
``database`` (records), ``measure`` (executors: build and run candidates), ``search``
(candidate generation), ``tuner`` (the loop and its report), ``apply`` (records -> schedules).
See docs/tuning.md.
"""
from .database import Database, merge
from .workload import workload_hash

__all__ = ["Database", "merge", "workload_hash"]
