"""Measuring candidates: build each in a worker process, run it through the C runtime in
another, and say what happened.

A candidate is a task's kernel scheduled with one set of decisions. ``build_candidate`` (run
in a builder process) schedules the unscheduled kernel with ``Decisions(fixed=decisions)``
through ``default_schedule.schedule_kernel`` (the rules' one definition), checks that the
decisions replay exactly, and compiles it with ``kiln.codegen.build_library`` into the build
cache. ``run_candidate`` (run in the runner process) loads the library with the runtime, calls
it on seeded random inputs (outputs zero-initialised) with ``kiln.set_num_threads(threads)``,
compares its outputs with the reference (the default schedule's), then times it: warm-up
calls (at least ``warmup`` and ``warmup_s`` seconds), then ``repeats`` timings of ``number`` calls each (``number`` chosen so one timing
lasts at least ``min_repeat_s``); the median and the minimum per-call time are kept.

An ``Executor`` turns ``MeasureInput``s into ``MeasureResult``s. ``LocalExecutor`` (the
default) builds on a few builder processes in parallel and then runs the batch one candidate
at a time on one runner process, so builds never disturb timings. A builder or runner that
crashes (the process dies: a segfault in generated code), hangs past its time limit, or
raises is recorded as a failed result with the reason (``build_error``, ``run_error``,
``timeout``; ``wrong_result`` when the outputs differ from the reference) and is started
again for the next candidate: nothing a candidate does stops the tuner. Another executor
implements the same ``measure`` method: ``dask_executor.DaskExecutor`` sends the same build
and run jobs to the workers of a Dask cluster.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from .workers import Outcome, Worker, run_parallel
from .workload import ArgSpec


def default_threads() -> int:
    """Every core this process may run on (the affinity mask)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):   # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class MeasureOptions:
    """How candidates are timed and checked (module docstring). ``rtol``: the largest
    difference from the reference allowed, relative to the reference's largest magnitude."""
    warmup: int = 2
    warmup_s: float = 0.05
    repeats: int = 7
    min_repeat_s: float = 0.002
    build_timeout_s: float = 300.0
    run_timeout_s: float = 60.0
    rtol: float = 1e-3
    seed: int = 0


@dataclass
class MeasureInput:
    """One candidate: a task (``tasks.Task``), the decisions to schedule it with, and the
    outputs a correct candidate gives (``reference``; None: not checked, and the outputs are
    returned, for the run that makes the reference)."""
    task: Any
    decisions: Dict[str, Any]
    reference: Optional[List[np.ndarray]] = None


@dataclass
class MeasureResult:
    """What measuring one candidate gave: ``status`` (``"ok"`` or a failure, as in the
    database), ``message``, per-call ``median_s`` / ``min_s``, the outputs when asked for
    (the reference run), and the seconds spent building and running."""
    status: str
    message: str = ""
    median_s: Optional[float] = None
    min_s: Optional[float] = None
    outputs: Optional[List[np.ndarray]] = None
    build_s: float = 0.0
    run_s: float = 0.0
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# ---- what runs in the worker processes -------------------------------------------------------
class ReplayError(ValueError):
    """Decisions that do not replay to themselves on the kernel (stale or incomplete)."""


def schedule_candidate(func, ctx, decisions: Dict[str, Any]):
    """``func`` scheduled with exactly ``decisions``; ``ReplayError`` when they do not replay."""
    from ..schedule.decisions import Decisions
    from ..transform.default_schedule import schedule_kernel
    d = Decisions(fixed=decisions)
    out = schedule_kernel(func, ctx, d)
    if d.stale or d.made != dict(decisions):
        raise ReplayError(f"decisions {decisions} replay as {d.made} (stale: {d.stale})")
    return out


def build_candidate(func, ctx, decisions: Dict[str, Any], target: str) -> str:
    """Schedule ``func`` with ``decisions`` and compile it; the library's path (build cache)."""
    from ..codegen import build_library
    from ..driver import lower
    from ..ir import IRModule
    scheduled = schedule_candidate(func, ctx, decisions)
    return build_library(lower(IRModule({"main": scheduled})), target)


def make_args(specs: Sequence[ArgSpec], seed: int) -> List[np.ndarray]:
    """Seeded random inputs (floats standard normal, integers and bools 0 or 1: always valid
    indices) and zero-initialised outputs."""
    rng = np.random.default_rng(seed)
    out = []
    for s in specs:
        if s.output:
            out.append(np.zeros(s.shape, s.dtype))
        elif np.dtype(s.dtype).kind == "f":
            out.append(rng.standard_normal(s.shape).astype(s.dtype))
        else:
            out.append(rng.integers(0, 2, size=s.shape).astype(s.dtype))
    return out


