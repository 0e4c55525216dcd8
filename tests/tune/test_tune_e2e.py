"""The tuner end to end: a run killed mid-way keeps what it measured and a second run resumes
from it; ``kiln tune`` then ``kiln compile --tuning-db`` on a tiny ONNX model."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import kiln
from kiln.schedule.decisions import parse_decisions
from kiln.transform import PassContext
from kiln.tune import Database, extract_tasks
from kiln.tune.database import decisions_key, read_records

from tune_helpers import kernel_records, matmul_graph_module, matmul_onnx

HERE = os.path.dirname(os.path.abspath(__file__))

pytest.importorskip("onnx")


def kiln_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "kiln.cli"] + [str(a) for a in args],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


def _wait_for_records(proc, db, count: int = 3, timeout_s: float = 240) -> None:
    """Until the tuning run ``proc`` has written ``count`` records to ``db`` (or ended)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if len(read_records(str(db))[0]) >= count:
            return
        time.sleep(0.05)


def test_a_killed_run_keeps_its_records_and_a_second_run_resumes(tmp_path):
    db = tmp_path / "db.jsonl"
    code = ("import sys; sys.path.insert(0, %r)\nimport kiln\n"
            "from tune_helpers import matmul_graph_module\n"
            "mod, _ = matmul_graph_module(m=16, k=64, n=64)\n"
            "kiln.tune(mod, db=sys.argv[1], trials=500, num_threads=1, batch=2,\n"
            "          progress=False, layers=False)\n" % HERE)
    proc = subprocess.Popen([sys.executable, "-c", code, str(db)])
    try:
        _wait_for_records(proc, db)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    before, skipped = read_records(str(db))
    assert skipped == 0 and len(before) >= 3
    mod, _ = matmul_graph_module(m=16, k=64, n=64)
    (task,), _ = extract_tasks(mod, "llvm", threads=1)
    assert all(r["workload"] == task.workload for r in before)
    # (layers=False: the kernel records alone; test_tune_layers covers the layer decisions)
    report = kiln.tune(mod, db=db, trials=len(before) + 3, num_threads=1, batch=3,
                       progress=False, confirm=False, layers=False)
    after = Database(db).records()
    assert after[:len(before)] == before
    # new timings; the end-to-end check may add a verdict when the best changed the schedule
    new = [r for r in after[len(before):] if not r.get("chosen")]
    assert len(new) == 3 and report.kernels[0].new == 3
    assert len(after) - len(before) - len(new) in (0, 1)
    keys = [decisions_key(r["decisions"]) for r in after if not r.get("chosen")]
    assert len(set(keys)) == len(keys)        # nothing measured twice, the baseline included
    assert report.kernels[0].trials == len(before) + 3


