"""Fixtures of the reliability tests: real models compiled once per session (models.py), and
the C harness reliability_test.c built against the runtime's sanitizer builds."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
RUNTIME = HERE.parents[1] / "runtime_c"
sys.path.insert(0, str(HERE))

SANITIZER_FLAGS = {
    "asan": ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"],
    "tsan": ["-fsanitize=thread"],
}


@pytest.fixture(scope="session")
def model_manifest(tmp_path_factory):
    """name -> manifest path of that model (models.MODELS), each compiled on first use."""
    import reliability_models as models
    out = tmp_path_factory.mktemp("reliability_models")
    built = {}

    def get(name):
        if name not in built:
            built[name] = models.build(name, out / name)
        return built[name]
    return get


@pytest.fixture(scope="session")
def reliability_exe(tmp_path_factory, runtime_make):
    """sanitizer ("asan" or "tsan") -> reliability_test built with it, against the runtime's
    build with the same sanitizer (which has allocation-failure injection)."""
    out = tmp_path_factory.mktemp("reliability_exe")
    built = {}

    def get(sanitizer):
        if sanitizer not in built:
            archive = out / sanitizer / "libkiln_runtime.a"
            runtime_make(sanitizer, copy={f"{sanitizer}/libkiln_runtime.a": archive})
            exe = out / sanitizer / "reliability_test"
            subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-O1",
                            *SANITIZER_FLAGS[sanitizer], f"-I{RUNTIME / 'include'}",
                            str(HERE / "reliability_test.c"), str(archive), "-o", str(exe),
                            "-ldl", "-lpthread", "-lm"], check=True)
            built[sanitizer] = exe
        return built[sanitizer]
    return get


def _deploy_conftest():
    """tests/deploy/conftest.py, whose ``java_build`` fixture builds the Java binding (one
    definition of that build, shared with the deployment tests)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("kiln_tests_deploy_conftest",
                                                  HERE.parent / "deploy" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


java_build = _deploy_conftest().java_build


@pytest.fixture(scope="session")
def java_reliability(java_build, tmp_path_factory):
    """(java command prefix, with kiln.jar and the compiled JavaReliability on the class path)."""
    import os
    out = tmp_path_factory.mktemp("java_reliability")
    subprocess.run([str(java_build["javac"]), "--release", "11", "-Xlint:all", "-Werror",
                    "-cp", str(java_build["jar"]), "-d", str(out), str(HERE / "JavaReliability.java")],
                   check=True, timeout=120)
    cp = os.pathsep.join([str(java_build["jar"]), str(out)])
    return [str(java_build["java"]), "-Xcheck:jni", "-cp", cp,
            f"-Djava.library.path={java_build['lib_dir']}", "JavaReliability"]
