"""The Dask executor (kiln/tune/dask_executor.py) on a real two-worker ``LocalCluster`` of
separate processes on the loopback address: candidates are built and timed on the workers,
a candidate that segfaults does not take a worker down, a target no worker offers is refused
by name, and ``kiln tune --scheduler`` tunes a small model through the cluster."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from kiln.codegen.machine import machine_of
from kiln.schedule.decisions import Decisions
from kiln.transform.default_schedule import schedule_kernel
from kiln.tune import Database, MeasureInput, MeasureOptions, extract_tasks
from kiln.tune.measure import make_args

import tune_helpers
from tune_helpers import kernel_records, matmul_onnx, mm_module

distributed = pytest.importorskip("distributed")
from kiln.tune.dask_executor import DaskExecutor, NoWorkerError, target_resource  # noqa: E402

FAST = MeasureOptions(warmup=1, warmup_s=0.0, repeats=3, min_repeat_s=0.0005, run_timeout_s=20)


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes on 127.0.0.1 that measure on this machine's target."""
    resource = target_resource(machine_of("llvm").key())
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                  resources={resource: 1}, silence_logs=40) as c:
        yield c


@pytest.fixture(scope="module")
def task():
    (t,), _ = extract_tasks(mm_module(), "llvm", threads=1, pipeline=False)
    return t


def _cand(task, **fixed):
    d = Decisions(fixed=fixed)
    schedule_kernel(task.func, task.ctx, d)
    assert not d.stale, d.stale
    return d.made


def test_candidates_are_built_and_timed_on_the_workers(cluster, task):
    workers = set(cluster.scheduler_info["workers"])
    assert len(workers) == 2 and all(a.startswith("tcp://127.0.0.1:") for a in workers)
    with DaskExecutor(cluster.scheduler_address, FAST,
                      builder=tune_helpers.faults_by_mr_builder) as ex:
        assert ex.slots == 2
        (ref,) = ex.measure([MeasureInput(task, _cand(task, mr=4))])
        assert ref.ok, ref.message
        a, b, _ = make_args(task.args, FAST.seed)
        np.testing.assert_allclose(ref.outputs[0], a @ b, rtol=1e-5, atol=1e-5)
        assert ref.extra["run_on"] in workers and ref.extra["built_on"] in workers
        # mr=1 segfaults in the runner process, mr=2 computes a wrong result
        cands = [_cand(task, mr=m) for m in (1, 4, 2, 8)]
        seen = []
        results = ex.measure([MeasureInput(task, c, ref.outputs) for c in cands],
                             on_result=lambda i, r: seen.append(i))
        assert sorted(seen) == [0, 1, 2, 3]
        assert [r.status for r in results] == ["run_error", "ok", "wrong_result", "ok"], \
            [r.message for r in results]
        assert "SIGSEGV" in results[0].message
        assert 0 < results[1].min_s <= results[1].median_s
        # every run of one kernel on one worker: its candidates compare on one machine
        pinned = ex.runner_of(task, sorted(workers))
        assert {r.extra["run_on"] for r in [ref] + results if "run_on" in r.extra} == {pinned}
    # the crash killed a throwaway process, not a Dask worker
    assert set(cluster.scheduler_info["workers"]) == workers


def test_a_target_no_worker_offers_is_refused_by_name(cluster):
    (t,), _ = extract_tasks(mm_module(), "llvm -mtriple=aarch64-linux-gnu", threads=1,
                            pipeline=False)
    want = target_resource(t.target_key)
    with DaskExecutor(cluster.scheduler_address, FAST, wait_s=0.5) as ex:
        assert ex.workers_of(t.target_key) == []
        with pytest.raises(NoWorkerError, match=want):
            ex.measure([MeasureInput(t, _cand(t))])


def test_kiln_tune_through_the_cluster(cluster, tmp_path):
    model, w = matmul_onnx(tmp_path / "mm.onnx", m=8, k=32, n=16)
    db = tmp_path / "tuning.jsonl"
    proc = subprocess.run([sys.executable, "-m", "kiln.cli", "tune", str(model), "--db", str(db),
                           "--trials", "3", "--threads", "1", "-q",
                           "--scheduler", cluster.scheduler_address],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "matmul" in proc.stdout and "default us" in proc.stdout
    records = kernel_records(Database(db).records())
    assert len({str(sorted(r["decisions"].items())) for r in records}) == 3
    assert records[0]["status"] == "ok" and all(r["threads"] == 1 for r in records)
    # the timings (not the end-to-end check's verdict, when it writes one: no measurement)
    ok = [r for r in records if r["status"] == "ok" and not r.get("chosen")]
    assert len({r["worker"] for r in ok}) == 1
    assert ok[0]["worker"] in cluster.scheduler_info["workers"]
    # a scheduler nobody listens on is a clear error, not a hang
    proc = subprocess.run([sys.executable, "-m", "kiln.cli", "tune", str(model), "--db",
                           str(db), "--trials", "4", "-q", "--scheduler", "tcp://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s"))
    assert proc.returncode == 1 and "--scheduler tcp://127.0.0.1:9" in proc.stderr, proc.stderr


def test_whole_models_are_timed_on_a_worker(cluster, tmp_path):
    import kiln
    from kiln.tune.workload import ArgSpec
    from tune_helpers import matmul_graph_module
    mod, _ = matmul_graph_module(m=8, k=32, n=16)
    libs = [kiln.compile(mod, "llvm", pipeline="default").library_path for _ in range(2)]
    key = machine_of("llvm").key()
    with DaskExecutor(cluster.scheduler_address, FAST) as ex:
        kind, value = ex.time_models(libs, "main", [ArgSpec((8, 32), "float32", False)], 1, 2,
                                     5, 0, key, 60)
        assert kind == "ok", value
        assert len(value) == 2 and all(0 < t < 0.1 for t in value)
        # a library that is not a model fails cleanly, on the worker
        bad = tmp_path / "bad.so"
        bad.write_bytes(b"not a library")
        kind, value = ex.time_models([str(bad)], "main", [ArgSpec((8, 32), "float32", False)],
                                     1, 1, 1, 0, key, 60)
        assert kind == "error" and value
    assert len(cluster.scheduler_info["workers"]) == 2
