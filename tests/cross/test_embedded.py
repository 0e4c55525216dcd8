"""Issue 15, the embedded build: `make -C runtime_c embedded` (static, single-threaded, no dlopen,
no file system) linked with a model from export_static; after init, calls run in a caller's
arena of the header's KILN_MODEL_M_ARENA_BYTES and make zero heap calls (malloc and friends
interposed), on x86-64 and under qemu for armv7; outputs equal the host VM's."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

pytest.importorskip("onnx")

import kiln  # noqa: E402
from cross_helpers import MODELS, TARGETS, compile_onnx, need_qemu  # noqa: E402
from cross_helpers import HERE, ROOT, build_runtime, static_x as _x  # noqa: E402

# Symbols the embedded runtime must not use: dynamic loading, threads, files.
FORBIDDEN = {"dlopen", "dlsym", "dlclose", "pthread_create", "pthread_mutex_lock", "open", "fopen",
             "pread", "fstat", "read"}


def _run_app(arch, tmp_path, runtime_make):
    """Build embedded_app.c for ``arch`` ("host" or a key of TARGETS) and return a function
    running it (args -> CompletedProcess)."""
    target = "llvm" if arch == "host" else TARGETS[arch]
    ex = compile_onnx(MODELS["mlp"](), target)
    files = ex.export_static(tmp_path, "m")
    header = open(files["header"]).read()
    assert re.search(r"#define KILN_MODEL_M_ARENA_BYTES \d+u", header), header
    if arch == "host":
        runtime_make("embedded", copy={"embedded/libkiln_runtime.a": tmp_path / "libkiln_runtime.a"})
        cc, run = [shutil.which("cc") or "gcc"], []
    else:
        from kiln.codegen.toolchain import cross_cc, qemu_command
        triple = target.split()[0]
        build_runtime(triple, runtime_make, tmp_path / "libkiln_runtime.a", "embedded")
        cc, run = cross_cc(triple), qemu_command(triple)
    rt = tmp_path / "libkiln_runtime.a"
    undefined = set(subprocess.run(["nm", "-u", str(rt)], capture_output=True, text=True).stdout.split())
    assert not (undefined & FORBIDDEN), undefined & FORBIDDEN
    app = tmp_path / "embedded_app"
    proc = subprocess.run([*cc, "-std=c11", "-O1", f"-I{tmp_path}", f"-I{ROOT / 'runtime_c' / 'include'}",
                           str(HERE / "programs" / "embedded_app.c"), files["archive"], str(rt),
                           "-o", str(app), "-lm"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return lambda *args: subprocess.run([*run, str(app), *args], capture_output=True, text=True,
                                        timeout=120)


@pytest.mark.parametrize("arch", ["host", "armv7"])
def test_embedded_runtime_allocates_nothing_after_init(arch, tmp_path, runtime_make):
    if arch != "host":
        need_qemu(TARGETS[arch])
    run = _run_app(arch, tmp_path, runtime_make)
    proc = run()
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines.pop(0) == "refused: kiln_vm_set_arena: the arena must be 64-byte aligned"
    need, given = map(int, re.match(r"arena bytes: (\d+) needed, (\d+) in the header", lines[0]).groups())
    assert 0 < need <= given
    assert lines[1] == "allocations after init: 0"
    got = np.array([float(v) for v in lines[2:]], dtype="float32").reshape(3, 2, 10)
    want = kiln.VirtualMachine(compile_onnx(MODELS["mlp"](), "llvm"), kiln.cpu())["main"](_x()).numpy()
    for r in range(3):
        np.testing.assert_allclose(got[r], want, rtol=1e-5, atol=1e-6)
    # The same program on the heap: the interposers do see the runtime's allocations.
    proc = run("--heap")
    assert proc.returncode == 0, proc.stderr
    count = int(re.search(r"allocations after init: (\d+)", proc.stdout).group(1))
    assert count > 0


def test_arena_constant_for_several_outputs():
    """A function returning a tuple runs in an arena too (the tuple is in the arena, borrowing
    its items): the header's size counts it (tests/deploy/test_generate_examples.py runs a
    language model's decode, which returns (logits, kv_cache), in an arena)."""
    from onnx import TensorProto as TP, helper as h
    from kiln.executable.static import arena_bytes
    g = h.make_graph([h.make_node("Relu", ["x"], ["a"]), h.make_node("Neg", ["x"], ["b"])], "two",
                     [h.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("a", TP.FLOAT, [2, 3]),
                      h.make_tensor_value_info("b", TP.FLOAT, [2, 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 10
    ex = compile_onnx(m, "llvm")
    one = h.make_model(h.make_graph([h.make_node("Relu", ["x"], ["a"])], "one",
                                    [h.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                                    [h.make_tensor_value_info("a", TP.FLOAT, [2, 3])]),
                       opset_imports=[h.make_opsetid("", 17)])
    one.ir_version = 10
    # a second output of 2 x 3 floats and the tuple of two items: 64 + 64 bytes more at least
    assert arena_bytes(ex.spec) >= arena_bytes(compile_onnx(one, "llvm").spec) + 128
    assert arena_bytes(compile_onnx(MODELS["if"](), "llvm").spec) > 0
