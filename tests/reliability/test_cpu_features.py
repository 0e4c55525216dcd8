"""Issue 17 item 2: a library records the CPU features its code needs, and on x86-64 carries a
check (kiln.codegen.cpu_features) that the runtime calls when it loads the library, so a model
compiled for a feature this machine lacks is refused with a message naming it instead of dying
of SIGILL at its first call. The C, C++ and Java bindings' messages for that case are checked by
test_error_catalogue.py (case missing_cpu_feature)."""
from __future__ import annotations

import ctypes
import pathlib
import platform
import subprocess

import numpy as np
import pytest

import kiln
from kiln.codegen import cpu_features as cf
from kiln.codegen.objcompile import compile_text
from kiln.codegen.target import _X86_256, _X86_512, host_target, parse_target

from error_catalogue import lacking_feature
import reliability_models

X86 = pytest.mark.skipif(platform.machine() != "x86_64",
                         reason="the CPUID check is generated for x86-64 hosts only")


def _host_features():
    return {e[1:]: e[0] == "+" for e in host_target().features.split(",") if e}


@X86
def test_each_features_check_agrees_with_llvms_reading_of_this_cpu(tmp_path):
    """One check function per feature of the table, linked into one library and called: it
    reports a feature missing exactly when LLVM's host detection (its own CPUID and XGETBV
    reading) says this machine lacks it."""
    names = list(cf.FEATURES)
    parts = ['target triple = "x86_64-unknown-linux-gnu"\n']
    for i, f in enumerate(names):
        parts.append(cf.check_function_ir([f], f"check{i}"))
        parts.append(f"define ptr @probe{i}() {{\n  %r = call ptr @check{i}()\n  ret ptr %r\n}}\n")
    tm = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64").create_target_machine()
    (tmp_path / "probe.o").write_bytes(compile_text("\n".join(parts), tm))
    subprocess.run(["cc", "-shared", "-o", str(tmp_path / "probe.so"), str(tmp_path / "probe.o")],
                   check=True)
    lib = ctypes.CDLL(str(tmp_path / "probe.so"))
    host = _host_features()
    wrong = []
    for i, f in enumerate(names):
        probe = getattr(lib, f"probe{i}")
        probe.restype = ctypes.c_char_p
        missing = probe()
        if (missing is None) != host.get(f, False):
            wrong.append(f"{f}: check says {missing!r}, LLVM says {host.get(f)}")
        elif missing is not None:
            assert missing.decode().startswith(f), (f, missing)
    assert wrong == []
    assert any(host.get(f) for f in names) and not all(host.get(f) for f in names)


