"""Kiln as a user gets it: a wheel built from the sources, installed into a fresh virtual
environment outside the repository, used with the checkout out of reach.

One wheel and one environment per test session (shared by the xdist workers):

- the wheel is built (``pip wheel``, build requirements from pip's indexes) from a copy of the
  working tree's sources: the tracked files plus untracked ones git does not ignore, i.e. what a
  clean clone of this tree would hold;
- the environment is made with ``python -m venv`` in a temporary directory and gets the wheel
  with ``pip install``: its dependencies come from pip's configured indexes, as for a user;
- every program runs with that directory as its working directory, no PYTHONPATH, and its own
  kernel cache (KILN_CACHE_DIR), and the tests check that ``kiln`` is imported from the
  environment, never from the checkout.

Then: the README's nn flow; ``kiln compile`` + ``kiln run`` of an ONNX model; a model exported
with ``export_static`` linked into a C program with only ``kiln config``'s flags; a C program
against the shared runtime with ``kiln config`` and with ``pkg-config kiln``; a C++ program
through CMake's ``find_package(Kiln)``; a Java program with only the packaged jar; and the
wheel itself (tag, files, no repository path in any installed file, the sdist unpacked into a
tree made dirty giving the same wheel).
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow   # builds a wheel and a virtual environment (~30 s)

# The tiny model the C, C++ and Java programs run: Linear(16, 8) + ReLU on a (2, 16) input whose
# element i is ((i * 7) % 13) / 16 - 0.25 (exact in float32; every language computes it alike).
MODEL_SCRIPT = r'''
import sys
import numpy as np
import kiln
from kiln import nn

out = sys.argv[1]
model = nn.Sequential(nn.Linear(16, 8), nn.ReLU())
params = model.init_params(seed=0)
model.load_state_dict(params)
mod, _ = model.export(spec={"forward": {"x": nn.spec.Tensor((2, 16), "float32")}})
mod = kiln.transform.bind_params("forward", model.state_dict())(mod)
mod = kiln.get_pipeline("default")(mod)
ex = kiln.compile(mod, target="llvm")
ex.export_library(f"{out}/tiny.so")
ex.export_static(out, name="tiny")
x = (((np.arange(32) * 7) % 13) / 16 - 0.25).astype("float32").reshape(2, 16)
w = next(np.asarray(v) for v in params.values() if np.asarray(v).ndim == 2)
b = next(np.asarray(v) for v in params.values() if np.asarray(v).ndim == 1)
np.save(f"{out}/expected.npy", np.maximum(x @ w.T + b, 0))
np.save(f"{out}/vm.npy", np.asarray(kiln.VirtualMachine(ex, kiln.cpu())["forward"](x).numpy()))
print(kiln.__file__)
'''

# A C program running the tiny model: from tiny.so (argv[1]) through kiln_module_load_library,
# or, built with -DSTATIC_MODEL, linked in (tiny.a + tiny.h). Prints the 16 outputs.
C_PROGRAM = r'''
#include <stdio.h>
#include "kiln_runtime.h"
#ifdef STATIC_MODEL
#include "tiny.h"
#endif

static int fail(const char* what) {
  fprintf(stderr, "%s: %s\n", what, kiln_last_error());
  return 1;
}

static kiln_status_t call(kiln_module_t* m, const char* name, const kiln_value_t* args, int n,
                          kiln_value_t* out) {
  kiln_function_t* fn = NULL;
  kiln_status_t st = kiln_module_get_function(m, name, &fn);
  if (st == KILN_OK) st = kiln_function_call(fn, args, n, out);
  kiln_function_release(fn);
  return st;
}

int main(int argc, char** argv) {
  kiln_module_t* lib = NULL;
  kiln_value_t vm, x, y;
  const int64_t shape[2] = {2, 16};
  kiln_tensor_t* t = NULL;
#ifdef STATIC_MODEL
  (void)argc; (void)argv;
  if (kiln_model_tiny_create(&lib) != KILN_OK) return fail("kiln_model_tiny_create");
#else
  if (argc != 2) return 2;
  if (kiln_module_load_library(argv[1], &lib) != KILN_OK) return fail("load_library");
#endif
  if (call(lib, "load_executable", NULL, 0, &vm) != KILN_OK) return fail("load_executable");
  if (call(vm.u.module, "init", NULL, 0, NULL) != KILN_OK) return fail("init");
  if (kiln_tensor_create(shape, 2, (DLDataType){kDLFloat, 32, 1}, (DLDevice){kDLCPU, 0}, &t) != KILN_OK)
    return fail("tensor_create");
  float* p = (float*)kiln_tensor_dltensor(t)->data;
  for (int i = 0; i < 32; i++) p[i] = (float)((i * 7) % 13) / 16.0f - 0.25f;
  x.kind = KILN_VALUE_TENSOR;
  x.u.tensor = t;
  if (call(vm.u.module, "forward", &x, 1, &y) != KILN_OK) return fail("forward");
  const float* q = (const float*)kiln_tensor_dltensor(y.u.tensor)->data;
  for (int i = 0; i < 16; i++) printf("%.9g\n", q[i]);
  return 0;
}
'''

CPP_PROGRAM = r'''
#include <cstdio>
#include "kiln.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    kiln::NDArray x = kiln::NDArray::Empty({2, 16}, kiln::DataType::Float32());
    float* p = x.data<float>();
    for (int i = 0; i < 32; i++) p[i] = float((i * 7) % 13) / 16.0f - 0.25f;
    kiln::Module lib = kiln::Module::Load(argv[1]);
    kiln::Module vm = lib.GetFunction("load_executable")();
    vm.GetFunction("init")(kiln::Device::CPU());
    kiln::NDArray y = vm.GetFunction("forward")(x);
    for (float v : y.ToVector<float>()) std::printf("%.9g\n", v);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln error: %s\n", e.what());
    return 1;
  }
  return 0;
}
'''

CMAKE_LISTS = r'''
cmake_minimum_required(VERSION 3.16)
project(kiln_app C CXX)
find_package(Kiln 0.1 REQUIRED)
add_executable(app main.cpp)
target_compile_features(app PRIVATE cxx_std_17)
target_link_libraries(app PRIVATE Kiln::runtime_static)
'''

JAVA_PROGRAM = r'''
import ai.kiln.*;

public final class Run {
    public static void main(String[] args) {
        float[] v = new float[32];
        for (int i = 0; i < 32; i++) v[i] = (float) ((i * 7) % 13) / 16f - 0.25f;
        try (NDArray x = NDArray.fromFloatArray(v, new long[] {2, 16});
             KilnModule lib = KilnModule.load(args[0]);
             KilnModule vm = lib.getFunction("load_executable").invoke().asModule()) {
            vm.getFunction("init").pushArg(Device.cpu()).invoke();
            try (NDArray y = vm.getFunction("forward").pushArg(x).invoke().asNDArray()) {
                for (float f : y.toFloatArray()) System.out.println(f);
            }
        }
    }
}
'''


def _run(cmd, cwd, env=None, timeout=600):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, (f"{' '.join(str(c) for c in cmd)} failed ({proc.returncode}):\n"
                                  f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def _copy_sources(dest: pathlib.Path) -> pathlib.Path:
    """The working tree as a clean clone of it would be: tracked files and untracked ones that
    git does not ignore (another engineer's new file is a source too)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to tell sources from build outputs")
    files = subprocess.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b"\0")
    for rel in filter(None, (os.fsdecode(f) for f in files)):
        src = ROOT / rel
        if src.is_file():   # a tracked file deleted in the working tree is not a source now
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _build_wheel(src: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    # Build isolation, as for a user: pip fetches the build requirements (setuptools, cffi)
    # from its indexes, whatever this environment holds.
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, src], cwd=src)
    wheels = list(out.glob("kiln-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _once_per_session(tmp_path_factory, name: str, done: str, make):
    """``shared/name``, made by ``make(path)`` once per test session however many xdist workers
    ask (the first makes it under a lock in their common temp dir; ``done``, a file inside,
    marks it complete, so a half-made one from a failed attempt is made again)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent   # every xdist worker's basetemp lies in the session's
    base = shared / name
    with open(shared / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (base / done).exists():
                shutil.rmtree(base, ignore_errors=True)
                base.mkdir()
                make(base)
                (base / done).touch()
            return base
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """The wheel built from a copy of the working tree's sources: once per test session, shared
    by the xdist workers."""
    base = _once_per_session(tmp_path_factory, "kiln-wheel", "built",
                             lambda b: _build_wheel(_copy_sources(b / "src"), b / "dist"))
    return next((base / "dist").glob("kiln-*.whl"))


class Env:
    """A fresh virtual environment with the wheel installed (``venv``, made by ``install``), and
    a working directory of this worker's (``cwd``)."""

    def __init__(self, venv: pathlib.Path, cwd: pathlib.Path):
        self.venv, self.cwd = venv, cwd
        self.cwd.mkdir()
        self.bin = self.venv / "bin"
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "KILN_CACHE_DIR")}
        self.env.update(PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
                        VIRTUAL_ENV=str(self.venv), KILN_CACHE_DIR=str(cwd / "kiln-cache"))
        self.site = pathlib.Path(self.run(self.bin / "python", "-c",
                                          "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())

    @staticmethod
    def install(venv: pathlib.Path, wheel_path: pathlib.Path) -> None:
        _run([sys.executable, "-m", "venv", venv], cwd=venv.parent)
        _run([venv / "bin" / "python", "-m", "pip", "install", "-q", wheel_path], cwd=venv.parent)

    def run(self, *cmd, cwd=None, env=None):
        return _run(cmd, cwd=cwd or self.cwd, env={**self.env, **(env or {})})

    def python(self, code: str, *args):
        script = self.cwd / f"script_{hashlib.sha1(code.encode()).hexdigest()[:8]}.py"
        script.write_text(code)
        return self.run(self.bin / "python", script, *args)

    def config(self, *opts) -> list:
        return self.run(self.bin / "kiln", "config", *opts).split()


@pytest.fixture(scope="session")
def env(wheel, tmp_path_factory):
    """The installed wheel: one virtual environment per session (shared by the xdist workers,
    like the wheel: installing it is most of these tests' cost), a working directory each."""
    base = _once_per_session(tmp_path_factory, "kiln-venv", "installed",
                             lambda b: Env.install(b / "venv", wheel))
    return Env(base / "venv", tmp_path_factory.mktemp("installed") / "work")


@pytest.fixture(scope="session")
def tiny(env):
    """The tiny model compiled in the environment: (folder with tiny.so, tiny.a, tiny.h), the
    numpy reference output."""
    out = env.cwd / "tiny"
    out.mkdir()
    where = env.python(MODEL_SCRIPT, out).strip()
    assert pathlib.Path(where).is_relative_to(env.site), where
    expected = np.load(out / "expected.npy")
    np.testing.assert_allclose(np.load(out / "vm.npy"), expected, rtol=1e-5, atol=1e-6)
    return out, expected


def _outputs(text: str) -> np.ndarray:
    return np.array([float(v) for v in text.split()], dtype=np.float32).reshape(2, 8)


# ---- the wheel ---------------------------------------------------------------------------------
def test_wheel_is_a_platform_wheel_with_runtime_headers_and_libraries(wheel):
    # cffi builds the extension for the stable ABI, so the tag is cp310-abi3-<this platform>.
    platform_tag = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheel.name == f"kiln-{_version()}-cp310-abi3-{platform_tag}.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in ["kiln/_ffi.abi3.so", "kiln/libinfo.py", "kiln/cli.py",
              "kiln/include/kiln_runtime.h", "kiln/include/kiln_kernel_abi.h",
              "kiln/include/dlpack.h", "kiln/include/kiln.hpp", "kiln/include/kiln_strings.h",
              "kiln/lib/libkiln_runtime.so", "kiln/lib/libkiln_runtime.a",
              "kiln/lib/libkiln_strings.so",
              "kiln/lib/pkgconfig/kiln.pc", "kiln/lib/cmake/Kiln/KilnConfig.cmake",
              "kiln/lib/cmake/Kiln/KilnConfigVersion.cmake"]:
        assert f in names, f"{f} missing from {wheel.name}"
    if shutil.which("javac") and shutil.which("jar"):
        assert "kiln/java/kiln.jar" in names
    meta = zipfile.ZipFile(wheel).read(f"kiln-{_version()}.dist-info/METADATA").decode()
    requires = {re.split(r"[<>=!~; \[]", line.split(":", 1)[1].strip())[0]
                for line in meta.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert requires == {"numpy", "llvmlite", "cffi", "onnx", "ml_dtypes"}


def _version() -> str:
    return re.search(r'^__version__ = "([^"]+)"', (ROOT / "compiler/kiln/__init__.py").read_text(), re.M).group(1)


def test_no_installed_file_refers_to_the_repository(env, wheel):
    # The build ran in a copy of the sources (wheel.parent.parent/src) and the checkout is
    # ROOT: neither path may be recorded in anything installed (headers, pkg-config, CMake
    # files, debug info of the libraries, ...).
    build_src = str(wheel.parent.parent / "src").encode()
    files = [p for p in (env.site / "kiln").rglob("*") if p.is_file()]
    files += [p for p in env.site.glob("kiln-*.dist-info/*")]
    assert len(files) > 100
    for p in files:
        data = p.read_bytes()
        for needle in (build_src, str(ROOT).encode()):
            assert needle not in data, f"{p.relative_to(env.site)} mentions {needle.decode()}"


def _wheel_digest(path: pathlib.Path) -> dict:
    """file name -> sha256 of its bytes; the jar by its entries (a jar records build times)."""
    out = {}
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            data = z.read(name)
            if name.endswith("RECORD"):
                continue   # hashes of the files compared here, plus the jar's bytes
            if name.endswith(".jar"):
                with zipfile.ZipFile(io.BytesIO(data)) as jar:
                    data = json.dumps(sorted((i.filename, i.CRC) for i in jar.infolist()
                                             if not i.filename.startswith("META-INF/"))).encode()
            out[name] = hashlib.sha256(data).hexdigest()
    return out


def test_sdist_unpacked_into_a_dirty_tree_builds_the_same_wheel(wheel, tmp_path):
    """The sdist holds what the wheel is built from, and nothing a working tree gathers changes
    the wheel: the sdist, unpacked and made dirty as a tree that ran `make`, an editable install
    and an earlier wheel build would be, builds the same wheel, file for file and byte for byte.
    (One wheel build for both checks: each build is most of this test's time.)"""
    pytest.importorskip("setuptools", minversion="64", reason="the sdist is made with this "
                        "environment's setuptools (PEP 517 build_sdist), which must be >= 64")
    pytest.importorskip("cffi", reason="setup.py's cffi_modules needs cffi to make the sdist")
    src = _copy_sources(tmp_path / "src")
    _run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
          "print(b.build_sdist(sys.argv[1]))", tmp_path / "sdist"], cwd=src)
    sdist = next((tmp_path / "sdist").glob("kiln-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        tar.extractall(tmp_path / "unpacked", filter="data")
    for f in ["setup.py", "pyproject.toml", "runtime_c/Makefile", "runtime_c/build_ffi.py",
              "runtime_c/include/kiln_runtime.h", "runtime_c/src/vm.c", "bindings/cpp/kiln.hpp",
              "bindings/java/Makefile", "bindings/java/src/main/java/ai/kiln/Native.java"]:
        assert f in names, f"{f} missing from {sdist.name}"
    assert not [n for n in names if n.endswith((".so", ".o", ".a", ".pyc"))]
    # The dirt: the extension, runtime_c/build, __pycache__, a stale build/lib with a module
    # since removed.
    tree = tmp_path / "unpacked" / sdist.name[:-len(".tar.gz")]
    pkg = tree / "compiler" / "kiln"
    (pkg / ("_ffi" + sysconfig.get_config_var("EXT_SUFFIX"))).write_bytes(b"stale extension")
    (pkg / "__pycache__").mkdir(exist_ok=True)
    (pkg / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"stale")
    (tree / "runtime_c" / "build").mkdir(exist_ok=True)
    (tree / "runtime_c" / "build" / "libkiln_runtime.so").write_bytes(b"stale runtime")
    (tree / "build" / "lib" / "kiln").mkdir(parents=True)
    (tree / "build" / "lib" / "kiln" / "removed_module.py").write_text("STALE = 1\n")
    rebuilt = _build_wheel(tree, tmp_path / "dist")
    assert rebuilt.name == wheel.name
    clean, other = _wheel_digest(wheel), _wheel_digest(rebuilt)
    assert sorted(other) == sorted(clean)
    assert [n for n in clean if clean[n] != other[n]] == []


def test_auditwheel_accepts_the_wheel(wheel):
    if shutil.which("auditwheel") is None:
        pytest.skip("auditwheel is not installed (pip install auditwheel to check manylinux)")
    out = _run(["auditwheel", "show", wheel], cwd=wheel.parent)
    assert "manylinux" in out, out


# ---- Python and the command line ------------------------------------------------------------
def test_readme_nn_flow_runs_from_the_installed_wheel(env):
    block = next(b for b in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
                 if "class MLP" in b)
    env.python(block + "\nassert kiln.__file__.startswith(%r), kiln.__file__\n" % str(env.site))
    assert (env.cwd / "mlp.so").is_file()


def test_version_and_libinfo(env):
    assert env.run(env.bin / "kiln", "--version").strip() == f"kiln {_version()}"
    out = env.python(textwrap.dedent("""
        import kiln, kiln.libinfo as li
        print(kiln.__version__)
        print(li.installed())
        print(li.include_dir()); print(li.lib_dir()); print(li.runtime_library("shared"))
        print(li.runtime_library("static"))
    """)).split()
    assert out[0] == _version() and out[1] == "True"
    pkg = env.site / "kiln"
    assert out[2:] == [str(pkg / "include"), str(pkg / "lib"), str(pkg / "lib/libkiln_runtime.so"),
                       str(pkg / "lib/libkiln_runtime.a")]
    assert env.config("--includedir") == [str(pkg / "include")]
    assert env.config("--cmakedir") == [str(pkg / "lib/cmake/Kiln")]


def test_cli_compiles_and_runs_an_onnx_model(env):
    env.python(textwrap.dedent("""
        import numpy as np, onnx
        from onnx import TensorProto, helper, numpy_helper
        rng = np.random.default_rng(0)
        w = rng.standard_normal((4, 6)).astype("float32")
        nodes = [helper.make_node("Gemm", ["x", "w"], ["g"], transB=1),
                 helper.make_node("Relu", ["g"], ["y"])]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
                                  initializer=[numpy_helper.from_array(w, "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 10
        onnx.save(model, "model.onnx")
        x = rng.standard_normal((3, 6)).astype("float32")
        np.save("x.npy", x)
        np.save("expected.npy", np.maximum(x @ w.T, 0))
    """))
    env.run(env.bin / "kiln", "compile", "model.onnx", "-o", "model.so", "-q")
    env.run(env.bin / "kiln", "run", "model.so", "--input", "x=x.npy", "-o", "y.npy")
    np.testing.assert_allclose(np.load(env.cwd / "y.npy"), np.load(env.cwd / "expected.npy"),
                               rtol=1e-5, atol=1e-6)


# ---- C, C++, Java against the installed package ---------------------------------------------
def test_static_model_in_a_c_program_with_kiln_config_flags(env, tiny, tmp_path):
    model_dir, expected = tiny
    (tmp_path / "app.c").write_text(C_PROGRAM)
    assert "kiln config" in (model_dir / "tiny.h").read_text()
    # Every header export_static writes (tiny.h and the typed bindings beside it) names
    # `kiln config`, never a folder of the repository.
    for header in list(model_dir.glob("*.h")) + list(model_dir.glob("*.hpp")):
        text = header.read_text()
        for repo_path in ("runtime_c", "bindings/cpp", "bindings/java", str(ROOT)):
            assert repo_path not in text, f"{header.name} mentions {repo_path}"
    cc = os.environ.get("CC", "cc")
    env.run(cc, "-std=c99", "-DSTATIC_MODEL", f"-I{model_dir}", "app.c", model_dir / "tiny.a",
            *env.config("--cflags", "--libs", "--static"), "-o", "app", cwd=tmp_path)
    np.testing.assert_allclose(_outputs(env.run(tmp_path / "app", cwd=tmp_path)), expected,
                               rtol=1e-5, atol=1e-6)


def test_c_program_with_the_shared_runtime_kiln_config_and_pkg_config(env, tiny, tmp_path):
    model_dir, expected = tiny
    (tmp_path / "app.c").write_text(C_PROGRAM)
    cc = os.environ.get("CC", "cc")
    # kiln config --libs records the library's folder as rpath: no LD_LIBRARY_PATH needed.
    env.run(cc, "-std=c99", "app.c", *env.config("--cflags", "--libs"), "-o", "app", cwd=tmp_path)
    np.testing.assert_allclose(_outputs(env.run(tmp_path / "app", model_dir / "tiny.so", cwd=tmp_path)),
                               expected, rtol=1e-5, atol=1e-6)
    if shutil.which("pkg-config") is None:
        pytest.skip("pkg-config is not installed; kiln.pc left unchecked")
    pc = {"PKG_CONFIG_PATH": env.config("--pkgconfigdir")[0]}
    assert env.run("pkg-config", "--modversion", "kiln", env=pc).strip() == _version()
    flags = env.run("pkg-config", "--cflags", "--libs", "kiln", env=pc).split()
    env.run(cc, "-std=c99", "app.c", *flags, "-o", "app_pc", cwd=tmp_path)
    out = env.run(tmp_path / "app_pc", model_dir / "tiny.so", cwd=tmp_path,
                  env={"LD_LIBRARY_PATH": env.config("--libdir")[0]})
    np.testing.assert_allclose(_outputs(out), expected, rtol=1e-5, atol=1e-6)


def test_string_model_in_a_c_program_with_the_installed_string_library(env, tmp_path):
    """A model with string operators, compiled by the installed `kiln compile`, run by a C
    program built with `kiln config` flags: init refuses until it loads the wheel's
    libkiln_strings.so and registers its functions (tests/onnx/strings_model_test.c checks the
    outputs)."""
    import onnx
    spec = importlib.util.spec_from_file_location("string_models", ROOT / "tests" / "onnx" / "string_models.py")
    string_models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(string_models)
    onnx.save(string_models.equal_and_concat_model(), tmp_path / "model.onnx")
    env.run(env.bin / "kiln", "compile", tmp_path / "model.onnx", "-o", tmp_path / "model.so")
    cc = os.environ.get("CC", "cc")
    env.run(cc, "-std=c99", ROOT / "tests" / "onnx" / "strings_model_test.c",
            *env.config("--cflags", "--libs"), "-ldl", "-o", "app", cwd=tmp_path)
    lib = pathlib.Path(env.config("--libdir")[0]) / "libkiln_strings.so"
    assert env.run(tmp_path / "app", tmp_path / "model.so", lib, cwd=tmp_path).strip() == "ALL OK"


def test_cpp_program_through_cmake_find_package(env, tiny, tmp_path):
    if shutil.which("cmake") is None or shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("needs cmake and a C++ compiler")
    model_dir, expected = tiny
    (tmp_path / "main.cpp").write_text(CPP_PROGRAM)
    (tmp_path / "CMakeLists.txt").write_text(CMAKE_LISTS)
    build = tmp_path / "build"
    env.run("cmake", "-S", tmp_path, "-B", build, f"-DKiln_DIR={env.config('--cmakedir')[0]}",
            cwd=tmp_path)
    env.run("cmake", "--build", build, cwd=tmp_path)
    out = env.run(build / "app", model_dir / "tiny.so", cwd=tmp_path)
    np.testing.assert_allclose(_outputs(out), expected, rtol=1e-5, atol=1e-6)


def test_java_program_with_only_the_packaged_jar(env, tiny, tmp_path):
    if not (shutil.which("javac") and shutil.which("java") and shutil.which("jar")):
        pytest.skip("needs a JDK (javac, jar, java); the wheel was built without kiln.jar")
    model_dir, expected = tiny
    jar = env.config("--jar")[0]
    (tmp_path / "Run.java").write_text(JAVA_PROGRAM)
    env.run("javac", "-cp", jar, "-d", tmp_path, tmp_path / "Run.java", cwd=tmp_path)
    # Only the jar on the class path, and no java.library.path: the JNI library comes from it.
    out = env.run("java", "-cp", f"{jar}{os.pathsep}{tmp_path}", "Run", model_dir / "tiny.so",
                  cwd=tmp_path, env={"LD_LIBRARY_PATH": ""})
    np.testing.assert_allclose(_outputs(out), expected, rtol=1e-5, atol=1e-6)
