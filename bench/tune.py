"""Default vs tuned schedules at fixed tuning budgets (issue 11), against onnxruntime and numpy
in the same process: ``bench/run.py tune`` or ``.venv/bin/python bench/tune.py``.

Workloads: ResNet-18, MobileNetV2 and the GPT-style decoder (``bench/onnx_models.py``'s ONNX
exports, seeded weights), the MLP (a small one for a quick check), and three float32 matmuls
with a constant B that the default tile fits badly (``bench/matmul.py``'s ``ODD_SHAPES``,
M x K x N: 49x4608x1000, 1x4096x4096, 577x768x3072).

For each workload and thread count, ``kiln.tune`` runs for the smallest budget (default 2,
5 and 10 minutes; ``--budgets 20s,1m`` for shorter ones) into a fresh database, then resumes
it up to each larger budget (2 -> 5 minutes, 5 -> 10): the model "tuned at budget b" is
compiled with the database as it was after b seconds of tuning in all, and each run ends with
its own re-check of its best candidates, as a run of that budget would (a snapshot of one
long run at b seconds would hold only single timings). Then the default schedules, each
budget's tuned model, onnxruntime (the same ONNX graph; for a matmul an ONNX MatMul with B as
initializer) and, for a matmul, numpy (its BLAS limited to the same threads) are timed in
alternating rounds (``onnx_models.alternate``), medians, and checked to agree. ``--plot-dir`` (default: a new temporary directory) gets one
PNG per workload: the runs' tuning curves, one after the other, with their re-checks marked and
the default, onnxruntime and numpy as lines.

Columns: ``default_ms``, ``tuned_ms`` (Kiln), ``speedup`` (default / tuned), ``ort_ms`` and
``tuned/ort`` (below 1: tuned Kiln faster), ``numpy_ms`` and ``tuned/numpy`` (matmuls only),
``changed`` (kernels whose decisions the records changed), ``trials`` (candidates measured
by then). The tuning curve's last steps can go up: the final re-check times the best
candidates again, alternating with the default, and ranks them by the median.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kiln  # noqa: E402
from onnx_models import alternate, zoo  # noqa: E402

MODELS = ("resnet18", "mobilenet_v2", "gpt2")
MATMULS = {f"matmul_{m}x{k}x{n}": (m, k, n) for m, k, n in
           __import__("matmul").ODD_SHAPES}
WORKLOADS = MODELS + tuple(MATMULS)
EXTRA = ("mlp",)           # known but not run by default: a quick check
DEFAULT_BUDGETS = (120.0, 300.0, 600.0)


def _matmul_onnx(path: str, m: int, k: int, n: int, seed: int = 0) -> str:
    """``y = x @ w`` as ONNX (``w`` a seeded initializer), saved at ``path``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = np.random.default_rng(seed).standard_normal((k, n)).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def prepare(name: str, tmp: str):
    """(ONNX path, the module after bind_params, inputs by name, the matmul's weight or None)."""
    import onnx
    path = os.path.join(tmp, f"{name}.onnx")
    if name in MATMULS:
        m, k, n = MATMULS[name]
        _matmul_onnx(path, m, k, n)
        inputs = {"x": np.random.default_rng(1).standard_normal((m, k)).astype("float32")}
    else:
        zoo.export(name, path)
        inputs = zoo.example_inputs(name)
    model = onnx.load(path)
    mod, params = kiln.frontend.from_onnx(model)
    mod = kiln.transform.bind_params("main", params)(mod)
    weight = None
    if name in MATMULS:
        from onnx import numpy_helper
        weight = numpy_helper.to_array(model.graph.initializer[0])
    return path, mod, inputs, weight


def compiled(mod, threads: int, db=None):
    """The model's ``main`` compiled for this CPU at ``threads`` cores, with the records of
    ``db`` (None: the default schedules); (function, kernel name -> its decisions)."""
    from kiln.transform import PassContext
    ctx = PassContext(target="llvm", cores=threads, tuning_db=db)
    scheduled = kiln.get_pipeline("default", ctx)(mod)
    decisions = {n: dict(f.attrs).get("kiln.decisions", "") for n, f in
                 scheduled.functions.items() if isinstance(f, kiln.ir.PrimFunc)}
    vm = kiln.VirtualMachine(kiln.compile(scheduled, "llvm"), kiln.cpu())
    return vm["main"], decisions


