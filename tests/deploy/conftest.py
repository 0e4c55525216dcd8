"""Shared fixtures for the deployment tests (C, C++, Java): one exported MLP and the runtime.

``mlp_artifact`` compiles the MLP of examples/mlp.py once per session (with
examples/c/export_mlp.py) and writes, into a session tmp dir:

- ``mlp.so``: the model as a shared library (``Executable.export_library``);
- ``mlp.a`` and ``mlp.h`` (in ``static_dir``, the same dir): the model for static linking
  (``Executable.export_static(dir, name="mlp")``), the header declaring ``kiln_model_mlp_create``;
- the input, each parameter and the expected output (the Python VM's result) as raw
  little-endian float32 files (``*.bin``, C order) and as ``.npy``.

``java_build`` builds bindings/java (kiln.jar, libkiln_jni.so, the platform jar with the JNI
library inside, the compiled example).
``runtime_build`` builds runtime_c (``make -C runtime_c all asan``, under the build lock of
tests/conftest.py) and returns its include dir and copies of its libraries; ``runtime_make``
(tests/conftest.py) runs other targets under the same lock.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import pathlib
import shutil
import subprocess
from typing import List, Tuple

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime_c"
JAVA_DIR = ROOT / "bindings" / "java"


@dataclasses.dataclass(frozen=True)
class MLPArtifact:
    dir: pathlib.Path
    so_path: pathlib.Path                  # model shared library (kernels + blob)
    static_dir: pathlib.Path               # holds mlp.a + mlp.h
    static_name: str                       # "mlp": kiln_model_mlp_create in mlp.h
    function: str                          # "forward"
    input_path: pathlib.Path               # raw float32 (1, 784)
    param_paths: List[pathlib.Path]        # raw float32: w1 (256, 784), b1 (256,), w2 (10, 256), b2 (10,)
    expected_path: pathlib.Path            # raw float32 (1, 10), the Python VM's output
    input_npy: pathlib.Path
    param_npys: List[pathlib.Path]
    expected_npy: pathlib.Path
    input_shape: Tuple[int, ...]
    param_shapes: List[Tuple[int, ...]]
    output_shape: Tuple[int, ...]

    @property
    def arg_paths(self) -> List[pathlib.Path]:
        """Raw files of every argument of ``forward``, in order (input first)."""
        return [self.input_path, *self.param_paths]

    @property
    def arg_shapes(self) -> List[Tuple[int, ...]]:
        return [self.input_shape, *self.param_shapes]

    def expected(self) -> np.ndarray:
        return np.load(self.expected_npy)


@dataclasses.dataclass(frozen=True)
class RuntimeBuild:
    include_dir: pathlib.Path
    shared_lib: pathlib.Path               # libkiln_runtime.so
    static_lib: pathlib.Path               # libkiln_runtime.a
    asan_static_lib: pathlib.Path          # asan/libkiln_runtime.a (ASan + UBSan)
    libs: Tuple[str, ...] = ("-ldl", "-lpthread", "-lm")


@pytest.fixture(scope="session")
def runtime_build(tmp_path_factory, runtime_make) -> RuntimeBuild:
    """The runtime built from this tree; its libraries are copied (under the build lock, see
    tests/conftest.py) into a session dir so a rebuild by anyone else cannot change them under
    the tests."""
    out = tmp_path_factory.mktemp("runtime")
    runtime_make("all", "asan", copy={rel: out / rel for rel in
                                      ["libkiln_runtime.so", "libkiln_runtime.a", "asan/libkiln_runtime.a"]})
    return RuntimeBuild(RUNTIME / "include", out / "libkiln_runtime.so", out / "libkiln_runtime.a",
                        out / "asan" / "libkiln_runtime.a")


def _load_export_mlp():
    """examples/c/export_mlp.py as a module: the one definition of the MLP artifact."""
    spec = importlib.util.spec_from_file_location("kiln_example_export_mlp",
                                                  ROOT / "examples" / "c" / "export_mlp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def _mlp_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("mlp_artifact")
    ex, x, params, y = _load_export_mlp().export(str(out))   # mlp.so, mlp.a, mlp.h, *.bin
    return out, ex, x, params, y


@pytest.fixture(scope="session")
def mlp_executable(_mlp_export):
    """The ``kiln.Executable`` of the MLP behind ``mlp_artifact``."""
    return _mlp_export[1]


@pytest.fixture(scope="session")
def mlp_artifact(_mlp_export) -> MLPArtifact:
    out, _, x, params, y = _mlp_export
    np.save(out / "input.npy", x)
    for i, p in enumerate(params):
        np.save(out / f"param{i}.npy", p)
    np.save(out / "expected.npy", y)
    n = len(params)
    return MLPArtifact(
        dir=out, so_path=out / "mlp.so", static_dir=out, static_name="mlp", function="forward",
        input_path=out / "input.bin", param_paths=[out / f"param{i}.bin" for i in range(n)],
        expected_path=out / "expected.bin", input_npy=out / "input.npy",
        param_npys=[out / f"param{i}.npy" for i in range(n)], expected_npy=out / "expected.npy",
        input_shape=tuple(x.shape), param_shapes=[tuple(p.shape) for p in params],
        output_shape=tuple(y.shape))


def _java_home():
    if os.environ.get("JAVA_HOME"):
        return pathlib.Path(os.environ["JAVA_HOME"])
    javac = shutil.which("javac")
    return pathlib.Path(os.path.realpath(javac)).parents[1] if javac else None


@pytest.fixture(scope="session")
def java_build(build_lock, tmp_path_factory):
    """Builds bindings/java (its make also asks runtime_c's) under the build lock and copies
    the jar, the JNI library and the compiled example into a session dir, so parallel workers
    and other sessions never rebuild them under a running JVM."""
    home = _java_home()
    if home is None or not (home / "bin" / "javac").exists():
        pytest.skip("no JDK (javac) found")
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("needs a C compiler (cc) for libkiln_jni.so")
    out = tmp_path_factory.mktemp("java")
    with build_lock():
        subprocess.run(["make", "-s", "-C", str(JAVA_DIR), "all", "example"], check=True,
                       timeout=300, env={**os.environ, "JAVA_HOME": str(home)})
        shutil.copyfile(JAVA_DIR / "build" / "kiln.jar", out / "kiln.jar")
        shutil.copyfile(JAVA_DIR / "build" / "libkiln_jni.so", out / "libkiln_jni.so")
        shutil.copytree(JAVA_DIR / "build" / "examples", out / "examples")
        platform_jar, = (JAVA_DIR / "build").glob("kiln-*-*.jar")   # kiln-VERSION-PLATFORM.jar
        (out / "platform").mkdir()
        shutil.copyfile(platform_jar, out / "platform" / platform_jar.name)
    return {"jar": out / "kiln.jar", "lib": out / "libkiln_jni.so", "lib_dir": out,
            "platform_jar": out / "platform" / platform_jar.name,
            "examples": out / "examples", "java": home / "bin" / "java", "javac": home / "bin" / "javac",
            "home": home}
