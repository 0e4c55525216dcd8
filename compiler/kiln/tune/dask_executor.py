"""Measuring candidates on the workers of a Dask cluster (``distributed``, the ``tune`` extra).

``DaskExecutor("tcp://host:8786")`` (``kiln tune ... --scheduler tcp://host:8786``) sends the
same two jobs ``LocalExecutor`` runs to the cluster's workers: a *build* job (schedule the
kernel with the candidate's decisions and compile it, ``measure.build_candidate``) that returns
the library's bytes, then a *run* job that loads those bytes through the C runtime, checks the
outputs and times it (``measure.run_candidate``). Neither runs in the Dask worker process
itself: each Dask worker keeps its own ``workers.Worker`` processes, so a candidate that
segfaults or hangs kills a throwaway process, is recorded as failed, and never takes a Dask
worker down.

Routing by target: a worker says which target it measures on with a Dask *resource* named
after the target's fingerprint (``Machine.key()``, the key records are looked up by), e.g.
``kiln-x86_64-v512x32-fma2x4`` (``target_resource``). Start each worker with it::

    dask scheduler                                           # on one machine: tcp://host:8786
    dask worker tcp://host:8786 --nthreads 2 --resources "$(python -m kiln.tune.dask_executor)"

(``python -m kiln.tune.dask_executor [--target T]`` prints ``kiln-...=1`` for this machine or
target ``T``.) Builds go to any worker of the candidate's target (all its threads build in
parallel); a run needs one unit of the resource, so each worker (give it one unit, and run one
such worker per machine) times one candidate at a time, and a batch's builds all finish before
its runs start, as ``LocalExecutor`` does, so builds never disturb timings. Every run of one
kernel goes to the same worker (``runner_of``), so its candidates are compared on one machine;
different kernels spread over the workers. Workers of other
targets on the same cluster are never sent another target's candidates; when no worker offers
the target, ``measure`` raises ``NoWorkerError`` (naming the resource) instead of waiting
forever.

Why Dask and not Ray: ``distributed`` is pure Python from PyPI (a few small dependencies, no
compiled wheels to match per platform), a scheduler is one process reached at a plain
``tcp://host:port`` address, and resources on workers are exactly the routing by target the
tuner needs. Ray brings a large binary wheel per platform, its own object store and node
runtime, which is much more to install on a small target device than what is needed here.
"""
from __future__ import annotations

import argparse
import atexit
import hashlib
import os
import re
import shutil
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from .measure import (Executor, MeasureInput, MeasureOptions, MeasureResult, build_candidate,
                      build_failure, run_args, run_candidate, run_models, run_result)
from .workers import Outcome, Worker


class NoWorkerError(RuntimeError):
    """No worker of the cluster offers the target a candidate must be measured on."""


def target_resource(target_key: str) -> str:
    """The Dask resource name of a target fingerprint (``Machine.key()``): ``kiln-`` and the
    key with every run of characters other than letters, digits, ``_`` and ``.`` as ``-``
    (a resource name on ``dask worker --resources`` cannot hold spaces or ``=``)."""
    return "kiln-" + re.sub(r"[^A-Za-z0-9_.]+", "-", target_key).strip("-")


# ---- what runs in a Dask worker process ------------------------------------------------------
# Each Dask worker process keeps idle builder processes and one runner process between jobs (a
# fresh interpreter imports Kiln and LLVM in seconds: not per candidate).
_lock = threading.Lock()
_idle_builders: List[Worker] = []
_runner_lock = threading.Lock()
_runner: List[Worker] = []
_libdir: List[str] = []


def _builder() -> Worker:
    with _lock:
        return _idle_builders.pop() if _idle_builders else Worker()


def _release(w: Worker) -> None:
    with _lock:
        _idle_builders.append(w)


def _library_dir() -> str:
    with _lock:
        if not _libdir:
            d = tempfile.mkdtemp(prefix="kiln-dask-libs-")
            atexit.register(shutil.rmtree, d, True)
            _libdir.append(d)
        return _libdir[0]


def _store(data: bytes) -> str:
    """The library ``data`` as a file of this machine (named by its hash: stored once)."""
    path = os.path.join(_library_dir(), hashlib.sha256(data).hexdigest()[:32] + ".so")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return path


def _with_runner(fn: Callable, args: tuple, timeout_s: float) -> Outcome:
    with _runner_lock:            # one run at a time per Dask worker process
        if not _runner:
            _runner.append(Worker())
        return _runner[0].call(fn, args, timeout_s)


def _here() -> str:
    """The address of the Dask worker running the current job."""
    from distributed import get_worker
    try:
        return get_worker().address
    except ValueError:          # not in a worker (called directly)
        return ""