def test_required_features_follow_the_cpu_and_mattr_as_llvm_does():
    haswell = cf.required_features("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell")
    assert haswell == ["sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "f16c",
                       "bmi", "bmi2", "lzcnt", "movbe"]
    # "-avx" takes away everything built on AVX; "+avx512bw" brings what it implies.
    no_avx = cf.required_features("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512 -mattr=-avx")
    assert no_avx == ["sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "bmi", "bmi2", "lzcnt", "movbe"]
    bw = cf.required_features("llvm -mtriple=x86_64-linux-gnu -mattr=+avx512bw")
    assert bw == ["sse3", "ssse3", "sse4.1", "sse4.2", "avx", "avx2", "fma", "f16c", "avx512f",
                  "avx512bw"]
    spr = cf.required_features("llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids")
    assert {"avx512fp16", "avx512bf16", "amx-tile", "amx-int8", "amx-bf16"} <= set(spr)
    assert cf.required_features("llvm -mtriple=x86_64-linux-gnu") == []
    # Every CPU the target module knows by name is in the table, AVX-512 ones with avx512f.
    for cpu in _X86_512 | _X86_256:
        assert cf.known_cpu(cpu), cpu
        feats = cf.required_features(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}")
        assert ("avx512f" in feats) == (cpu in _X86_512) and "avx" in feats, (cpu, feats)
    # Other architectures record their -mattr features and carry no check.
    assert cf.required_features("riscv64-linux-gnu -mattr=+v") == ["m", "a", "f", "d", "c", "v"]
    arm = cf.library_ir("aarch64-linux-gnu")
    assert cf.FEATURES_SYMBOL in arm and cf.CHECK_SYMBOL not in arm


@X86
def test_host_features_are_recorded_and_a_missing_one_refuses_the_model(tmp_path, capsys):
    """The MLP for this machine records its features and runs; for this machine plus a feature
    it lacks, loading fails (KILN_ERR_UNSUPPORTED) naming the feature, before any kernel runs;
    kiln inspect prints the recorded features."""
    mod, fn = reliability_models._module("mlp")
    ok = kiln.compile(mod, "llvm", pipeline="zero").export_library(str(tmp_path / "host.so"))
    host = _host_features()
    recorded = cf.read_library_features(ok)
    assert recorded == cf.required_features("llvm") and "sse4.2" in recorded
    assert all(host[f] for f in recorded)
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    vm = kiln.load_module(ok)["load_executable"]()
    vm["init"](kiln.cpu())
    want = vm[fn](x).numpy()

    feature = lacking_feature()
    bad = kiln.compile(mod, f"llvm -mattr=+{feature}", pipeline="zero").export_library(str(tmp_path / "bad.so"))
    assert cf.read_library_features(bad) == [f for f in cf.FEATURES if f in recorded or f in
                                             cf._closure(feature)]
    with pytest.raises(kiln.KilnError) as e:
        kiln.load_module(bad)
    assert e.value.status_name == "unsupported"
    assert f"needs the CPU feature {feature}, which this CPU lacks" in str(e.value)
    # The refusal left nothing behind: the host model still loads and gives the same numbers.
    vm2 = kiln.load_module(ok)["load_executable"]()
    vm2["init"](kiln.cpu())
    np.testing.assert_array_equal(vm2[fn](x).numpy(), want)

    from kiln.cli import main
    assert main(["inspect", str(bad)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("cpu:"))
    assert line.split(":", 1)[1].strip().split(", ") == cf.read_library_features(bad)


@X86
def test_static_bundle_refuses_a_missing_feature(tmp_path, runtime_make):
    """export_static's kiln_model_<name>_create checks the CPU first: KILN_ERR_UNSUPPORTED and
    the message in kiln_last_error() for a missing feature; the host's bundle creates and runs."""
    runtime = tmp_path / "libkiln_runtime.a"
    runtime_make("all", copy={"libkiln_runtime.a": runtime})
    mod, _ = reliability_models._module("mlp")
    feature = lacking_feature()
    app = tmp_path / "app.c"
    results = {}
    for name, target in (("good", "llvm"), ("bad", f"llvm -mattr=+{feature}")):
        kiln.compile(mod, target, pipeline="zero").export_static(tmp_path, name=name)
        app.write_text(f"""#include <stdio.h>
#include "{name}.h"
int main(void) {{
  kiln_module_t* m = NULL;
  kiln_status_t st = kiln_model_{name}_create(&m);
  printf("%s|%s\\n", kiln_status_string(st), st ? kiln_last_error() : "");
  kiln_module_release(m);
  return 0;
}}
""")
        exe = tmp_path / name
        include = pathlib.Path(__file__).resolve().parents[2] / "runtime_c" / "include"
        subprocess.run(["cc", "-std=c99", f"-I{tmp_path}", f"-I{include}", str(app),
                        str(tmp_path / f"{name}.a"), str(runtime), "-o", str(exe), "-ldl",
                        "-lpthread", "-lm"], check=True)
        results[name] = subprocess.run([str(exe)], capture_output=True, text=True,
                                       check=True).stdout.strip()
    assert results["good"] == "ok|"
    assert results["bad"].startswith("unsupported|this model 'bad' needs the CPU feature "
                                     f"{feature}, which this CPU lacks"), results["bad"]
    assert feature in (tmp_path / "bad.h").read_text()
