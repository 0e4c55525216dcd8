"""The generation examples in all four languages (examples/generate.py, c/generate.c,
cpp/generate.cpp, java/Generate.java) load one artifact exported by examples/export_gpt.py,
prefill a prompt and greedily decode 32 tokens, one token per decode call: each prints exactly the tokens of the PyTorch
reference model (tests/dynamic/gpt2_reference.py) with the same weights."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "dynamic"))
from gpt2_reference import GPT2  # noqa: E402

STEPS = 32
PROMPTS = ([5, 17, 33, 2, 90], [7], list(range(3, 67)))  # 5, 1 and 64 tokens


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpt")
    ref = GPT2(seed=0)
    np.savez(out / "w.npz", **{k: v.detach().numpy() for k, v in ref.state_dict().items()})
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "export_gpt.py"), str(out / "w.npz"),
                          "-o", str(out / "gpt.so"), "--layers", "2", "--heads", "4"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return out / "gpt.so", {tuple(p): ref.generate(p, STEPS) for p in PROMPTS}


def corrupt_derived_entry(so: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """A copy of the artifact whose first function's first derived dimension has op 99."""
    import struct
    data = bytearray(so.read_bytes())
    base = data.index(b"KILNEXE\0")
    num, table = struct.unpack_from("<I", data, base + 24)[0], struct.unpack_from("<Q", data, base + 32)[0]
    for i in range(num):
        kind, _, off, _ = struct.unpack_from("<IIQQ", data, base + table + 24 * i)
        if kind == 5:  # FUNCTIONS
            entry = base + off + 4
            num_sym = struct.unpack_from("<I", data, entry + 16)[0]
            derived = entry + 20 + 4 * num_sym
            assert struct.unpack_from("<I", data, derived)[0] >= 1  # prefill has derived dims
            struct.pack_into("<I", data, derived + 4, 99)
            out.write_bytes(bytes(data))
            return out
    raise AssertionError("no FUNCTIONS section")


