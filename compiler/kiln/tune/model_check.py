"""The tuner's last step: the whole model timed end to end, and the changes it keeps.

Kernels are tuned alone, each called again and again on its own inputs. Inside the model a
kernel runs between others: its inputs come from another kernel, possibly from the other
core's cache, and the thread pool's workers arrive from another loop. A gain measured alone
need not survive there, and many small ones can add up to a loss (a 10-minute tuning of
MobileNetV2 at two threads estimated 1.02x from its kernels and measured 0.95x end to end).

So the check compiles the model with the default schedules, with every change the tuning
found (a kernel's best decisions that differ from its default, a layer's best option that
differs from the default rule's), and with the changes of largest estimated gain alone (the
first half, quarter and the single largest, ranked by calls x time saved), times them all
in alternating rounds where candidates run (``Executor.time_models``), and keeps the fastest
set that beats the default by at least ``MIN_GAIN`` and, timed against it once more, is still
faster by half that; when none does, it keeps none.

Its choice is written to the database as verdicts (``database.py``): one record per kernel
and layer of the model with ``"chosen": true`` and the kept decisions, or the default's.
A compile with the database then builds the model that was checked: a tuned model is never
slower than the default schedules, as far as the check can tell, and the search's timings
stay in the file for the next run to build on.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence

from .database import Database, candidate_time, decisions_key, make_record

# A set of changes must beat the default by this fraction end to end to be kept: a smaller
# difference is within the round-to-round noise of the shared 2-core machine it was built on.
MIN_GAIN = 0.02


@dataclass
class Item:
    """One kernel or layer decision of the model: its key, the default's and the best
    candidate's decisions and records (times), and ``gain_s``: calls x seconds the best
    saves against the default when measured alone (0 when the best is the default)."""
    workload: str
    kernel: str
    ops: str
    calls: int
    default: Dict[str, Any]
    best: Dict[str, Any]
    default_record: Dict[str, Any]
    best_record: Dict[str, Any]
    gain_s: float

    @property
    def changed(self) -> bool:
        return decisions_key(self.best) != decisions_key(self.default)


def kernel_items(states) -> List[Item]:
    """The items of the tuner's kernel states (``tuner._TaskState``) whose default was
    measured."""
    out = []
    for s in states:
        r = s.report
        if r.default_s is None or not r.default_decisions:
            continue
        best = r.best_decisions or r.default_decisions
        d_rec = candidate_time(s.records, r.default_decisions)
        b_rec = candidate_time(s.records, best)
        if d_rec is None or b_rec is None:
            continue
        gain = r.calls * max(0.0, (r.default_s or 0.0) - (r.best_s or r.default_s or 0.0))
        out.append(Item(s.task.workload, r.name, s.task.ops, r.calls, dict(r.default_decisions),
                        dict(best), d_rec, b_rec, gain))
    return out


def layer_items(reports, database: Database, target_key: str, threads: int) -> List[Item]:
    """The items of the layer decisions (``layers.LayerReport``) with the default's and the
    best option's times known."""
    out = []
    for rep in reports:
        best = rep.best
        if best is None or rep.times.get(rep.default) is None or not rep.workload:
            continue
        records = database.query(rep.workload, target_key, threads)
        d_rec = candidate_time(records, {rep.decision: rep.default})
        b_rec = candidate_time(records, {rep.decision: best})
        if d_rec is None or b_rec is None:
            continue
        gain = rep.calls * max(0.0, rep.times[rep.default] - rep.times[best])
        out.append(Item(rep.workload, rep.kernel, d_rec.get("ops", ""), rep.calls,
                        {rep.decision: rep.default}, {rep.decision: best}, d_rec, b_rec, gain))
    return out


def candidate_sets(changes: Sequence[Item]) -> List[int]:
    """How many of ``changes`` (ranked by gain, largest first) each tuned variant keeps: all,
    half, a quarter and the largest one alone, without repeats.

    >>> candidate_sets(range(10))
    [10, 5, 3, 1]
    """
    n = len(changes)
    sizes = []
    for k in (n, math.ceil(n / 2), math.ceil(n / 4), 1):
        if 0 < k <= n and k not in sizes:
            sizes.append(k)
    return sizes


def verdicts(items: Sequence[Item], kept: set, target_key: str, threads: int,
             target_str: str, note: str) -> List[Dict[str, Any]]:
    """One verdict record per item: the best decisions for the workloads in ``kept``, the
    default's for the others (their times copied from that candidate's median record)."""
    out = []
    for it in items:
        keep = it.workload in kept
        src = it.best_record if keep else it.default_record
        out.append(make_record(it.workload, target_key, threads, it.kernel,
                               it.best if keep else it.default, "ok",
                               f"chosen by the end-to-end check: {note}",
                               median_s=src["median_s"], min_s=src.get("min_s", src["median_s"]),
                               rules=src.get("rules"), ops=it.ops, target_str=target_str,
                               chosen=True))
    return out


