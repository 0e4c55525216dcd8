"""Tasks, workload keys and the search space (kiln/tune/tasks.py, workload.py, search.py):
the keys are stable across processes, the tasks are the kernels the default pipeline would
schedule, and sampled decisions replay to the same program."""
from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

import kiln
from kiln.ir import assert_structural_equal
from kiln.schedule.decisions import Decisions
from kiln.script import parse
from kiln.transform import PassContext
from kiln.transform.default_schedule import needs_schedule, schedule_kernel
from kiln.tune import extract_tasks, workload_hash
from kiln.tune.measure import ReplayError, schedule_candidate
from kiln.tune.search import Space

from tune_helpers import matmul_graph_module, mm, mm_module, mm_plus_one

HERE = os.path.dirname(os.path.abspath(__file__))


def test_workload_hash_is_stable_across_processes_and_ignores_names():
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from tune_helpers import mm\nfrom kiln.tune import workload_hash\n"
            "print(workload_hash(mm))" % HERE)
    keys = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        keys.add(out.stdout.strip())
    assert keys == {workload_hash(mm)}
    renamed = parse(mm.script().replace("vk", "red").replace("A:", "X:").replace("A[", "X["))
    assert workload_hash(renamed) == workload_hash(mm)
    assert workload_hash(mm_plus_one) != workload_hash(mm)
    # the attributes a schedule adds are not part of the key; the schedule itself is
    scheduled = schedule_kernel(mm, PassContext(target="llvm"))
    assert workload_hash(scheduled) != workload_hash(mm)


def test_tasks_are_the_kernels_the_default_pipeline_schedules():
    mod, _ = matmul_graph_module(m=8, k=32, n=16)
    tasks, skipped = extract_tasks(mod, "llvm", threads=1)
    assert not skipped
    (t,) = tasks
    assert t.calls == 1 and t.threads == 1 and t.target == "llvm"
    assert needs_schedule(t.func)
    scheduled = kiln.get_pipeline("default", PassContext(cores=1))(mod)
    ctx = PassContext(target="llvm", cores=1).resolved()
    assert t.target_key == ctx.machine.key()
    # the pipeline's kernel is this task's, scheduled by default
    assert_structural_equal(scheduled[t.name], schedule_kernel(t.func, PassContext(cores=1)))


def test_calls_add_up_and_symbolic_kernels_are_skipped():
    mod = kiln.IRModule({"mm": mm, "mm2": mm})
    tasks, _ = extract_tasks(mod, "llvm", threads=1, pipeline=False)
    assert len(tasks) == 1 and tasks[0].calls == 2
    from kiln.script import T

    @T.prim_func
    def dyn(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):   # noqa: F821
        n = T.int32()
        for i in range(n):
            with T.block("B"):
                vi = T.axis.spatial(n, i)
                B[vi] = A[vi] * 2.0
    tasks, skipped = extract_tasks(kiln.IRModule({"dyn": dyn}), "llvm", 1, pipeline=False)
    assert not tasks and "symbolic" in skipped["dyn"]


@pytest.mark.parametrize("seed", range(3))
def test_sampled_decisions_replay_to_the_same_program(seed):
    (task,), _ = extract_tasks(mm_module(), "llvm", threads=2, pipeline=False)
    rng = random.Random(seed)
    d = Decisions(sampler=lambda name, options, default: rng.choice(list(options)))
    sampled = schedule_kernel(task.func, task.ctx, d)
    replayed = schedule_candidate(task.func, task.ctx, d.made)
    assert_structural_equal(replayed, sampled)
    assert dict(sampled.attrs)["kiln.decisions"] == d.text()
    with pytest.raises(ReplayError):
        schedule_candidate(task.func, task.ctx, dict(d.made, nr=3))


def test_space_proposes_new_legal_candidates_until_exhausted():
    (task,), _ = extract_tasks(mm_module(), "llvm", threads=2, pipeline=False)
    space = Space(task, seed=0)
    base = space.default()
    space.mark_seen([base])
    seen = [base]
    for _ in range(200):
        batch = space.propose(4, [(c, float(i + 1)) for i, c in enumerate(seen)])
        if not batch:
            break
        for c in batch:
            assert c not in seen
            schedule_candidate(task.func, task.ctx, c)   # replays: legal and complete
            seen.append(c)
    assert space.exhausted and len(seen) > 4
    # mutation changes one decision of the parent (others follow where still legal)
    child = Space(task, seed=1)
    child.default()
    m = child.mutate(base)
    assert m != base


def test_the_search_is_seeded_with_the_best_of_other_kernels_of_the_same_operators(tmp_path):
    import kiln
    from kiln.tune import Database
    from kiln.tune.database import make_record
    from kiln.tune.tuner import transfer_seeds
    from tune_helpers import matmul_graph_module
    other_mod, _ = matmul_graph_module(m=16, k=64, n=64)
    (other,), _ = extract_tasks(other_mod, "llvm", threads=1)
    mod, _ = matmul_graph_module(m=64, k=32, n=64)
    (task,), _ = extract_tasks(mod, "llvm", threads=1)
    assert other.workload != task.workload and other.ops == task.ops
    # the other kernel's best: a non-default candidate, valid for it, that replays on this
    # kernel (values that are not options here fall back to the default) to one that differs
    # from this kernel's default in two decisions (so no single mutation makes it)
    space, mine_default = Space(other, seed=5), Space(task).default()

    def replayed(c):
        d = Decisions(fixed=c)
        schedule_kernel(task.func, task.ctx, d)
        return d.made
    best = next(c for c in (space.random() for _ in range(200))
                if c != space.default()
                and sum(replayed(c)[k] != v for k, v in mine_default.items()) >= 2)
    db = Database(tmp_path / "db.jsonl")
    for decisions, t in ((space.default(), 2e-6), (best, 1e-6)):
        db.append(make_record(*other.key, other.name, decisions, "ok", median_s=t, min_s=t,
                              ops=other.ops))
    assert transfer_seeds(db.records(), task) == [best]
    assert transfer_seeds(db.records(), other) == []          # not its own records
    want = replayed(best)
    # (layers=False: a measured panel width would make another kernel than ``task``)
    report = kiln.tune(mod, db=db.path, trials=2, num_threads=1, batch=1, progress=False,
                       confirm=False, check_model=False, cost_model=False, layers=False)
    mine = [r for r in db.records() if r["workload"] == task.workload]
    assert report.kernels[0].new == 2 and len(mine) == 2
    assert mine[0]["decisions"] == mine_default and mine[1]["decisions"] == want
