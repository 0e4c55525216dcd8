"""SEED_FLOWS.md section C's call shapes for a language model, from Python, C++ and Java:
`vm["prefill"](inputs, weight, kv_cache)` / `vm["decode"](...)` with the weights passed or
bound; `vm.GetFunction("prefill")(data, weight, kv_cache)`;
`vm.getFunction("prefill").pushArg(data).pushArg(weight).pushArg(kvCache).invoke()` in a Java
class that imports `ai.kiln.*` and uses java.lang.Module too."""

import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import kiln
from kiln.script import R

PROGRAMS = pathlib.Path(__file__).resolve().parent / "programs"


@kiln.script.ir_module
class LM:
    @R.function
    def prefill(inputs: R.Tensor((1, 4, 16), "float32"), weight: R.Tensor((16, 16), "float32"),
                kv_cache: R.Tensor((1, 4, 16), "float32")):
        with R.dataflow():
            h = R.matmul(inputs, weight)
            cache = R.add(kv_cache, h)
            logits = R.softmax(h, axis=-1)
            R.output(logits, cache)
        return (logits, cache)

    @R.function
    def decode(inputs: R.Tensor((1, 1, 16), "float32"), weight: R.Tensor((16, 16), "float32"),
               kv_cache: R.Tensor((1, 4, 16), "float32")):
        with R.dataflow():
            h = R.matmul(inputs, weight)
            ctx = R.sum(kv_cache, axis=1, keepdims=True)
            logits = R.softmax(R.add(h, ctx), axis=-1)
            R.output(logits)
        return (logits, kv_cache)


def _softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _reference(inputs, weight, kv_cache, token):
    h = inputs @ weight
    cache = kv_cache + h
    return {"prefill_logits": _softmax(h), "prefill_cache": cache,
            "decode_logits": _softmax(token @ weight + cache.sum(1, keepdims=True))}


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """lm.so, its inputs as raw float32 files, and the numpy reference."""
    out = tmp_path_factory.mktemp("lm")
    rng = np.random.default_rng(13)
    arrays = {"inputs": rng.standard_normal((1, 4, 16), dtype=np.float32),
              "weight": rng.standard_normal((16, 16), dtype=np.float32) * 0.5,
              "kv_cache": rng.standard_normal((1, 4, 16), dtype=np.float32),
              "token": rng.standard_normal((1, 1, 16), dtype=np.float32)}
    for name, a in arrays.items():
        a.tofile(out / f"{name}.bin")
    ex = kiln.compile(kiln.get_pipeline("default")(LM), target="llvm")
    ex.export_library(str(out / "lm.so"))
    return out, arrays, _reference(**arrays)


def _parse_lines(text):
    return {name: np.array(values, dtype=np.float32) for name, *values in
            (line.split() for line in text.strip().splitlines())}


def _check(got, expected):
    assert sorted(got) == sorted(expected)
    for name, e in expected.items():
        np.testing.assert_allclose(got[name], e.ravel(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_python_weights_passed_and_bound(lm):
    out, a, expected = lm
    vm = kiln.VirtualMachine(kiln.load_module(str(out / "lm.so")), kiln.cpu())
    data, weight, kv_cache = (kiln.nd.array(a[k]) for k in ("inputs", "weight", "kv_cache"))
    logits, cache = vm["prefill"](data, weight, kv_cache)
    dec_logits, _ = vm["decode"](kiln.nd.array(a["token"]), weight, cache)
    _check({"prefill_logits": logits.numpy().ravel(), "prefill_cache": cache.numpy().ravel(),
            "decode_logits": dec_logits.numpy().ravel()}, expected)

    bound = LM
    for fn in ("prefill", "decode"):
        bound = kiln.transform.BindParams(fn, {"weight": a["weight"]})(bound)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(bound), target="llvm"), kiln.cpu())
    logits, cache = vm["prefill"](a["inputs"], a["kv_cache"])
    dec_logits, _ = vm["decode"](a["token"], cache)
    _check({"prefill_logits": logits.numpy().ravel(), "prefill_cache": cache.numpy().ravel(),
            "decode_logits": dec_logits.numpy().ravel()}, expected)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_cpp(lm, runtime_build, tmp_path):
    out, _, expected = lm
    exe = tmp_path / "prefill_decode"
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror",
                    f"-I{runtime_build.include_dir}", f"-I{PROGRAMS.parents[2] / 'bindings' / 'cpp'}",
                    str(PROGRAMS / "prefill_decode.cpp"), str(runtime_build.static_lib), "-o", str(exe),
                    *runtime_build.libs], check=True, timeout=180)
    proc = subprocess.run([str(exe), str(out / "lm.so"), str(out)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    _check(_parse_lines(proc.stdout), expected)


def test_java_wildcard_import_and_call_shape(lm, java_build, tmp_path):
    out, _, expected = lm
    subprocess.run([str(java_build["javac"]), "--release", "11", "-Xlint:all", "-Werror",
                    "-cp", str(java_build["jar"]), "-d", str(tmp_path), str(PROGRAMS / "PrefillDecode.java")],
                   check=True, timeout=120)
    cp = f"{java_build['jar']}:{tmp_path}"
    proc = subprocess.run([str(java_build["java"]), "-Xcheck:jni", "-cp", cp,
                           f"-Djava.library.path={java_build['lib_dir']}", "PrefillDecode",
                           str(out / "lm.so"), str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stdout + proc.stderr
    _check(_parse_lines(proc.stdout), expected)
