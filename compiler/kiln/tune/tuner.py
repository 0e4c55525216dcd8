"""``kiln.tune``: tune every kernel of a model and record each measurement.

For each task (``tasks.extract_tasks``), the default decisions are measured first (the
baseline; its outputs are the reference every other candidate must match), then candidates
from ``search.Space`` in small batches, the first of them seeded from the database (the best
decisions of other kernels of the same operators, ``transfer_seeds``). Which task gets the next batch is the one with the
largest expected gain: calls per model run x its best time x its remaining headroom (the
headroom shrinks with each batch that brings no improvement). A task stops at ``trials``
records in the database for its key (earlier runs count: running the same command again
after an interrupted run resumes it) or when its space has nothing new; everything stops at
``time_budget_s``. Every result is appended to the database as soon as it is known, so an
interrupted run keeps what it measured, and a candidate already in the database is never
measured again (the baseline is re-run for its reference outputs but not recorded twice).

>>> report = kiln.tune(mod, target="llvm", db="tuning.jsonl", trials=32)   # doctest: +SKIP
>>> print(report)                                                           # doctest: +SKIP
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .database import (Database, best_of, candidate_time, decisions_key, is_timing,
                       make_record, ranking, record_time)
from .measure import (Executor, LocalExecutor, MeasureInput, MeasureOptions, MeasureResult,
                      default_threads)
from .cost_model import CostModel, available
from . import ctrl_c, model_check
from .search import Space
from .tasks import Task, extract_tasks

DEFAULT_TRIALS = 32
# The most of a time budget the layer decisions may take (``layers.py``): each option of a
# layer is a compile of its own (1-3 s for a ResNet-18 conv), the kernels need the rest.
LAYERS_SHARE = 0.3


@dataclass
class KernelReport:
    """One kernel's tuning: ``trials`` (records for its key, this run's and earlier ones),
    ``new`` (measured in this run), ``failed`` (records that failed), the default and best
    per-call seconds (None when the default could not be measured), the best decisions."""
    name: str
    ops: str
    calls: int
    workload: str
    trials: int = 0
    new: int = 0
    failed: int = 0
    default_s: Optional[float] = None
    best_s: Optional[float] = None
    best_decisions: Dict[str, Any] = field(default_factory=dict)
    default_decisions: Dict[str, Any] = field(default_factory=dict)
    note: str = ""
    confirmed: bool = False
    stale: int = 0          # records of other schedule rules, skipped

    @property
    def speedup(self) -> Optional[float]:
        if self.default_s and self.best_s:
            return self.default_s / self.best_s
        return None


@dataclass
class TuneReport:
    """What ``tune`` did: per kernel (``kernels``), kernels left out (``skipped``), the model
    estimate (sum over kernels of calls x time) with default and best schedules, the seconds
    spent, whether it was interrupted, and the database path. ``str(report)`` is a table."""
    db: str
    target: str
    threads: int
    kernels: List[KernelReport]
    skipped: Dict[str, str]
    seconds: float = 0.0
    interrupted: bool = False
    # measured end to end (check_model): the whole model compiled without and with the records
    model_default_s: Optional[float] = None
    model_tuned_s: Optional[float] = None      # the variant the check kept (or the default)
    model_all_s: Optional[float] = None        # every change applied
    model_note: str = ""
    # (trials measured in this run, seconds since it started, model estimate) per measurement,
    # from when every kernel's default is known (``plot``)
    curve: List[tuple] = field(default_factory=list)
    recheck_at: Optional[float] = None     # seconds when the final re-check began
    load: Optional[float] = None           # the 1-minute load average when the run began
    cores: int = 0                         # cores this process may use
    layers: List[Any] = field(default_factory=list)   # layers.LayerReport per conv layer

    def plot(self, path) -> str:
        """Draw the best model estimate against trials and wall time to the image ``path``
        (``plot.plot_report``; needs matplotlib); returns the path."""
        from .plot import plot_report
        return plot_report(self, path)

    @property
    def default_model_s(self) -> Optional[float]:
        ks = [k for k in self.kernels if k.default_s is not None]
        return sum(k.calls * k.default_s for k in ks) if ks else None

    @property
    def best_model_s(self) -> Optional[float]:
        ks = [k for k in self.kernels if k.default_s is not None]
        return sum(k.calls * (k.best_s or k.default_s) for k in ks) if ks else None

    def __str__(self) -> str:
        def us(s):
            return f"{s * 1e6:.1f}" if s is not None else "-"
        rows = [("kernel", "calls", "trials", "new", "failed", "default us", "best us", "speedup")]
        for k in self.kernels:
            sp = f"{k.speedup:.2f}x" if k.speedup else "-"
            rows.append((k.name, str(k.calls), str(k.trials), str(k.new), str(k.failed),
                         us(k.default_s), us(k.best_s), sp))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [f"tuning on {self.target!r} at {self.threads} thread(s), database {self.db}"
                 + (" (interrupted)" if self.interrupted else "")]
        for j, r in enumerate(rows):
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(r, widths))))
            if j == 0:
                lines.append("  ".join("-" * w for w in widths))
        from .layers import describe
        for lay in self.layers:
            ts = ", ".join(f"{describe(lay.decision, o)} {us(t)} us"
                           for o, t in lay.times.items())
            pick = lay.best
            lines.append(f"layer {lay.kernel} (x{lay.calls}): {ts or lay.note}"
                         + ("" if pick is None else
                            f" -> {describe(lay.decision, pick)}"
                            + (" (the default)" if pick == lay.default else
                               f" (the default: {describe(lay.decision, lay.default)})"))
                         + ("" if lay.kept else
                            "; not kept: the end-to-end check kept the default"))
        d, b = self.default_model_s, self.best_model_s
        if d is not None:
            lines.append(f"model estimate (sum of calls x time): default {d * 1e3:.3f} ms, "
                         f"tuned {b * 1e3:.3f} ms ({d / b:.2f}x), in {self.seconds:.0f} s")
        md, mt = self.model_default_s, self.model_tuned_s
        if md is not None and mt is not None:
            every = "" if self.model_all_s is None or self.model_all_s == mt else \
                f"; every change {self.model_all_s * 1e3:.3f} ms ({md / self.model_all_s:.2f}x)"
            lines.append(f"model measured end to end (alternating, fastest of 7 rounds): "
                         f"default {md * 1e3:.3f} ms, "
                         f"tuned {mt * 1e3:.3f} ms ({md / mt:.2f}x){every}")
            if mt > md * 1.02:
                lines.append("warning: the tuned model is slower end to end than the default; "
                             "kernels timed once only may owe their speedup to noise: run "
                             "the same command again to re-check them (it resumes)")
        if self.model_note:
            lines.append(f"model: {self.model_note}")
        busy = busy_note(self.load, self.cores, self.threads)
        if busy:
            lines.append(f"warning: {busy}")
        for name, why in self.skipped.items():
            lines.append(f"not tuned: {name}: {why}")
        for k in self.kernels:
            if k.stale:
                lines.append(f"note: {k.name}: {k.stale} records of other schedule rules "
                             f"skipped (a rule changed since they were measured)")
            if k.note:
                lines.append(f"note: {k.name}: {k.note}")
        return "\n".join(lines)


class _TaskState:
    def __init__(self, task: Task, db: Database, trials: Optional[int], seed: int,
                 model: bool):
        self.task = task
        self.space = Space(task, seed=seed, model=CostModel(seed=seed) if model else None)
        self.report = KernelReport(task.name, task.ops, task.calls, task.workload)
        self.trials = trials
        everything = db.records()
        every = [r for r in everything
                 if (r["workload"], r["target"], r["threads"]) == task.key]
        self.records = [r for r in every if r.get("rules") == task.rules]
        self.report.stale = len(every) - len(self.records)
        self.space.mark_seen(r["decisions"] for r in self.records)
        self.space.add_seeds(transfer_seeds(everything, task))
        self.reference = None
        self.baseline_wall: Optional[float] = None
        self.stale_batches = 0
        self.done = False
        self.update()

    def candidates(self) -> int:
        return len({decisions_key(x["decisions"]) for x in self.records})

    def update(self) -> None:
        r = self.report
        r.trials = self.candidates()
        ok = {decisions_key(x["decisions"]) for x in self.records if is_timing(x)}
        r.failed = r.trials - len(ok)
        best = best_of(self.records)
        if best is not None:
            r.best_s, r.best_decisions = record_time(best), dict(best["decisions"])

    def parents(self):
        return [(x["decisions"], record_time(x)) for x in self.records if is_timing(x)]

    def left(self) -> Optional[int]:
        return None if self.trials is None else max(0, self.trials - self.candidates())

    def gain(self) -> float:
        r = self.report
        t = r.best_s or r.default_s or 0.0
        return r.calls * t * (0.5 ** self.stale_batches)


def busy_note(load: Optional[float], cores: int, threads: int) -> str:
    """A warning when other work kept the machine busy as tuning began (``load``: the
    1-minute load average, ``cores`` usable, ``threads`` timed with): fewer free cores than
    threads make every timing noisy, and a serial candidate look as fast as a parallel one
    (a decoder run on a shared 2-core machine recorded parallel=0 as the best of a matmul,
    and the tuned model ran 1.8x slower once the machine was free). "" when it was idle."""
    if load is None or not cores or cores - load >= threads - 0.25:
        return ""
    return (f"the machine was busy when tuning began (load average {load:.1f} on {cores} "
            f"cores, timing at {threads} thread(s)): timings, and above all how candidates "
            f"scale over threads, are unreliable; tune on an idle machine")


def transfer_seeds(records, task: Task, limit: int = 8) -> List[Dict[str, Any]]:
    """The best decisions of up to ``limit`` other kernels of the same operators (``ops``),
    target, thread count and rules among ``records``, most recent first: what worked for a
    matmul of another shape is worth trying on this one (seeding from the database)."""
    groups: Dict[str, List[Dict[str, Any]]] = {}
    for r in records:
        if (r.get("status") == "ok" and r.get("ops") == task.ops
                and r["workload"] != task.workload and r["target"] == task.target_key
                and r["threads"] == task.threads and r.get("rules") == task.rules):
            groups.setdefault(r["workload"], []).append(r)
    bests = [b for b in (best_of(g) for g in groups.values()) if b is not None]
    bests.sort(key=lambda b: -b.get("time", 0.0))
    return [dict(b["decisions"]) for b in bests[:limit]]


def tune(mod, target="llvm", db="tuning.jsonl", trials: Optional[int] = None,
         time_budget_s: Optional[float] = None, num_threads: Optional[int] = None,
         ctx=None, executor: Optional[Executor] = None, options: Optional[MeasureOptions] = None,
         batch: Optional[int] = None, seed: int = 0, progress: bool = True,
         pipeline: bool = True, confirm: bool = True, check_model: bool = True,
         cost_model: bool = True, layers: bool = True) -> TuneReport:
    """Tune the kernels of ``mod`` (graph functions and tensor programs, e.g. an ONNX import
    after ``bind_params``) for ``target`` at ``num_threads`` runtime threads (default: every
    core), appending every measurement to the database ``db``; returns a ``TuneReport``.

    ``trials``: candidates per kernel to reach, earlier runs' included (default 32 when no
    ``time_budget_s``; None with a budget: until the budget or the space runs out);
    ``time_budget_s``: stop after this many seconds. ``ctx``: other ``PassContext`` options of the pipeline; ``executor``: where
    candidates are built and run (default: a ``LocalExecutor`` with ``options``); ``batch``:
    candidates per round (default: twice the builder processes). ``progress``: a tqdm bar on
    stderr with the best model estimate so far. With ``pipeline=False`` the module's tensor
    programs are tuned as they are (already through the pipeline with default_schedule off).
    ``confirm``: at the end (in the last quarter of a time budget), time the default and the
    best candidates of each kernel improved in this run again, alternating, four times each
    (``_confirm``): the search's own timings were taken minutes apart on a machine that may
    be busy. These are recorded too; the report's default / best columns are each
    candidate's median record.
    ``cost_model``: rank offspring with a learned model (``cost_model.py``; needs LightGBM,
    the ``tune`` extra; without it the search is random and evolutionary only).
    ``check_model``: at the very end, when a record changes some kernel's or layer's
    decisions, compile the whole model with the default schedules, with every change and with
    the changes of largest estimated gain, time them end to end, alternating, and keep the
    fastest set that beats the default (``model_check.py``; ``report.model_default_s`` /
    ``model_tuned_s``): kernels timed alone can behave differently in the model (the thread
    pool, caches). The choice is appended to the database as verdicts, so the tuned model is
    never slower than the default as far as the check can tell. Apply the records with
    ``PassContext(tuning_db=db)`` or ``kiln.compile(..., tuning_db=db)``.
    ``layers``: first measure the layer decisions (``layers.py``: each 3x3 conv direct or as
    Winograd, every option compiled and timed), so the kernels tuned next are those the
    measured choices make (``report.layers``).
    """
    args = dict(locals())
    with ctrl_c.latch() as pressed:
        return _tune(pressed, **args)


def _tune(pressed: ctrl_c.CtrlC, mod, target, db, trials, time_budget_s, num_threads, ctx,
          executor, options, batch, seed, progress, pipeline, confirm, check_model, cost_model,
          layers) -> TuneReport:
    """``tune``'s work; ``pressed.check()`` raises a Ctrl-C that Python dropped."""
    t_start = time.monotonic()
    load = None            # of this machine, when candidates are timed here
    if executor is None or isinstance(executor, LocalExecutor):
        try:
            load = os.getloadavg()[0]      # before this run starts any process of its own
        except (AttributeError, OSError):   # pragma: no cover - not Unix
            pass
    if trials is None and time_budget_s is None:
        trials = DEFAULT_TRIALS
    if trials is not None and trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    database = Database(db)
    own = executor is None
    executor = executor or LocalExecutor(options)
    layer_reports = []
    if layers and pipeline:
        # With a time budget the layers get at most LAYERS_SHARE of it; the kernels the rest.
        deadline = None if time_budget_s is None else t_start + LAYERS_SHARE * time_budget_s
        try:
            layer_reports = _tune_layers(mod, target, num_threads, ctx, database, executor,
                                         progress, deadline)
            pressed.check()
        except KeyboardInterrupt:
            if own:
                executor.close()
            raise
    tasks, skipped = extract_tasks(mod, target, num_threads, ctx, pipeline=pipeline,
                                   layers_db=database.path)
    threads = tasks[0].threads if tasks else int(num_threads or 1)
    report = TuneReport(database.path, str(target), threads, [], dict(skipped), load=load,
                        cores=default_threads(), layers=layer_reports)
    use_model = cost_model and available()
    states = [_TaskState(t, database, trials, seed + i, use_model) for i, t in enumerate(tasks)]
    report.kernels = [s.report for s in states]
    batch = batch or 2 * max(1, executor.slots)
    bar = _progress_bar(progress, states, trials)

    # The final check (``confirm``) gets the last quarter of a time budget: with a tenth, a
    # 60 s run of the GPT-style decoder re-checked one kernel of five, and the four single
    # timings left made the tuned model slower end to end than the default.
    search_s = None if time_budget_s is None else time_budget_s * (0.75 if confirm else 1.0)

    def over_budget() -> bool:
        return search_s is not None and time.monotonic() - t_start >= search_s

    def record(state: _TaskState, decisions, res: MeasureResult, new: bool = True,
               again: bool = False) -> None:
        t = state.task
        rec = make_record(t.workload, t.target_key, t.threads, t.name, decisions, res.status,
                          res.message, res.median_s, res.min_s, rules=t.rules, ops=t.ops,
                          target_str=t.target, build_s=round(res.build_s, 3),
                          run_s=round(res.run_s, 3),
                          **({"worker": res.extra["run_on"]} if res.extra.get("run_on") else {}))
        if new or again:
            database.append(rec)
            state.records.append(rec)
            state.report.new += 0 if again else 1
        state.update()
        if bar is not None:
            bar.update(1 if new and not again else 0)
            _bar_status(bar, report)
        if searching:
            add_point()
        pressed.check()     # after the record is saved: a dropped Ctrl-C stops here

    def add_point() -> None:
        report.curve.append((sum(s.report.new for s in states), time.monotonic() - t_start,
                             report.best_model_s))

    searching = False       # the curve starts once every default is measured
    try:
        _baselines(states, executor, record)
        searching = True
        add_point()
        while not over_budget():
            pressed.check()
            live = [s for s in states if not s.done and s.reference is not None
                    and s.left() != 0 and not s.space.exhausted]
            if not live:
                break
            s = max(live, key=_TaskState.gain)
            n = batch if s.left() is None else min(batch, s.left())
            s.space.fit(s.parents())
            cands = s.space.propose(n, s.parents())
            if not cands:
                s.done = True
                continue
            before = s.report.best_s
            inputs = [MeasureInput(s.task, c, s.reference) for c in cands]
            executor.measure(inputs, lambda i, res: record(s, cands[i], res),
                             run_timeout_s=_run_timeout(s, executor))
            improved = s.report.best_s is not None and (before is None
                                                        or s.report.best_s < before * 0.995)
            s.stale_batches = 0 if improved else s.stale_batches + 1
        if confirm:
            report.recheck_at = time.monotonic() - t_start
            _confirm(states, executor, record,
                     deadline=None if time_budget_s is None else t_start + time_budget_s)
        changed = [s for s in states if s.report.best_decisions
                   and s.report.best_decisions != s.report.default_decisions]
        layers_changed = any(r.best is not None and r.best != r.default
                             and r.note != "measured before" for r in layer_reports)
        pressed.check()
        if check_model and pipeline and ((changed and any(s.report.new for s in states))
                                         or layers_changed):
            key = states[0].task.target_key
            items = (model_check.kernel_items(states)
                     + model_check.layer_items(layer_reports, database, key, threads))
            model_check.check_model(mod, target, threads, ctx, database.path, executor, report,
                                    items, key)
    except KeyboardInterrupt:
        report.interrupted = True
    finally:
        if own:
            executor.close()
        if bar is not None:
            bar.close()
    for s in states:
        if s.space.exhausted and s.left():
            s.report.note = s.report.note or (f"every candidate of its space was measured "
                                              f"({s.report.trials} candidates)")
    report.seconds = time.monotonic() - t_start
    return report