def compare(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray],
            rtol: float) -> Optional[str]:
    """None when every output matches its reference: NaN and infinities at the same places,
    and the finite values within ``rtol`` of the reference's largest finite magnitude (a
    tolerance that different summation orders meet and a wrong program does not); else
    what differs."""
    if len(outputs) != len(reference):
        return f"{len(outputs)} outputs, the reference has {len(reference)}"
    for i, (got, want) in enumerate(zip(outputs, reference)):
        if got.shape != want.shape:
            return f"output {i}: shape {got.shape}, the reference's is {want.shape}"
        g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
        fin = np.isfinite(w)
        special = ~fin & ~((g == w) | (np.isnan(g) & np.isnan(w)))
        if special.any():
            k = int(np.argmax(special))
            return f"output {i}: element {k} is {g[k]}, the reference's is {w[k]}"
        if not fin.any():
            continue
        err = np.abs(g[fin] - w[fin])
        err[np.isnan(err)] = np.inf
        scale = float(np.max(np.abs(w[fin])))
        k = int(np.argmax(err))
        if err[k] > rtol * max(scale, 1e-30):
            at = int(np.flatnonzero(fin)[k])
            return (f"output {i}: element {at} is {g[at]:.6g}, the reference's {w[at]:.6g} "
                    f"(allowed difference {rtol:g} x {scale:.3g})")
    return None


