"""The catalogue of bad inputs (docs/errors.md, issue 17 item 6): every case, what each binding
must report for it, the artifacts the cases need, and the Python binding's runner.

Each binding has a runner that provokes every case in one process and prints one line per case,
``NAME<TAB>STATUS<TAB>MESSAGE``: STATUS is the runtime's status name (kiln_status_string, e.g.
"shape mismatch") for a runtime error, the exception's class for an error the binding raises
itself (e.g. "IllegalStateException"), "ok" when nothing failed (always a test failure), or
"n/a" when the binding cannot express the case (MESSAGE then says why). Runners:
errors_c.c (C), errors_cpp.cpp (C++), ErrorsJava.java (Java) and ``run_python`` below.
test_error_catalogue.py checks every line against CASES and docs/errors.md against the lines.
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
RUNTIME = HERE.parents[1] / "runtime_c"


class Case:
    """One bad input. ``status``: the runtime status name every binding reports, and ``text``
    a part of the message they all contain; ``override`` maps a binding ("python", "c", "cpp",
    "java") to its own (status, text) where it reports the error itself."""

    def __init__(self, name, what, status, text, **override):
        self.name, self.what, self.status, self.text, self.override = name, what, status, text, override

    def expected(self, binding):
        return self.override.get(binding, (self.status, self.text))


CASES = [
    # ---- loading a library -------------------------------------------------------------------
    Case("missing_file", "a path that does not exist", "i/o error", "missing.so"),
    Case("not_elf", "a file that is not an ELF object (text)", "invalid format", "too short for an ELF header"),
    Case("truncated_library", "a model .so cut to its first 1000 bytes", "invalid format", "truncated"),
    Case("not_a_kiln_library", "a shared library built by gcc, not Kiln", "invalid format",
         "kiln_library_info"),
    Case("foreign_isa", "a model .so for another CPU architecture (e_machine AArch64)",
         "invalid format", "AArch64"),
    Case("missing_cpu_feature", "a model .so compiled for a CPU feature this CPU lacks (the first "
         "of amx-tile, avx10.2, amx-complex, xop, fma4, sse4a it lacks, shown as `<feature>`)",
         "unsupported",
         "needs the CPU feature <feature>, which this CPU lacks"),
    Case("kernel_abi_version", "a kernel library of another kernel ABI version", "version mismatch",
         "ABI version 99"),
    # ---- the executable blob -----------------------------------------------------------------
    Case("newer_format", "an executable blob of a newer format version (99)", "version mismatch",
         "executable format version 99 is newer than this runtime supports"),
    Case("corrupt_blob", "an executable blob whose header's blob_size is wrong", "invalid format",
         "blob_size"),
    Case("no_executable", "load_executable on a kernel library with no executable", "not found",
         "load_executable"),
    Case("load_executable_args", "load_executable given an argument", "invalid argument",
         "load_executable: expected 0 arguments, got 1"),
    Case("misaligned_static_blob", "a static bundle whose blob is not 64-byte aligned",
         "invalid argument", "aligned",
         python=("n/a", ""), java=("n/a", "")),
    # ---- the VM ------------------------------------------------------------------------------
    Case("unknown_function", "a function the model does not have ('nope')", "not found", "nope"),
    Case("call_before_init", "forward before init", "invalid state",
         "forward: the virtual machine is not initialized; call init(device) first",
         python=("n/a", ""), ),
    Case("init_on_gpu", "init(cuda:0)", "unsupported", "init: device cuda:0 is not supported"),
    Case("init_bad_argument", "init given an int instead of a device", "invalid argument", "init:"),
    Case("missing_external", "init of a model whose external function 'test.not_registered' "
         "is not registered", "not found", "init: external function 'test.not_registered' is not registered"),
    Case("profile_unknown", "profile('nope', x)", "not found", "profile: no function 'nope'"),
    Case("profile_not_a_name", "profile(3)", "invalid argument", "profile: argument 0"),
    # ---- arguments ---------------------------------------------------------------------------
    Case("wrong_shape", "x of shape (1, 65) for (1, 64)", "shape mismatch",
         "forward: argument 0 'x' expected shape (1, 64), got (1, 65)"),
    Case("wrong_ndim", "x of shape (64,) for (1, 64)", "shape mismatch",
         "forward: argument 0 'x' expected shape (1, 64), got (64,)"),
    Case("wrong_dtype", "x of int32 for float32", "dtype mismatch",
         "forward: argument 0 'x' expected dtype float32, got int32"),
    Case("too_few_arguments", "forward()", "invalid argument", "forward: expected 1 argument, got 0"),
    Case("too_many_arguments", "forward(x, x)", "invalid argument", "forward: expected 1 argument, got 2"),
    Case("null_argument", "forward(null)", "invalid argument",
         "forward: argument 0 'x' expected a tensor, got null"),
    Case("int_argument", "forward(3)", "invalid argument",
         "forward: argument 0 'x' expected a tensor, got int"),
    Case("string_argument", "forward('x')", "invalid argument",
         "forward: argument 0 'x' expected a tensor, got string"),
    Case("non_contiguous", "x with strides (128, 2): every other element of a (1, 128) array",
         "invalid argument", "forward: argument 0 'x' is not contiguous",
         java=("n/a", "")),
    Case("argument_on_gpu", "x wrapped as memory of cuda:0", "device mismatch",
         "forward: argument 0 'x' expected device cpu, got cuda:0",
         python=("n/a", ""), java=("n/a", "")),
    Case("symbolic_over_bound", "x of shape (17, 64) where n is bounded by 16", "shape mismatch",
         "'n' = 17 exceeds its bound 16"),
    Case("symbolic_wrong_static_dim", "x of shape (5, 63) for (n, 64)", "shape mismatch",
         "expected shape (n, 64), got (5, 63)"),
    Case("condition_dtype", "an If model's bool condition given as float32", "dtype mismatch",
         "expected dtype bool, got float32"),
    Case("aliased_output", "a kernel called with one tensor as its input and its output",
         "invalid argument", "share memory, and the kernel writes one of them"),
    # ---- tensors and the registry ------------------------------------------------------------
    Case("tensor_negative_extent", "a tensor of shape (-1,)", "invalid argument", "-1",
         java=("IllegalArgumentException", "-1")),
    Case("tensor_size_overflow", "a float32 tensor of shape (2^40, 2^40)", "invalid argument",
         "overflow"),
    Case("tensor_on_gpu", "a new tensor on cuda:0", "unsupported", "cuda", java=("n/a", "")),
    Case("register_empty_name", "an external function registered under ''", "invalid argument",
         "non-empty", python=("TypeError", "non-empty")),
    Case("register_taken_name", "an external function registered twice without override",
         "invalid argument", "external function 'test.taken' is already registered"),
    Case("unregister_unknown", "unregistering a name never registered", "not found",
         "no external function 'test.never' is registered"),
    Case("use_after_close", "a call on a VM function whose handle was closed / moved from",
         "invalid state", "",
         c=("n/a", ""), python=("n/a", ""), java=("IllegalStateException", "closed")),
    # ---- the compiler ------------------------------------------------------------------------
    Case("malformed_onnx", "ONNX bytes that are not a protobuf", "ONNXImportError", "",
         c=("n/a", ""), cpp=("n/a", ""), java=("n/a", "")),
]

BINDINGS = ("python", "c", "cpp", "java")

# x86-64 features of which every CPU lacks at least one (AMX is Intel's, XOP and FMA4 AMD's
# Bulldozer family's), in the order tried for the missing_cpu_feature case.
LACKING_CANDIDATES = ("amx-tile", "avx10.2", "amx-complex", "xop", "fma4", "sse4a")  # as CASES says


def lacking_feature() -> str:
    """The first of LACKING_CANDIDATES this machine lacks (LLVM's reading of the host CPU)."""
    from kiln.codegen.target import host_target
    host = {e[1:] for e in host_target().features.split(",") if e.startswith("+")}
    return next(f for f in LACKING_CANDIDATES if f not in host)


# ---- artifacts ---------------------------------------------------------------------------------

def _patch(src: pathlib.Path, dst: pathlib.Path, at: int, value: bytes):
    data = bytearray(src.read_bytes())
    data[at:at + len(value)] = value
    dst.write_bytes(bytes(data))


def build_artifacts(out: pathlib.Path, model_manifest) -> pathlib.Path:
    """Writes every file the runners read into ``out`` and returns it:
    mlp.so (forward(x: float32[1, 64])), sym.so (forward(x: float32[n, 64]), n <= 16), if.so
    (main(flag: bool[], x: float32[2, 4])), extern.so (calls 'test.not_registered'),
    kernels.so (tests/runtime/fixture_kernels.c: kernel 'main'(A, B) writing B, no executable),
    bad_abi.so, not_elf.so, truncated.so, not_kiln.so, foreign_isa.so, newer_format.so,
    corrupt_blob.so, mlp_blob.bin (mlp.so's executable blob), malformed.onnx, and
    cpu_feature.so (the MLP compiled for x86-64-v2 plus ``lacking_feature()``, whose name is
    written to cpu_feature.txt)."""
    import kiln
    from kiln.ir import FunctionBuilder, GraphVar, IRModule, TensorType, call_dps_packed

    out.mkdir(parents=True, exist_ok=True)
    for name, model in (("mlp", "mlp"), ("sym", "symbolic"), ("if", "if")):
        shutil.copyfile(model_manifest(model).parent / "model.so", out / f"{name}.so")
    x = GraphVar("x", TensorType((4,), "float32"))
    fb = FunctionBuilder([x])
    with fb.dataflow():
        y = fb.emit_output(call_dps_packed("test.not_registered", [x], TensorType((4,), "float32")))
    kiln.compile(IRModule({"main": fb.finish(y)}), "llvm").export_library(str(out / "extern.so"))
    fixture = HERE.parent / "runtime" / "fixture_kernels.c"
    (out / "not_kiln.c").write_text("int not_kiln(int x) { return x + 1; }\n")
    for name, src, flags in (("kernels", fixture, []), ("bad_abi", fixture, ["-DFIXTURE_ABI_VERSION=99"]),
                             ("not_kiln", out / "not_kiln.c", [])):
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f"-I{RUNTIME / 'include'}", *flags, str(src),
                        "-o", str(out / f"{name}.so"), "-lpthread"], check=True)
    (out / "not_elf.so").write_text("this is a text file, not a shared library\n")
    (out / "malformed.onnx").write_bytes(b"\x08\x07\x12\xff\xff\xff\xff\x0fgarbage, not a protobuf")
    mlp = (out / "mlp.so").read_bytes()
    (out / "truncated.so").write_bytes(mlp[:1000])
    _patch(out / "mlp.so", out / "foreign_isa.so", 18, (183).to_bytes(2, "little"))  # EM_AARCH64
    at = mlp.index(b"KILNEXE\0")
    _patch(out / "mlp.so", out / "newer_format.so", at + 8, (99).to_bytes(4, "little"))
    size = int.from_bytes(mlp[at + 16:at + 24], "little")
    _patch(out / "mlp.so", out / "corrupt_blob.so", at + 16, (size + 64).to_bytes(8, "little"))
    (out / "mlp_blob.bin").write_bytes(mlp[at:at + size])
    import reliability_models
    feature = lacking_feature()
    mod, _ = reliability_models._module("mlp")
    kiln.compile(mod, f"llvm -mcpu=x86-64-v2 -mattr=+{feature}", pipeline="zero") \
        .export_library(str(out / "cpu_feature.so"))
    (out / "cpu_feature.txt").write_text(feature)
    return out


