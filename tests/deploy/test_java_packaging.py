"""Java beyond the basic binding: the platform jar (the JNI library inside, loaded from a
temporary copy) runs the MLP with nothing but the jar on the class path; external functions
written in Java (Function.register) are called by a model's graph. Plain `java` programs, so
these run beside the jpype tests of test_java_binding.py."""
import os
import pathlib
import subprocess
import zipfile

import numpy as np

import kiln
from kiln.script import R, T

PROGRAMS = pathlib.Path(__file__).resolve().parent / "programs"


def _deterministic(k, shape):
    """examples/java/RunModel.java's data: element i of input k is ((i * 7 + k * 13) % 17 - 8) / 64."""
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    return ((((i * 7 + k * 13) % 17) - 8) / 64).astype(np.float32).reshape(shape)


def _clean_env():
    """No library path leads to libkiln_jni.so: only the jar can provide it."""
    return {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "JAVA_TOOL_OPTIONS")}


def test_platform_jar_holds_the_jni_library(java_build):
    with zipfile.ZipFile(java_build["platform_jar"]) as jar:
        names = jar.namelist()
    assert "ai/kiln/native/linux-x86_64/libkiln_jni.so" in names
    assert "ai/kiln/KilnModule.class" in names


def test_mlp_runs_with_only_the_platform_jar(java_build, mlp_artifact, tmp_path):
    cp = os.pathsep.join([str(java_build["platform_jar"]), str(java_build["examples"])])
    proc = subprocess.run([str(java_build["java"]), "-Xcheck:jni", f"-Djava.io.tmpdir={tmp_path}",
                           "-cp", cp, "RunModel", str(mlp_artifact.so_path)],
                          capture_output=True, text=True, timeout=60, env=_clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stdout + proc.stderr
    header, values = proc.stdout.strip().splitlines()[-2:]
    assert header == "output float32 [1, 10]"
    got = np.array([float(v) for v in values.split()], dtype=np.float32).reshape(1, 10)
    x, w1, b1, w2, b2 = (_deterministic(k, s) for k, s in enumerate(mlp_artifact.arg_shapes))
    np.testing.assert_allclose(got, np.maximum(x @ w1.T + b1, 0) @ w2.T + b2, rtol=1e-4, atol=1e-4)


def test_plain_jar_without_the_library_names_the_platform_jar(java_build, mlp_artifact):
    cp = os.pathsep.join([str(java_build["jar"]), str(java_build["examples"])])
    proc = subprocess.run([str(java_build["java"]), "-cp", cp, "RunModel", str(mlp_artifact.so_path)],
                          capture_output=True, text=True, timeout=60, env=_clean_env())
    assert proc.returncode != 0
    assert "kiln-VERSION-linux-x86_64.jar" in proc.stderr and "kiln.jni.library" in proc.stderr


@kiln.script.ir_module
class Net:
    @T.prim_func
    def linear0(X: T.Buffer((1, 784), "float32"), W: T.Buffer((128, 784), "float32"),
                B: T.Buffer((128,), "float32"), Z: T.Buffer((1, 128), "float32")):
        for i, j, k in T.grid(1, 128, 784):
            with T.block("Z"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    Z[vi, vj] = B[vj]
                Z[vi, vj] = Z[vi, vj] + X[vi, vk] * W[vj, vk]

    @R.function
    def main(x: R.Tensor((1, 784), "float32"), w0: R.Tensor((128, 784), "float32"),
             b0: R.Tensor((128,), "float32")):
        with R.dataflow():
            lv0 = R.call_tir(Net.linear0, (x, w0, b0), R.Tensor((1, 128), "float32"))
            lv1 = R.call_dps_packed("env.relu", (lv0,), R.Tensor((1, 128), "float32"))
            R.output(lv1)
        return lv1


def test_external_function_written_in_java(java_build, tmp_path):
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((128, 784), dtype=np.float32) * 0.05
    b0 = rng.standard_normal((128,), dtype=np.float32)
    x = rng.standard_normal((1, 784), dtype=np.float32)
    bound = kiln.transform.bind_params("main", {"w0": w0, "b0": b0})(Net)
    kiln.compile(bound, "llvm").export_library(str(tmp_path / "net.so"))
    x.tofile(tmp_path / "x.bin")
    subprocess.run([str(java_build["javac"]), "--release", "11", "-Xlint:all", "-Werror",
                    "-cp", str(java_build["jar"]), "-d", str(tmp_path), str(PROGRAMS / "JavaExternal.java")],
                   check=True, timeout=120)
    cp = os.pathsep.join([str(java_build["platform_jar"]), str(tmp_path)])
    proc = subprocess.run([str(java_build["java"]), "-Xcheck:jni", "-cp", cp, "JavaExternal",
                           str(tmp_path / "net.so"), str(tmp_path / "x.bin")],
                          capture_output=True, text=True, timeout=60, env=_clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stdout + proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.strip().splitlines())
    got = np.array(lines["output"].split(), dtype=np.float32)
    np.testing.assert_allclose(got, np.maximum(x @ w0.T + b0, 0).ravel(), rtol=1e-4, atol=1e-4)
    assert lines["calls"] == "1"
    assert lines["thrown"].startswith("runtime failure ")
    assert "env.relu: java.lang.IllegalStateException: relu refused" in lines["thrown"]
    assert lines["unregistered"].startswith("not found ") and "env.relu" in lines["unregistered"]
