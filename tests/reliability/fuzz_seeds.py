"""Seed corpora and kernel libraries for the libFuzzer targets of runtime_c/fuzz (issue 17
item 1), all from real artifacts:

- fuzz_blob: the executable blobs of the models of reliability_models.py (MLP, CNN, ONNX If,
  symbolic n), of a model calling an external function, of an MLP compiled for CUDA (the
  optional CUDA section), and of the fixture executables of
  tests/runtime (every opcode, IF with private functions and FREE, derived dimensions); the
  kernel libraries they resolve against go into KILN_FUZZ_LIBS;
- fuzz_elf: those model .so files and the fixture kernel libraries, whole;
- fuzz_static: kernel tables of the fixture kernels in fuzz_static.c's input format, each
  followed by the blob of an executable over them.

    .venv/bin/python tests/reliability/fuzz_seeds.py OUT_DIR     # prints KILN_FUZZ_LIBS=...

writes OUT_DIR/corpus/<target>/ and OUT_DIR/libs/ (what `make fuzz` uses).
"""
from __future__ import annotations

import hashlib
import importlib.util
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RUNTIME = ROOT / "runtime_c"
TARGETS = ("fuzz_blob", "fuzz_elf", "fuzz_static")


def _module(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def blob_of(so: pathlib.Path) -> bytes:
    """The executable blob inside an exported model (magic KILNEXE, size at offset 16)."""
    data = so.read_bytes()
    at = data.index(b"KILNEXE\0")
    return data[at:at + int.from_bytes(data[at + 16:at + 24], "little")]


def _fixture_specs():
    """(fixture_spec, if_spec, derived_spec) of tests/runtime, over fixture_kernels.c."""
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    conftest = _module(ROOT / "tests" / "runtime" / "conftest.py", "kiln_tests_runtime_conftest")
    derived = _module(ROOT / "tests" / "runtime" / "test_derived_dims.py", "kiln_tests_derived_dims")
    return conftest._fixture_spec(), conftest._if_spec(), derived.derived_spec(bounds=[8, -1])


def _table(kernels) -> bytes:
    """A kernel table in fuzz_static.c's format: kernels = [(name index, num_sym, params,
    derived)], params = [(name index, code, bits, lanes, flags, shape)], derived = [(op, flags,
    a, b)]."""
    out = bytearray([0, len(kernels)])
    for name, num_sym, params, derived in kernels:
        out += bytes([name, len(params), num_sym, len(derived)])
        for pname, code, bits, lanes, flags, shape in params:
            out += bytes([pname, code, bits, lanes, len(shape), flags])
            out += bytes(d & 0xFF for d in shape)
        for op, flags, a, b in derived:
            out += bytes([op, flags, a & 0xFF, b & 0xFF])
    return bytes(out)


# fuzz_static.c's kNames: main 0, scale 1, concat 2, A 6, B 7 (the fixture kernels' own tables)
_MAIN = (0, 0, [(6, 2, 32, 1, 0, [8]), (7, 2, 32, 1, 1, [8])], [])
_SCALE = (1, 1, [(6, 2, 32, 1, 0, [-1]), (7, 2, 32, 1, 1, [-1])], [])
_CONCAT = (2, 2, [(6, 2, 32, 1, 0, [-1]), (7, 2, 32, 1, 0, [-2]), (8, 2, 32, 1, 1, [-3])],
           [(1, 0, 0, 1)])  # C: [m + n]


def write_seeds(out: pathlib.Path, model_dirs) -> dict:
    """Writes the corpora and libraries into ``out``; ``model_dirs``: directories holding a
    compiled model.so each. Returns {target: corpus dir} plus "libs": the KILN_FUZZ_LIBS value."""
    from kiln.executable.format import serialize

    corpus = {t: out / "corpus" / t for t in TARGETS}
    for d in corpus.values():
        d.mkdir(parents=True, exist_ok=True)
    libs_dir = out / "libs"
    libs_dir.mkdir(parents=True, exist_ok=True)

    def seed(target, data: bytes):
        (corpus[target] / hashlib.sha1(data).hexdigest()).write_bytes(data)

    fixture = {}
    for name, flags in (("fixture", []), ("derived", ["-DFIXTURE_DERIVED"])):
        fixture[name] = libs_dir / f"{name}.so"
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f"-I{RUNTIME / 'include'}", *flags,
                        str(ROOT / "tests" / "runtime" / "fixture_kernels.c"), "-o",
                        str(fixture[name]), "-lpthread"], check=True)
        seed("fuzz_elf", fixture[name].read_bytes())
    libs = [fixture["fixture"], fixture["derived"]]
    for i, d in enumerate(model_dirs):
        so = libs_dir / f"model{i}.so"
        shutil.copyfile(pathlib.Path(d) / "model.so", so)
        libs.append(so)
        seed("fuzz_blob", blob_of(so))
        seed("fuzz_elf", so.read_bytes())
    spec, if_spec, derived = _fixture_specs()
    for blob in (serialize(spec), serialize(if_spec)):
        seed("fuzz_blob", blob)
        seed("fuzz_static", _table([_MAIN, _SCALE]) + blob)
    seed("fuzz_blob", serialize(derived))
    seed("fuzz_static", _table([_CONCAT]) + serialize(derived))
    seed("fuzz_static", _table([_MAIN, _SCALE]))  # a table alone, no blob
    seed("fuzz_blob", cuda_blob())   # with the optional CUDA section, which this loader skips
    return {**corpus, "libs": ":".join(map(str, libs))}


def cuda_blob() -> bytes:
    """The blob of a small MLP compiled for target="cuda": PTX and launches in section 0x101
    (kiln.executable.cuda_section), no CPU kernels."""
    import kiln
    mlp = kiln.nn.Sequential(kiln.nn.Linear(8, 16), kiln.nn.ReLU(), kiln.nn.Linear(16, 2))
    mod, _ = mlp.export({"forward": {"x": kiln.nn.spec.Tensor(("n", 8), "float32")}})
    return kiln.compile(mod, target="cuda", pipeline="default").blob


def build_models(out: pathlib.Path):
    """The models of reliability_models.py plus one calling an external function, compiled
    into out/<name>/model.so; returns those directories."""
    sys.path.insert(0, str(HERE))
    import kiln
    import reliability_models
    from kiln.ir import FunctionBuilder, GraphVar, IRModule, TensorType, call_dps_packed

    dirs = [reliability_models.build(name, out / name).parent for name in reliability_models.MODELS]
    x = GraphVar("x", TensorType((8,), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        y = fb.emit_output(call_dps_packed("test.relu_shift", [x], TensorType((8,), "float32")))
    (out / "extern").mkdir(parents=True, exist_ok=True)
    kiln.compile(IRModule({"main": fb.finish(y)}), "llvm").export_library(str(out / "extern" / "model.so"))
    return dirs + [out / "extern"]


if __name__ == "__main__":
    target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "runtime_c/build/fuzz/seeds")
    result = write_seeds(target, build_models(target / "models"))
    print(f"KILN_FUZZ_LIBS={result['libs']}")