# ---- the Python binding's runner ---------------------------------------------------------------

def run_python(d: pathlib.Path) -> str:
    """Every case through the Python binding (kiln.runtime); the lines described above."""
    import kiln
    from kiln.runtime import KilnError, load_module
    from kiln.runtime.registry import register_func, unregister_func

    lines = []

    def case(name, fn):
        try:
            fn()
            lines.append(f"{name}\tok\t")
        except KilnError as e:
            lines.append(f"{name}\t{e.status_name}\t{e}")
        except Exception as e:  # the binding's own error
            lines.append(f"{name}\t{type(e).__name__}\t{e}")

    def na(name, why):
        lines.append(f"{name}\tn/a\t{why}")

    def vm(name):
        return load_module(str(d / name))["load_executable"]()

    def ready(name):
        m = vm(name)
        m["init"](kiln.cpu())
        return m

    x = np.zeros((1, 64), np.float32)
    mlp = ready("mlp.so")
    fwd = mlp["forward"]
    case("missing_file", lambda: load_module(str(d / "missing.so")))
    case("not_elf", lambda: load_module(str(d / "not_elf.so")))
    case("truncated_library", lambda: load_module(str(d / "truncated.so")))
    case("not_a_kiln_library", lambda: load_module(str(d / "not_kiln.so")))
    case("foreign_isa", lambda: load_module(str(d / "foreign_isa.so")))
    case("missing_cpu_feature", lambda: load_module(str(d / "cpu_feature.so")))
    case("kernel_abi_version", lambda: load_module(str(d / "bad_abi.so")))
    case("newer_format", lambda: vm("newer_format.so"))
    case("corrupt_blob", lambda: vm("corrupt_blob.so"))
    case("no_executable", lambda: load_module(str(d / "kernels.so"))["load_executable"])
    case("load_executable_args", lambda: load_module(str(d / "mlp.so"))["load_executable"](1))
    na("misaligned_static_blob", "static bundles are linked into C/C++ programs; Python loads .so files")
    case("unknown_function", lambda: mlp["nope"])
    na("call_before_init", "a VirtualMachine is initialised when it is made; the raw VM module "
       "(load_executable()) behaves as in C")
    case("init_on_gpu", lambda: vm("mlp.so")["init"](kiln.cuda(0)))
    case("init_bad_argument", lambda: vm("mlp.so")["init"](3))
    case("missing_external", lambda: vm("extern.so")["init"](kiln.cpu()))
    case("profile_unknown", lambda: mlp["profile"]("nope", x))
    case("profile_not_a_name", lambda: mlp["profile"](3))
    case("wrong_shape", lambda: fwd(np.zeros((1, 65), np.float32)))
    case("wrong_ndim", lambda: fwd(np.zeros((64,), np.float32)))
    case("wrong_dtype", lambda: fwd(np.zeros((1, 64), np.int32)))
    case("too_few_arguments", lambda: fwd())
    case("too_many_arguments", lambda: fwd(x, x))
    case("null_argument", lambda: fwd(None))
    case("int_argument", lambda: fwd(3))
    case("string_argument", lambda: fwd("x"))
    case("non_contiguous", lambda: fwd(np.zeros((1, 128), np.float32)[:, ::2]))
    na("argument_on_gpu", "Python makes tensors on the CPU only (kiln.nd.empty on cuda:0 is "
       "refused: tensor_on_gpu); a CUDA array would come through DLPack from a GPU framework")
    sym = ready("sym.so")["forward"]
    case("symbolic_over_bound", lambda: sym(np.zeros((17, 64), np.float32)))
    case("symbolic_wrong_static_dim", lambda: sym(np.zeros((5, 63), np.float32)))
    cond = ready("if.so")["main"]
    case("condition_dtype", lambda: cond(np.zeros((), np.float32), np.zeros((2, 4), np.float32)))
    a = kiln.nd.array(np.zeros(8, np.float32))
    case("aliased_output", lambda: load_module(str(d / "kernels.so"))["main"](a, a))
    case("tensor_negative_extent", lambda: kiln.nd.empty((-1,)))
    case("tensor_size_overflow", lambda: kiln.nd.empty((2 ** 40, 2 ** 40)))
    case("tensor_on_gpu", lambda: kiln.nd.empty((4,), device=kiln.cuda(0)))
    case("register_empty_name", lambda: register_func("", lambda *a: None))
    register_func("test.taken", lambda *a: None, override=True)
    try:
        case("register_taken_name", lambda: register_func("test.taken", lambda *a: None))
    finally:
        unregister_func("test.taken")
    case("unregister_unknown", lambda: unregister_func("test.never"))
    na("use_after_close", "Python handles have no close(): a runtime object lives while Python "
       "references it, so it cannot be used after release")

    def bad_onnx():
        from kiln.frontend.onnx import from_onnx
        from_onnx(str(d / "malformed.onnx"))
    case("malformed_onnx", bad_onnx)
    return "\n".join(lines) + "\n"