def test_kiln_tune_then_compile_with_the_records(tmp_path):
    model, w = matmul_onnx(tmp_path / "mm.onnx", m=8, k=32, n=16)
    db = tmp_path / "tuning.jsonl"
    png = tmp_path / "curve.png"
    proc = kiln_cli("tune", model, "--db", db, "--trials", "3", "--plot", png)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"tuning curve in {png}" in out
    _check_png(png)
    assert "matmul" in out and "default us" in out and "model estimate" in out
    assert f"--tuning-db {db}" in out
    assert "kiln tune" in proc.stderr and "trial" in proc.stderr     # the progress bar
    records = kernel_records(Database(db).records())
    assert records[0]["status"] == "ok"
    # 3 candidates (some measured again, alternating with the default, when one beat it)
    assert len({decisions_key(r["decisions"]) for r in records}) == 3
    assert len(records) == 3 or len(records) >= 3 + 8
    assert all(r["threads"] == len(os.sched_getaffinity(0)) for r in records)
    best = Database(db).best(records[0]["workload"], records[0]["target"], records[0]["threads"])
    # the whole model is timed with and without the records when they change a schedule
    changed = best["decisions"] != records[0]["decisions"]        # the first is the default
    assert ("model measured end to end (alternating" in out) == changed, out

    # the same command again has nothing left to do (3 records per kernel reached)
    again = kiln_cli("tune", model, "--db", db, "--trials", "3", "-q")
    assert again.returncode == 0, again.stderr
    assert len(kernel_records(Database(db).records())) == len(records)

    lib = tmp_path / "mm.so"
    proc = kiln_cli("compile", model, "-o", lib, "--tuning-db", db)
    assert proc.returncode == 0, proc.stderr
    assert "tuning records applied to 1 of 1 kernels: matmul" in proc.stderr
    x = np.random.default_rng(3).standard_normal((8, 32)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    proc = kiln_cli("run", lib, "--input", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "y.npy")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), x @ w, rtol=1e-4, atol=1e-4)

    # the kernel the compile made carries the decisions the end-to-end check chose (its
    # verdict, when the best candidate changed the schedule), else the best record's
    mod, _ = matmul_graph_module(m=8, k=32, n=16)
    tuned = kiln.get_pipeline("default", PassContext(tuning_db=str(db)))(mod)
    (kernel,) = [f for f in tuned.functions.values() if isinstance(f, kiln.ir.PrimFunc)]
    verdicts = [r for r in records if r.get("chosen")]
    assert len(verdicts) == (1 if changed else 0)
    want = verdicts[-1]["decisions"] if changed else best["decisions"]
    assert want in (best["decisions"], records[0]["decisions"])
    assert parse_decisions(dict(kernel.attrs)["kiln.decisions"]) == want


def _check_png(path) -> None:
    """A real picture: a PNG of the figure's size with lines drawn (many colours, mostly
    white background), not an empty canvas."""
    import matplotlib.image
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    img = matplotlib.image.imread(str(path))
    assert img.shape[:2] == (420, 1100)
    rgb = (img[..., :3] * 255).astype(np.uint8).reshape(-1, 3)
    colours = np.unique(rgb, axis=0)
    assert len(colours) > 50
    ink = np.any(rgb < 200, axis=1).mean()
    assert 0.005 < ink < 0.5, ink


def test_the_curve_starts_after_the_defaults_and_is_plotted(tmp_path):
    pytest.importorskip("matplotlib")
    mod, _ = matmul_graph_module(m=16, k=64, n=64)
    report = kiln.tune(mod, db=tmp_path / "db.jsonl", trials=4, num_threads=1, batch=2,
                       progress=False, confirm=False, check_model=False)
    curve = report.curve
    # one point when the default is known, then one per measurement
    assert len(curve) == 1 + (report.kernels[0].new - 1)
    assert curve[0][0] == 1 and curve[0][2] == pytest.approx(report.kernels[0].default_s)
    assert [p[0] for p in curve] == sorted(p[0] for p in curve)
    assert all(b[1] >= a[1] and b[2] <= a[2] for a, b in zip(curve, curve[1:]))
    assert curve[-1][2] == pytest.approx(report.best_model_s)
    assert report.recheck_at is None            # confirm=False: no final re-check
    png = report.plot(tmp_path / "plots" / "curve.png")
    _check_png(png)


def test_cli_errors(tmp_path):
    model, _ = matmul_onnx(tmp_path / "mm.onnx")
    proc = kiln_cli("tune", model, "--time", "soon")
    assert proc.returncode == 2 and "duration" in proc.stderr
    proc = kiln_cli("compile", model, "--tuning-db", tmp_path / "missing.jsonl", "-q")
    assert proc.returncode == 1 and "missing.jsonl: no such file" in proc.stderr