def _errors(cmd_for, artifact, tmp_path):
    """Each language reports a corrupted derived-dim entry, a prompt longer than the cache (a
    violated limit on a symbolic dim) and a generation past the cache's end as a clear error,
    exit status 1."""
    so, _ = artifact
    bad = corrupt_derived_entry(so, tmp_path / "bad.so")
    run = subprocess.run(cmd_for(bad, ["3", "1", "2"]), capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "derived dimension 0 has unknown op 99" in run.stderr, run.stderr[-2000:]
    run = subprocess.run(cmd_for(so, ["2"] + ["1"] * 130), capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "prefill: symbolic dimension 'n' = 130 exceeds its bound 128" in run.stderr, \
        run.stderr[-2000:]
    # 120 + 19 positions: decode would return NaN once the cache's 128 are filled
    run = subprocess.run(cmd_for(so, ["20"] + ["1"] * 120), capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "the KV cache is full (128 positions)" in run.stderr, run.stderr[-2000:]


def _tokens(run):
    assert run.returncode == 0, run.stderr[-3000:]
    return [int(t) for t in run.stdout.split()]


def test_python(artifact, tmp_path):
    so, want = artifact
    for prompt, tokens in want.items():
        run = subprocess.run([sys.executable, str(ROOT / "examples" / "generate.py"), str(so),
                              *map(str, prompt), "--steps", str(STEPS)], capture_output=True, text=True,
                             timeout=300)
        assert _tokens(run) == tokens, prompt
    _errors(lambda so, args: [sys.executable, str(ROOT / "examples" / "generate.py"), str(so), *args[1:],
                              "--steps", args[0]], artifact, tmp_path)


def _build(cmd, tmp_path):
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


@pytest.mark.parametrize("lang", ["c", "cpp"])
def test_c_and_cpp(artifact, tmp_path, lang, build_lock):
    if shutil.which("gcc" if lang == "c" else "g++") is None:
        pytest.skip(f"needs a {lang} compiler")
    so, want = artifact
    with build_lock():
        subprocess.run(["make", "-s", "-C", str(ROOT / "runtime_c")], check=True, timeout=300)
        runtime = tmp_path / "libkiln_runtime.a"
        shutil.copyfile(ROOT / "runtime_c" / "build" / "libkiln_runtime.a", runtime)
    exe = tmp_path / "generate"
    inc = [f"-I{ROOT / 'runtime_c' / 'include'}", f"-I{ROOT / 'bindings' / 'cpp'}"]
    if lang == "c":
        cmd = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", *inc, str(ROOT / "examples/c/generate.c")]
    else:
        cmd = ["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-O2", *inc, str(ROOT / "examples/cpp/generate.cpp")]
    _build(cmd + [str(runtime), "-o", str(exe), "-ldl", "-lpthread", "-lm"], tmp_path)
    for prompt, tokens in want.items():
        run = subprocess.run([str(exe), str(so), str(STEPS), *map(str, prompt)], capture_output=True,
                             text=True, timeout=300)
        assert _tokens(run) == tokens, prompt
    # a wrong artifact path: a clear error, not a crash
    run = subprocess.run([str(exe), str(tmp_path / "nope.so"), "4", "1"], capture_output=True, text=True)
    assert run.returncode == 1 and "nope.so" in run.stderr
    _errors(lambda so, args: [str(exe), str(so), *args], artifact, tmp_path)


def test_java(artifact, java_build, tmp_path):
    so, want = artifact
    classes = tmp_path / "classes"
    _build([str(java_build["javac"]), "--release", "11", "-Xlint:all", "-Werror", "-cp", str(java_build["jar"]),
            "-d", str(classes), str(ROOT / "examples" / "java" / "Generate.java")], tmp_path)
    for prompt, tokens in want.items():
        run = subprocess.run([str(java_build["java"]), "-cp", f"{java_build['jar']}:{classes}",
                              f"-Djava.library.path={java_build['lib_dir']}", "Generate", str(so), str(STEPS),
                              *map(str, prompt)], capture_output=True, text=True, timeout=300)
        assert _tokens(run) == tokens, prompt
    _errors(lambda so, args: [str(java_build["java"]), "-cp", f"{java_build['jar']}:{classes}",
                              f"-Djava.library.path={java_build['lib_dir']}", "Generate", str(so), *args],
            artifact, tmp_path)


def test_decode_allocates_nothing_in_an_arena(artifact, tmp_path, build_lock):
    """In a caller's arena (kiln_vm_set_arena) a decode step makes no heap call at all: frame,
    logits and the (logits, kv_cache) tuple come from the arena, the kernels' scratch from the
    stack (tests/deploy/programs/decode_alloc.c counts malloc & co., interposed). The tokens
    are still PyTorch's; without the arena the same count is not 0 (the counter works); a
    cache created in the arena and passed to the next call is refused, not overwritten."""
    if shutil.which("gcc") is None:
        pytest.skip("needs a C compiler")
    so, want = artifact
    with build_lock():
        subprocess.run(["make", "-s", "-C", str(ROOT / "runtime_c")], check=True, timeout=300)
        runtime = tmp_path / "libkiln_runtime.a"
        shutil.copyfile(ROOT / "runtime_c" / "build" / "libkiln_runtime.a", runtime)
    exe = tmp_path / "decode_alloc"
    _build(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", f"-I{ROOT / 'runtime_c' / 'include'}",
            str(ROOT / "tests" / "deploy" / "programs" / "decode_alloc.c"), str(runtime), "-o", str(exe),
            "-ldl", "-lpthread", "-lm"], tmp_path)
    prompt = [5, 17, 33, 2, 90]
    for mode in ("arena", "heap"):
        run = subprocess.run([str(exe), str(so), str(STEPS), mode, *map(str, prompt)], capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        tokens, count = run.stdout.splitlines()
        assert [int(t) for t in tokens.split()] == want[tuple(prompt)], mode
        calls = int(count.split(": ")[1])
        assert count.startswith(f"heap calls in {STEPS - 2} decodes: ")
        assert calls == 0 if mode == "arena" else calls >= STEPS - 2, (mode, calls)
    run = subprocess.run([str(exe), str(so), str(STEPS), "misuse", *map(str, prompt)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 1
    assert "prefill: argument 1 is an earlier call's output in the VM's arena" in run.stderr, run.stderr