def bench_one(name: str, threads: int, budgets, tmp: str, plot_dir: str, repeat: int,
              log=print, settle_s: float = 0.25) -> list:
    """Tune workload ``name`` at ``threads`` up to each budget in turn (module docstring),
    then time every budget's model against the default and the references; one row per
    budget. ``settle_s``: the pause before each timed block (``onnx_models.alternate``)."""
    from threadpoolctl import threadpool_limits
    from kiln.tune.plot import plot_curves
    path, mod, inputs, weight = prepare(name, tmp)
    db = os.path.join(tmp, f"{name}-t{threads}.jsonl")
    curves, rechecks, snaps, notes = {}, {}, {}, {}
    done_b = done_s = 0.0
    done_trials = 0
    for b in budgets:
        log(f"# {name}: tuning at {threads} thread(s), {done_b:.0f} -> {b:.0f} s ...")
        report = kiln.tune(mod, target="llvm", db=db, time_budget_s=b - done_b,
                           num_threads=threads, progress=False)
        log("\n".join("#   " + line for line in str(report).splitlines()))
        label = f"{done_b:.0f}-{b:.0f} s"
        curves[label] = [(p[0] + done_trials, p[1] + done_s, p[2]) for p in report.curve]
        rechecks[label] = None if report.recheck_at is None else report.recheck_at + done_s
        done_trials += sum(k.new for k in report.kernels)
        done_b, done_s = b, done_s + report.seconds
        snaps[b] = os.path.join(tmp, f"{name}-t{threads}-{b:.0f}s.jsonl")
        shutil.copyfile(db, snaps[b])
        notes[b] = done_trials

    kiln.set_num_threads(threads)
    args = [kiln.nd.array(v) for v in inputs.values()]
    f0, default_decisions = compiled(mod, threads)
    fns, changed = {"default": f0}, {}
    for b in budgets:
        f, decisions = compiled(mod, threads, snaps[b])
        changed[b] = sum(d != default_decisions.get(k) for k, d in decisions.items())
        fns[f"tuned {b:.0f}s"] = f
    sess = zoo.ort_session(path, threads=threads)
    outs = {k: f(*args).numpy() for k, f in fns.items()}
    want = sess.run(None, inputs)[0]
    for k, got in outs.items():
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=f"{name} {k}")
    calls = {k: (lambda f=f: f(*args)) for k, f in fns.items()}
    calls["ort"] = lambda: sess.run(None, inputs)
    if weight is not None:
        x = inputs["x"]
        calls["numpy"] = lambda: x @ weight
    with threadpool_limits(threads):
        med = alternate(calls, per_round=repeat, settle_s=settle_s)
    rows = []
    for b in budgets:
        t = med[f"tuned {b:.0f}s"]
        n, trials = changed[b], notes[b]
        row = {"workload": name, "threads": threads, "budget_s": b,
               "default_ms": med["default"] * 1e3, "tuned_ms": t * 1e3,
               "speedup": med["default"] / t, "ort_ms": med["ort"] * 1e3,
               "tuned/ort": t / med["ort"]}
        if "numpy" in med:
            row.update({"numpy_ms": med["numpy"] * 1e3, "tuned/numpy": t / med["numpy"]})
        else:
            row.update({"numpy_ms": "-", "tuned/numpy": "-"})
        row.update({"changed": n, "trials": trials})
        rows.append(row)
    refs = {"default schedules (measured)": med["default"], "onnxruntime": med["ort"]}
    if "numpy" in med:
        refs["numpy"] = med["numpy"]
    png = os.path.join(plot_dir, f"tune_{name}_t{threads}.png")
    try:
        plot_curves(curves, png, refs, rechecks=rechecks,
                    title=f"kiln tune {name} ({threads} thread(s)): model estimate per run")
        log(f"# tuning curve: {png}")
    except (ImportError, ValueError) as e:
        log(f"# no tuning curve for {name}: {e}")
    kiln.set_num_threads(0)
    return rows


def run(workloads=WORKLOADS, budgets=DEFAULT_BUDGETS, threads=None, repeat: int = 10,
        plot_dir=None) -> list:
    """Rows for ``bench/run.py`` (module docstring): every workload at every thread count
    (default: every usable core), one row per budget (seconds)."""
    from kiln.tune.measure import default_threads
    budgets = sorted(budgets)
    plot_dir = plot_dir or tempfile.mkdtemp(prefix="kiln-tune-bench-")
    os.makedirs(plot_dir, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in workloads:
            for t in threads or (default_threads(),):
                rows += bench_one(name, t, budgets, tmp, plot_dir, repeat)
    print(f"# plots in {plot_dir}")
    return rows


def parse_budgets(text: str):
    """``"2m,5m,10m"`` -> [120.0, 300.0, 600.0] (``kiln tune --time``'s durations)."""
    from kiln.cli import _parse_duration
    return [_parse_duration(t) for t in text.split(",") if t.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of this benchmark (also ``bench/run.py tune``'s)."""
    p.add_argument("--budgets", type=parse_budgets, default=list(DEFAULT_BUDGETS),
                   help="tuning budgets, e.g. 2m,5m,10m (the default) or 20s,1m")
    p.add_argument("--workloads", nargs="+", choices=WORKLOADS + EXTRA,
                   help=f"default: {' '.join(WORKLOADS)}")
    p.add_argument("--threads", type=int, nargs="+", help="default: every usable core")
    p.add_argument("--plot-dir", help="where the tuning curves go (default: a new temp dir)")


def main(argv=None) -> int:
    from harness import table
    from onnx_models import cpu_name
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    p.add_argument("--repeat", type=int, default=10)
    a = p.parse_args(argv)
    print(f"# machine: {cpu_name()}, {os.cpu_count()} cores")
    print(table(run(a.workloads or WORKLOADS, a.budgets, a.threads, a.repeat, a.plot_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