def _tune_layers(mod, target, num_threads, ctx, database: Database, executor: Executor,
                 progress: bool, deadline: Optional[float] = None) -> list:
    """The layer decisions of ``mod`` measured (``layers.tune_layers``), one line per layer
    on stderr with ``progress``."""
    from ..transform.infra import PassContext
    from .layers import block_layers, describe, panel_layers, tune_layers, winograd_layers
    threads = int(num_threads or default_threads())
    base = (ctx or PassContext()).replace(target=str(target), cores=threads, tuning_db=None)

    def said(rep) -> None:
        if progress:
            pick = "?" if rep.best is None else describe(rep.decision, rep.best)
            print(f"kiln tune: layer {rep.kernel}: {pick}"
                  + (f" ({rep.note})" if rep.note else ""), file=sys.stderr)
    reports = tune_layers(winograd_layers(mod, base), str(target), threads, base, database,
                          executor, on_layer=said, deadline=deadline)
    # The blocks of the convs that stay direct, once the Winograd choices are recorded; then
    # the weights' panels.
    for find in (block_layers, panel_layers):
        found = find(mod, base.replace(tuning_db=database.path))
        reports += tune_layers(found, str(target), threads, base, database, executor,
                               on_layer=said, deadline=deadline)
    return reports


def _baselines(states: List[_TaskState], executor: Executor, record) -> None:
    """Measure each task's default decisions (all in one batch, built in parallel): the
    reference outputs, and the default time; recorded once per database."""
    inputs = [MeasureInput(s.task, s.space.default(), None) for s in states]
    measured = {id(s): {decisions_key(r["decisions"]) for r in s.records} for s in states}

    def done(i: int, res: MeasureResult) -> None:
        s = states[i]
        d = inputs[i].decisions
        s.report.default_decisions = dict(d)
        if res.ok:
            s.reference = res.outputs
            s.report.default_s = res.min_s
            s.baseline_wall = res.run_s
        else:
            s.report.note = f"the default schedule failed ({res.status}: " \
                            f"{res.message.splitlines()[0] if res.message else ''}); not tuned"
            s.done = True
        new = decisions_key(d) not in measured[id(s)]
        s.space.mark_seen([d])
        record(s, d, res, new=new)
        median = candidate_time(s.records, d) if res.ok else None
        if median is not None:    # ranked like the best: by its median record (resumed runs)
            s.report.default_s = record_time(median)
    executor.measure(inputs, done)