def _sigint_as_at_a_terminal() -> None:
    # A shell without job control starts background commands with SIGINT ignored, and that is
    # inherited through make, pytest and its workers: a Python started so ignores Ctrl-C (the
    # suite failed this test that way when run as `(... make test) &` from a script).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_tuner_and_no_candidate_is_blamed(tmp_path):
    model, _ = matmul_onnx(tmp_path / "mm.onnx", m=64, k=64, n=64)
    db = tmp_path / "db.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "kiln.cli", "tune", str(model), "--db",
                             str(db), "--trials", "500", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_sigint_as_at_a_terminal)
    try:
        _wait_for_records(proc, db)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        os.killpg(proc.pid, signal.SIGINT)      # what Ctrl-C at a terminal does
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "(interrupted)" in out and "matmul" in out      # the report still comes
    records, skipped = read_records(str(db))
    assert skipped == 0 and len(records) >= 3
    assert all(r["status"] == "ok" for r in records), [r["message"] for r in records]


def test_the_final_recheck_starts_no_kernel_after_the_deadline(tmp_path):
    """``_confirm`` with the budget's end already past measures nothing and says why; a later
    run, with time left, re-times the best left timed once against the default, alternating
    (4 rounds each)."""
    import time as _time
    from kiln.tune import LocalExecutor, MeasureOptions
    from kiln.tune.tuner import _baselines, _confirm, _TaskState
    from tune_helpers import mm_module
    db = Database(tmp_path / "db.jsonl")
    (task,), _ = extract_tasks(mm_module(), "llvm", threads=1, pipeline=False)
    fast = MeasureOptions(warmup=1, warmup_s=0.0, repeats=3, min_repeat_s=0.0005)
    with LocalExecutor(fast, build_workers=1) as ex:
        state = _TaskState(task, db, None, 0, False)
        appended = []

        def record(s, decisions, res, new=True, again=False):
            from kiln.tune.database import make_record
            rec = make_record(*task.key, task.name, decisions, res.status, res.message,
                              res.median_s, res.min_s, rules=task.rules)
            db.append(rec)
            s.records.append(rec)
            appended.append(again)
            s.update()
        _baselines([state], ex, record)
        assert state.reference is not None
        cands = state.space.propose(6, state.parents())
        ex.measure([kiln.tune.MeasureInput(task, c, state.reference) for c in cands],
                   lambda i, res: record(state, cands[i], res))
        state.report.new = 1 + len(cands)
        faster = state.report.best_decisions       # usually not the default (6 tries)
        before = len(appended)
        _confirm([state], ex, record, deadline=_time.monotonic() - 1)
        assert len(appended) == before                      # nothing measured
        if faster != state.report.default_decisions:
            assert "time budget ran out" in state.report.note
        # a later run (nothing new measured) re-checks what this one left timed once
        later = _TaskState(task, db, None, 0, False)
        later.reference, later.report.default_decisions = \
            state.reference, dict(state.report.default_decisions)
        assert later.report.new == 0 and later.report.best_decisions == faster
        from kiln.tune.database import ranking
        others = [r for r in ranking(later.records)
                  if r["decisions"] != later.report.default_decisions]
        _confirm([later], ex, record, checks=1, deadline=_time.monotonic() + 600)
        if faster != state.report.default_decisions:
            # the default and the (up to 3) fastest others, 4 rounds each
            assert len(appended) == before + 4 * (1 + min(3, len(others)))
            assert all(appended[before:]) and later.report.confirmed


def test_a_busy_machine_is_reported():
    from kiln.tune.tuner import TuneReport, busy_note
    assert busy_note(0.1, 2, 2) == "" and busy_note(None, 2, 2) == ""
    assert busy_note(1.0, 4, 2) == ""                 # two cores free for two threads
    note = busy_note(1.3, 2, 2)
    assert "load average 1.3 on 2 cores" in note and "idle machine" in note
    assert busy_note(1.0, 2, 1) == ""                 # one thread still has a free core
    report = TuneReport("db.jsonl", "llvm", 2, [], {}, load=1.3, cores=2)
    assert "warning: the machine was busy" in str(report)
