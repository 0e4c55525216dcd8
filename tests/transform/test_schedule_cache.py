"""The cache of scheduled kernels (``kiln.transform.schedule_cache``): a kernel scheduled once
under a context is read back, not scheduled again; another context, a tuning database, or a
record that does not read back schedules it afresh. The records live in the context's
``cache_dir``, which ``kiln.compile`` and ``kiln compile --cache-dir`` set to the build cache's."""
import numpy as np
import pytest

import kiln
from kiln.codegen import BuildOptions

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


def _ctx(tmp_path, **options):
    return context(PassContext(cache_dir=str(tmp_path), **options))


def test_a_kernel_is_scheduled_once(kernel, tmp_path):
    ctx, calls = _ctx(tmp_path), []
    first = sc.scheduled(kernel, ctx, _counting(ctx, calls))
    again = sc.scheduled(kernel, ctx, _counting(ctx, calls))
    assert len(calls) == 1 and again is not first
    assert_structural_equal(again, first)
    assert_structural_equal(first, schedule_kernel(kernel, ctx))
    assert len(list((tmp_path / "schedules").iterdir())) == 1


def test_another_context_is_another_record(kernel, tmp_path):
    a, b = _ctx(tmp_path), _ctx(tmp_path, parallel_min_elements=1 << 30)
    assert sc.record_path(kernel, a) != sc.record_path(kernel, b)
    avx2 = _ctx(tmp_path, target="llvm -mcpu=haswell")
    assert sc.record_path(kernel, a) != sc.record_path(kernel, avx2)
    # the folder is where the record lives, not part of what it is about
    elsewhere = sc.record_path(kernel, _ctx(tmp_path / "other"))
    assert elsewhere.startswith(str(tmp_path / "other" / "schedules"))
    assert elsewhere.rsplit("/", 1)[1] == sc.record_path(kernel, a).rsplit("/", 1)[1]


def test_a_machine_with_other_caches_or_cores_is_another_record(kernel, tmp_path, monkeypatch):
    """Two hosts of one ISA (Zen 4 and a Xeon, both AVX-512: one ``Machine.key()``) differ in
    their caches, and the rules' choices follow the caches: one's schedules must not serve the
    other from a shared cache directory."""
    import dataclasses
    from kiln.codegen import machine as machine_mod
    a = _ctx(tmp_path)
    host = a.machine
    paths = {sc.record_path(kernel, a)}
    for change in ({"l2_bytes": host.l2_bytes // 2}, {"l1_bytes": host.l1_bytes * 2},
                   {"cores": host.cores + 1}):
        other = dataclasses.replace(host, **change)
        assert other.key() == host.key()
        monkeypatch.setattr(machine_mod, "_machine", lambda t, other=other: other)
        paths.add(sc.record_path(kernel, _ctx(tmp_path)))
    assert len(paths) == 4


def test_a_tuning_database_is_not_cached(kernel, tmp_path):
    ctx = _ctx(tmp_path, tuning_db=str(tmp_path / "db.jsonl"))
    assert sc.record_path(kernel, ctx) is None


def test_an_unreadable_record_is_scheduled_again(kernel, tmp_path):
    ctx, calls = _ctx(tmp_path), []
    path = sc.record_path(kernel, ctx)
    (tmp_path / "schedules").mkdir()
    with open(path, "wb") as f:
        f.write(b"not a pickle")
    out = sc.scheduled(kernel, ctx, _counting(ctx, calls))
    assert len(calls) == 1
    assert_structural_equal(out, schedule_kernel(kernel, ctx))
    assert sc.scheduled(kernel, ctx, _counting(ctx, calls)) is not None
    assert len(calls) == 1     # the record was rewritten


def _mlp_onnx(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.arange(24, dtype="float32").reshape(4, 6) / 24, "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 6])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_compile_keeps_schedules_in_the_build_cache_folder(tmp_path, monkeypatch):
    """``kiln.compile(..., options=BuildOptions(cache_dir=...))`` and ``kiln compile
    --cache-dir``: the schedules go where the objects and libraries go, not to the default
    folder."""
    import onnx
    from kiln.cli import main
    default = tmp_path / "default"
    monkeypatch.setenv("KILN_CACHE_DIR", str(default))
    model = _mlp_onnx(str(tmp_path / "m.onnx"))
    mod, params = kiln.frontend.from_onnx(onnx.load(model))
    mod = kiln.transform.bind_params("main", params)(mod)
    kiln.compile(mod, "llvm", pipeline="default", options=BuildOptions(cache_dir=str(tmp_path / "api")))
    assert list((tmp_path / "api" / "schedules").glob("*.sched"))
    assert main(["compile", model, "-o", str(tmp_path / "m.so"), "--cache-dir", str(tmp_path / "cli")]) == 0
    assert list((tmp_path / "cli" / "schedules").glob("*.sched"))
    assert not default.exists()