def check_model(mod, target, threads: int, ctx, db: str, executor, report, items: List[Item],
                target_key: str, rounds: int = 7) -> None:
    """The module docstring's check of ``mod`` (after ``bind_params``) against the database
    ``db``, for ``items`` (``kernel_items`` + ``layer_items``); sets ``report.model_default_s``,
    ``model_tuned_s`` (the kept variant's time) and ``model_note``, marks the kernels whose
    change was not kept, and appends the verdicts to ``db``."""
    from ..executable import compile as compile_model
    from ..transform.infra import PassContext
    from ..transform.pipeline import get_pipeline
    from .workload import ArgSpec
    changes = sorted((it for it in items if it.changed), key=lambda it: -it.gain_s)
    if not changes:
        return
    sizes = candidate_sets(changes)
    base = (ctx or PassContext()).replace(target=str(target), cores=threads)
    libs, spec = [], None
    with tempfile.TemporaryDirectory(prefix="kiln-check-") as tmp:
        variants = [None] + sizes          # None: the default schedules (no database)
        for k in variants:
            if k is None:
                c = base.replace(tuning_db=None)
            else:
                path = os.path.join(tmp, f"keep{k}.jsonl")
                if os.path.exists(db):
                    shutil.copyfile(db, path)
                kept = {it.workload for it in changes[:k]}
                trial = Database(path)
                for rec in verdicts(items, kept, target_key, threads, str(target), "trial"):
                    trial.append(rec)
                c = base.replace(tuning_db=path)
            ex = compile_model(get_pipeline("default", c)(mod), target)
            libs.append(ex.library_path)
            public = [f for f in ex.spec.functions if not f.private]
            spec = public[0] if public else None
        if spec is None or any(not isinstance(d, int) for p in spec.params for d in p.shape):
            report.model_note = "not measured end to end (no function with static shapes)"
            return
        args = [ArgSpec(tuple(p.shape), p.dtype, False) for p in spec.params]
        est = report.default_model_s or 1e-3
        calls = max(1, int(0.02 / max(est, 1e-6)))

        def timed(paths):
            return executor.time_models(paths, spec.name, args, threads, rounds, calls, 0,
                                        target_key,
                                        max(60.0, 50 * len(paths) * rounds * calls * est))
        kind, value = timed(libs)
        if kind == "ok":
            default_s, tuned = value[0], dict(zip(sizes, value[1:]))
            k_best = min(tuned, key=tuned.get)
            keep = k_best if tuned[k_best] < default_s * (1 - MIN_GAIN) else 0
            confirmed = None
            if keep:
                # The fastest of several variants is the luckiest too: time it against the
                # default once more, and keep it only if it is still faster.
                kind, value = timed([libs[0], libs[1 + sizes.index(keep)]])
                if kind == "ok":
                    confirmed = value
                    if value[1] >= value[0] * (1 - MIN_GAIN / 2):
                        keep = 0
    if kind != "ok":
        report.model_note = f"the end-to-end check failed ({kind}): {str(value).splitlines()[0]}"
        return
    report.model_default_s = default_s
    report.model_all_s = tuned[sizes[0]]
    report.model_tuned_s = tuned[keep] if keep else default_s
    times = ", ".join(f"{k} of {len(changes)}: {tuned[k] * 1e3:.3f} ms" for k in sizes)
    again = "" if confirmed is None else \
        f"; again: {confirmed[1] * 1e3:.3f} ms against {confirmed[0] * 1e3:.3f} ms"
    if keep:
        report.model_note = (f"kept the {keep} change(s) of {len(changes)} with the largest "
                             f"estimated gain, the fastest end to end ({times}; default "
                             f"{default_s * 1e3:.3f} ms{again})")
    else:
        report.model_note = (f"no set of changes beat the default schedules by "
                             f"{MIN_GAIN:.0%} end to end{'' if confirmed is None else ' twice'} "
                             f"({times}; default "
                             f"{default_s * 1e3:.3f} ms{again}): the database keeps the "
                             f"defaults")
    kept = {it.workload for it in changes[:keep]}
    database = Database(db)
    for rec in verdicts(items, kept, target_key, threads, str(target),
                        f"kept {keep} of {len(changes)} changes"):
        database.append(rec)
    dropped = {it.workload for it in changes[keep:]}
    for k in report.kernels:
        if k.workload in dropped:
            k.note = ("its best was not kept: the end-to-end check found the model no faster "
                      "with it (the default stays)")
            k.best_s, k.best_decisions = k.default_s, dict(k.default_decisions)
    for lay in report.layers:
        if lay.workload in dropped:
            lay.kept = False