def _confirm(states: List[_TaskState], executor: Executor, record, rounds: int = 4,
             checks: int = 3, width: int = 3, deadline: Optional[float] = None) -> None:
    """The best candidates of each kernel improved in this run (or whose best an earlier run
    timed only once) timed again against the default, alternating, ``rounds`` times each. The timings are recorded, and a candidate is
    ranked by its median record (``database.best_of``), so one lucky timing does not win: the
    default may become the best again, or a candidate timed only once may become the best.
    Each check re-times the (up to ``width``) fastest candidates not re-timed yet, until the
    best has been re-timed (or is the default), at most ``checks`` times. The report's
    default and best times are those median records. Kernels are re-checked one at a time,
    the largest expected gain first, and none is started after ``deadline``
    (``time.monotonic()``; the end of the time budget)."""
    def timed_once(s) -> bool:         # its best is not the default and has one timing
        best = s.report.best_decisions
        return bool(best) and best != s.report.default_decisions and sum(
            decisions_key(r["decisions"]) == decisions_key(best) for r in s.records) == 1
    # kernels improved in this run, and those an earlier run left unchecked (so running
    # again finishes their re-check)
    todo = sorted((s for s in states if s.reference is not None
                   and (s.report.new > 0 or timed_once(s))),
                  key=lambda s: -s.report.calls * (s.report.default_s or 0.0))
    checked: Dict[int, set] = {id(s): set() for s in todo}
    default = {id(s): decisions_key(s.report.default_decisions) for s in todo}

    def unchecked(s) -> List[Dict[str, Any]]:
        out = []
        for r in ranking(s.records):
            k = decisions_key(r["decisions"])
            if k == default[id(s)] or k in checked[id(s)]:
                if not out:
                    return []          # the best is settled
                continue
            out.append(dict(r["decisions"]))
        return out[:width]

    out_of_time = False
    for _ in range(checks):
        round_ = [(s, unchecked(s)) for s in todo]
        round_ = [(s, cs) for s, cs in round_ if cs]
        if not round_:
            break
        for s, cands in round_:
            if deadline is not None and time.monotonic() >= deadline:
                out_of_time = True
                break
            checked[id(s)].update(decisions_key(c) for c in cands)
            inputs = []
            for r in range(rounds):
                group = [MeasureInput(s.task, s.report.default_decisions, s.reference)]
                group += [MeasureInput(s.task, c, s.reference) for c in cands]
                if r % 2:
                    group.reverse()    # neither the default nor a candidate always goes first
                inputs += group
            executor.measure(
                inputs, lambda i, res, s=s, inputs=inputs: record(s, inputs[i].decisions, res,
                                                                  again=True))
        if out_of_time:
            break
    for s in todo:
        if not checked[id(s)]:
            if out_of_time and s.report.best_decisions != s.report.default_decisions:
                s.report.note = ("the best candidate was timed once only (the time budget "
                                 "ran out before its re-check)")
            continue
        s.report.confirmed = True
        d = candidate_time(s.records, s.report.default_decisions)
        if d is not None:
            s.report.default_s = record_time(d)
        if s.report.best_decisions == s.report.default_decisions:
            s.report.note = ("measured again, alternating with the default, no candidate was "
                             "faster: the default stays")
        elif decisions_key(s.report.best_decisions) not in checked[id(s)]:
            s.report.note = "the best candidate was timed once only (too many re-checks)"


def _run_timeout(s: _TaskState, executor: Executor) -> float:
    """A run's time limit: generous next to the baseline's whole run (a candidate 50x slower
    than the default is not worth waiting for), within the executor's limit."""
    limit = getattr(getattr(executor, "options", None), "run_timeout_s", 60.0)
    wall = s.baseline_wall
    return limit if not wall else min(limit, max(10.0, 50.0 * wall))


def _progress_bar(enabled: bool, states: List[_TaskState], trials: Optional[int]):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:       # the 'tune' extra is not installed: no bar, same results
        return None
    total = None
    if trials is not None:
        total = sum(max(0, trials - len(s.records)) for s in states) or None
    return tqdm(total=total, desc="kiln tune", unit="trial", file=sys.stderr, leave=True,
                dynamic_ncols=True)


def _bar_status(bar, report: TuneReport) -> None:
    d, b = report.default_model_s, report.best_model_s
    if d is not None and b:
        bar.set_postfix_str(f"model {b * 1e3:.3f} ms (default {d * 1e3:.3f} ms, {d / b:.2f}x)",
                            refresh=False)
