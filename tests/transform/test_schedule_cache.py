"""The cache of scheduled kernels (``kiln.transform.schedule_cache``): a kernel scheduled once
under a context is read back, not scheduled again; another context, a tuning database, or a
record that does not read back schedules it afresh."""
import pytest

from kiln.ir import assert_structural_equal
from kiln.transform import PassContext, legalize
from kiln.transform import schedule_cache as sc
from kiln.transform.default_schedule import schedule_kernel
from kiln.transform.infra import context

from test_default_schedule import _single
from transform_helpers import kernels


@pytest.fixture
def kernel():
    legal = legalize()(_single("matmul", [(32, 64), (64, 48)]))
    return legal[kernels(legal)[0]]


def _counting(ctx, calls):
    def schedule(f):
        calls.append(f)
        return schedule_kernel(f, ctx)
    return schedule


def test_a_kernel_is_scheduled_once(kernel, tmp_path):
    ctx, calls = context(None), []
    first = sc.scheduled(kernel, ctx, _counting(ctx, calls), cache_dir=str(tmp_path))
    again = sc.scheduled(kernel, ctx, _counting(ctx, calls), cache_dir=str(tmp_path))
    assert len(calls) == 1 and again is not first
    assert_structural_equal(again, first)
    assert_structural_equal(first, schedule_kernel(kernel, ctx))
    assert len(list((tmp_path / "schedules").iterdir())) == 1


def test_another_context_is_another_record(kernel, tmp_path):
    a, b = context(None), context(PassContext(parallel_min_elements=1 << 30))
    assert sc.record_path(kernel, a, str(tmp_path)) != sc.record_path(kernel, b, str(tmp_path))
    avx2 = context(PassContext(target="llvm -mcpu=haswell"))
    assert sc.record_path(kernel, a, str(tmp_path)) != sc.record_path(kernel, avx2, str(tmp_path))


def test_a_tuning_database_is_not_cached(kernel, tmp_path):
    ctx = context(PassContext(tuning_db=str(tmp_path / "db.jsonl")))
    assert sc.record_path(kernel, ctx, str(tmp_path)) is None


def test_an_unreadable_record_is_scheduled_again(kernel, tmp_path):
    ctx, calls = context(None), []
    path = sc.record_path(kernel, ctx, str(tmp_path))
    (tmp_path / "schedules").mkdir()
    with open(path, "wb") as f:
        f.write(b"not a pickle")
    out = sc.scheduled(kernel, ctx, _counting(ctx, calls), cache_dir=str(tmp_path))
    assert len(calls) == 1
    assert_structural_equal(out, schedule_kernel(kernel, ctx))
    assert sc.scheduled(kernel, ctx, _counting(ctx, calls), cache_dir=str(tmp_path)) is not None
    assert len(calls) == 1     # the record was rewritten