def build_job(builder: Callable[..., str], func, ctx, decisions: Dict[str, Any], target: str,
              timeout_s: float, rules: str = "") -> Dict[str, Any]:
    """A Dask task: build one candidate in a builder process of this worker. Returns the
    outcome (``workers.Outcome``'s kind and value, the library's bytes when it built) and the
    seconds it took. A worker whose schedule rules are not the tuner's (``rules``: another
    Kiln) refuses: its programs would not be the ones the records name."""
    from .workload import rules_version
    t0 = time.perf_counter()
    if rules and rules != rules_version():
        return {"kind": "error", "seconds": 0.0, "worker": _here(),
                "value": f"the Dask worker {_here()} has other schedule rules "
                         f"({rules_version()}) than the tuner ({rules}): run the same Kiln"}
    w = _builder()
    try:
        kind, value = w.call(builder, (func, ctx, decisions, target), timeout_s)
    finally:
        _release(w)
    if kind == "ok":
        with open(value, "rb") as f:
            value = f.read()
    return {"kind": kind, "value": value, "seconds": time.perf_counter() - t0,
            "worker": _here()}


def run_job(built: Dict[str, Any], args: tuple, timeout_s: float) -> Dict[str, Any]:
    """A Dask task: run and time one built candidate (``build_job``'s result) in this worker's
    runner process (``measure.run_candidate(path, *args)``)."""
    t0 = time.perf_counter()
    kind, value = _with_runner(run_candidate, (_store(built["value"]),) + tuple(args), timeout_s)
    return {"kind": kind, "value": value, "seconds": time.perf_counter() - t0,
            "worker": _here()}


def models_job(libraries: List[bytes], args: tuple, timeout_s: float) -> Outcome:
    """A Dask task: whole compiled models timed end to end in this worker's runner process
    (``measure.run_models``)."""
    return _with_runner(run_models, ([_store(b) for b in libraries],) + tuple(args), timeout_s)