def run_candidate(lib_path: str, specs: Sequence[ArgSpec], threads: int,
                  options: MeasureOptions, reference: Optional[List[np.ndarray]],
                  want_outputs: bool) -> Dict[str, Any]:
    """Run and time the library at ``lib_path`` (in the runner process; module docstring)."""
    from ..runtime import load_module, nd, set_num_threads
    set_num_threads(threads)
    f = load_module(lib_path)["main"]
    args = [nd.array(a) for a in make_args(specs, options.seed)]
    t0 = time.perf_counter()
    f(*args)
    first = time.perf_counter() - t0
    outputs = [a.numpy() for a, s in zip(args, specs) if s.output]
    if reference is not None:
        why = compare(outputs, reference, options.rtol)
        if why is not None:
            return {"status": "wrong_result", "message": why}
    t_end = time.perf_counter() + options.warmup_s   # wake the thread pool and the caches
    for k in range(1_000_000):
        if k >= options.warmup and time.perf_counter() >= t_end:
            break
        f(*args)
    t0 = time.perf_counter()
    f(*args)
    est = max(time.perf_counter() - t0, 1e-9)
    number = max(1, int(np.ceil(options.min_repeat_s / est)))
    times = []
    for _ in range(options.repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            f(*args)
        times.append((time.perf_counter() - t0) / number)
    return {"status": "ok", "median_s": float(np.median(times)), "min_s": float(min(times)),
            "number": number, "first_s": first, "outputs": outputs if want_outputs else None}


def run_models(lib_paths: Sequence[str], function: str, specs: Sequence[ArgSpec],
               threads: int, rounds: int, calls: int, seed: int) -> List[float]:
    """Compiled models (``kiln.compile`` libraries) timed end to end in rounds (the order
    reversed each round) of ``calls`` calls of ``function`` on seeded random inputs; the seconds per call of each
    in its fastest round (as ``database.record_time``; in the runner process). Their outputs
    must agree (``compare``)."""
    from ..runtime import VirtualMachine, cpu, nd, set_num_threads
    set_num_threads(threads)
    fns = [VirtualMachine(p, cpu())[function] for p in lib_paths]
    args = [nd.array(a) for a in make_args(specs, seed)]

    def outputs(r):
        return [o.numpy() for o in (r if isinstance(r, tuple) else (r,))]
    first = outputs(fns[0](*args))
    for f in fns[1:]:
        why = compare(outputs(f(*args)), first, 1e-3)
        if why is not None:
            raise ValueError(f"the compiled models disagree: {why}")
    times: List[List[float]] = [[] for _ in fns]
    order = list(range(len(fns)))
    for _ in range(rounds):
        order.reverse()          # A B, B A, ...: neither always goes first
        for k in order:
            f, ts = fns[k], times[k]
            f(*args)
            t0 = time.perf_counter()
            for _ in range(calls):
                f(*args)
            ts.append((time.perf_counter() - t0) / calls)
    return [float(min(ts)) for ts in times]


# ---- executors -------------------------------------------------------------------------------
class Executor:
    """Builds and runs candidates. ``measure(inputs, on_result, run_timeout_s)`` returns one
    ``MeasureResult`` per input, in order, calling ``on_result(i, result)`` as each is known
    (so its caller can record it at once); ``run_timeout_s`` bounds one run (default: the
    executor's). ``slots``: how many candidates it builds at once (the tuner's batches are
    twice that). ``time_models`` times compiled models end to end where candidates run
    (``run_models``). ``close()`` frees what it holds."""

    slots: int = 1

    def measure(self, inputs: Sequence[MeasureInput],
                on_result: Optional[Callable[[int, MeasureResult], None]] = None,
                run_timeout_s: Optional[float] = None) -> List[MeasureResult]:
        raise NotImplementedError

    def time_models(self, lib_paths: Sequence[str], function: str, specs: Sequence[ArgSpec],
                    threads: int, rounds: int, calls: int, seed: int, target_key: str,
                    timeout_s: float) -> Outcome:
        """``run_models(lib_paths, ...)`` on a runner of the target ``target_key``, as a
        ``workers.Outcome``: ``("ok", [seconds per call of each])`` or a failure."""
        return ("error", f"{type(self).__name__} does not time whole models")

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _short(message: str, limit: int = 600) -> str:
    message = message.strip()
    return message if len(message) <= limit else message[:limit] + " ..."


def build_failure(kind: str, value: Any) -> MeasureResult:
    """The result of a candidate whose build ended with the ``workers.Outcome`` (kind, value),
    kind not ``"ok"``."""
    if kind == "timeout":
        return MeasureResult("timeout", f"build: {value}")
    if kind == "died":
        return MeasureResult("build_error", f"the builder process died: {value}")
    return MeasureResult("build_error", _short(str(value)))


def run_result(kind: str, value: Any) -> MeasureResult:
    """The result of a candidate whose run (``run_candidate`` in a runner process) ended with
    the ``workers.Outcome`` (kind, value)."""
    if kind == "timeout":
        return MeasureResult("timeout", f"run: {value}")
    if kind == "died":
        return MeasureResult("run_error", f"the runner process died: {value}")
    if kind != "ok":
        return MeasureResult("run_error", _short(str(value)))
    if value["status"] != "ok":
        return MeasureResult(value["status"], value.get("message", ""))
    return MeasureResult("ok", "", value["median_s"], value["min_s"], value.get("outputs"),
                         extra={"number": value["number"]})


def run_args(m: MeasureInput, options: MeasureOptions) -> tuple:
    """``run_candidate``'s arguments after the library path, for the candidate ``m``."""
    t = m.task
    return (t.args, t.threads, options, m.reference, m.reference is None)


class LocalExecutor(Executor):
    """Builder processes (``build_workers``, default: every core) and one runner process on
    this machine (module docstring). ``builder`` is the module-level function a builder runs,
    ``builder(func, ctx, decisions, target) -> library path`` (``build_candidate``)."""

    def __init__(self, options: Optional[MeasureOptions] = None,
                 build_workers: Optional[int] = None,
                 builder: Callable[..., str] = build_candidate):
        self.options = options or MeasureOptions()
        self.builders = [Worker() for _ in range(max(1, build_workers or default_threads()))]
        self.runner = Worker()
        self.builder = builder

    @property
    def slots(self) -> int:
        return len(self.builders)

    def measure(self, inputs, on_result=None, run_timeout_s=None):
        opts = self.options
        results: List[Optional[MeasureResult]] = [None] * len(inputs)
        t0 = time.perf_counter()
        calls = [(self.builder, (m.task.func, m.task.ctx, m.decisions, m.task.target))
                 for m in inputs]
        built: List[Outcome] = run_parallel(self.builders, calls, opts.build_timeout_s)
        per_build = (time.perf_counter() - t0) / max(1, len(inputs))
        for i, (m, (kind, value)) in enumerate(zip(inputs, built)):
            if kind == "ok":
                t0 = time.perf_counter()
                res = run_result(*self.runner.call(run_candidate, (value,) + run_args(m, opts),
                                                   run_timeout_s or opts.run_timeout_s))
                res.run_s = time.perf_counter() - t0
            else:
                res = build_failure(kind, value)
            res.build_s = per_build
            results[i] = res
            if on_result is not None:
                on_result(i, res)
        return results  # type: ignore[return-value]

    def time_models(self, lib_paths, function, specs, threads, rounds, calls, seed,
                    target_key, timeout_s):
        return self.runner.call(run_models, (list(lib_paths), function, list(specs), threads,
                                             rounds, calls, seed), timeout_s)

    def close(self) -> None:
        for w in self.builders + [self.runner]:
            w.close()