# ---- the client side -------------------------------------------------------------------------
class DaskExecutor(Executor):
    """Candidates built and run on the workers of the Dask cluster whose scheduler is at
    ``scheduler`` (an address such as ``tcp://host:8786``, or a ``distributed.Client``),
    routed by target (module docstring). ``options``: how candidates are timed (as
    ``LocalExecutor``'s); ``builder``: the module-level build function (``build_candidate``;
    it must be importable on the workers); ``wait_s``: how long ``measure`` waits for a
    worker of a target to join before ``NoWorkerError``; ``connect_timeout_s``: how long to
    try to reach the scheduler (default: Dask's ``distributed.comm.timeouts.connect``)."""

    def __init__(self, scheduler, options: Optional[MeasureOptions] = None,
                 builder: Callable[..., str] = build_candidate, wait_s: float = 10.0,
                 connect_timeout_s: Optional[float] = None):
        try:
            import distributed
        except ImportError:
            raise ImportError("the Dask executor needs the 'distributed' package: "
                              "pip install 'kiln[tune]' (or pip install distributed)") from None
        self.options = options or MeasureOptions()
        self.builder = builder
        self.wait_s = wait_s
        self._own = not isinstance(scheduler, distributed.Client)
        if self._own:       # default timeout: Dask's distributed.comm.timeouts.connect
            kw = {} if connect_timeout_s is None else {"timeout": connect_timeout_s}
            self.client = distributed.Client(scheduler, set_as_default=False, **kw)
        else:
            self.client = scheduler

    def workers_of(self, target_key: str) -> List[str]:
        """Addresses of the workers that offer the target ``target_key`` (its resource)."""
        name = target_resource(target_key)
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        return sorted(a for a, w in info.items() if (w.get("resources") or {}).get(name, 0) >= 1)

    def _workers(self, target_key: str) -> List[str]:
        deadline = time.monotonic() + self.wait_s
        while True:
            found = self.workers_of(target_key)
            if found or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if not found:
            name = target_resource(target_key)
            raise NoWorkerError(
                f"no worker of the Dask cluster at {self.client.scheduler.address} measures "
                f"on target {target_key!r}: start one with --resources '{name}=1' "
                f"(python -m kiln.tune.dask_executor prints it on the target machine)")
        return found

    @staticmethod
    def runner_of(task, workers: Sequence[str]) -> str:
        """The worker that times every candidate of ``task``, among ``workers`` (a stable
        pick by its workload): a kernel's candidates, its default included, are compared on
        one machine, never across machines (builds still use every worker)."""
        return sorted(workers)[int(task.workload[:8], 16) % len(workers)]

    @property
    def slots(self) -> int:
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        return max(1, sum(int(w.get("nthreads", 1)) for w in info.values()
                          if any(k.startswith("kiln-") for k in (w.get("resources") or {}))))

    def measure(self, inputs: Sequence[MeasureInput],
                on_result: Optional[Callable[[int, MeasureResult], None]] = None,
                run_timeout_s: Optional[float] = None) -> List[MeasureResult]:
        opts = self.options
        run_timeout = run_timeout_s or opts.run_timeout_s
        where = {k: self._workers(k) for k in {m.task.target_key for m in inputs}}
        # Builds first, all in parallel on the target's workers (pure=False: re-timing a
        # candidate must not reuse an earlier job's result) ...
        builds = [self.client.submit(build_job, self.builder, m.task.func, m.task.ctx,
                                     m.decisions, m.task.target, opts.build_timeout_s,
                                     getattr(m.task, "rules", ""), workers=where[m.task.target_key], allow_other_workers=False,
                                     pure=False)
                  for m in inputs]
        # (a job's own process has its time limit; these bound a lost worker or a full queue)
        built = [self._result(f, "build", opts.build_timeout_s + 60) for f in builds]
        # ... then the runs, one at a time per worker (one unit of the target's resource each).
        results: List[Optional[MeasureResult]] = [None] * len(inputs)
        runs: Dict[Any, int] = {}
        for i, (m, fut, b) in enumerate(zip(inputs, builds, built)):
            if b["kind"] != "ok":
                results[i] = build_failure(b["kind"], b["value"])
                results[i].build_s = b.get("seconds", 0.0)
                continue
            f = self.client.submit(run_job, fut, run_args(m, opts), run_timeout,
                                   resources={target_resource(m.task.target_key): 1},
                                   workers=[self.runner_of(m.task, where[m.task.target_key])],
                                   allow_other_workers=False, pure=False)
            runs[f] = i
        for i, res in enumerate(results):      # failed builds are known now
            if res is not None and on_result is not None:
                on_result(i, res)
        # As each run ends (polled: ``distributed.as_completed`` with a time limit needs a
        # default client, which this executor does not install).
        deadline = time.monotonic() + len(runs) * (run_timeout + 60)
        while runs and time.monotonic() < deadline:
            done = [f for f in runs if f.done()]
            for f in done:
                self._ran(f, runs.pop(f), built, results, on_result)
            if not done:
                time.sleep(0.01)
        for f, i in runs.items():
            f.cancel()
            self._ran(None, i, built, results, on_result)
        return results  # type: ignore[return-value]

    def _ran(self, f, i: int, built, results, on_result) -> None:
        """Turn run job ``f`` of candidate ``i`` (None: it never finished) into its result."""
        if f is None:
            r = {"kind": "timeout", "value": "the Dask run job did not finish in time"}
        else:
            r = self._result(f, "run", 60)
        res = run_result(r["kind"], r["value"])
        res.build_s, res.run_s = built[i].get("seconds", 0.0), r.get("seconds", 0.0)
        res.extra.update(built_on=built[i].get("worker", ""), run_on=r.get("worker", ""))
        results[i] = res
        if on_result is not None:
            on_result(i, res)

    def _result(self, fut, what: str, timeout_s: float) -> Dict[str, Any]:
        """A job's result; a job that failed in Dask itself (a worker lost, a pickling error)
        as an ``error`` outcome (the candidate is recorded as failed, the tuner goes on)."""
        try:
            return fut.result(timeout=timeout_s)
        except Exception as e:   # noqa: BLE001 - any Dask-side failure is the candidate's
            return {"kind": "error", "value": f"the Dask {what} job failed: "
                                              f"{type(e).__name__}: {e}", "seconds": 0.0}

    def time_models(self, lib_paths, function, specs, threads, rounds, calls, seed,
                    target_key, timeout_s):
        libraries = []
        for p in lib_paths:
            with open(p, "rb") as f:
                libraries.append(f.read())
        fut = self.client.submit(models_job, libraries,
                                 (function, list(specs), threads, rounds, calls, seed),
                                 timeout_s, resources={target_resource(target_key): 1},
                                 workers=self._workers(target_key), pure=False)
        try:
            return fut.result(timeout=timeout_s + 60)
        except Exception as e:   # noqa: BLE001
            return ("error", f"the Dask job failed: {type(e).__name__}: {e}")

    def close(self) -> None:
        if self._own:
            self.client.close()


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Print the ``--resources`` value a Dask worker measuring on this machine (or on
    ``--target``) needs: ``kiln-<fingerprint>=1``."""
    from ..codegen.machine import machine_of
    p = argparse.ArgumentParser(prog="python -m kiln.tune.dask_executor",
                                description=main.__doc__)
    p.add_argument("--target", default="llvm", help="target string (default: this machine)")
    a = p.parse_args(argv)
    print(f"{target_resource(machine_of(a.target).key())}=1")


if __name__ == "__main__":
    main()
