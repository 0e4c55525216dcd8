"""The catalogue of bad inputs (issue 17 item 6): every case of error_catalogue.CASES provoked
through each binding (Python in process; C and C++ built with AddressSanitizer + UBSan, so a
case that crashes or leaks fails; Java with -Xcheck:jni), each reporting the status and message
the catalogue expects, and docs/errors.md showing exactly what they report.

docs/errors.md is generated from the bindings' own output: after changing a message, rewrite it
with ``KILN_UPDATE_ERRORS_DOC=1 .venv/bin/python -m pytest tests/reliability/test_error_catalogue.py``.
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess

import pytest

from error_catalogue import BINDINGS, CASES, build_artifacts, run_python

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RUNTIME = ROOT / "runtime_c"
DOC = ROOT / "docs" / "errors.md"
ASAN = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="print_stacktrace=1")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, model_manifest):
    return build_artifacts(tmp_path_factory.mktemp("errors") / "artifacts", model_manifest)


def _native(cmd, timeout=120):
    run = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)
    assert run.returncode == 0, run.stdout + run.stderr[-5000:]
    assert "Sanitizer" not in run.stderr and "runtime error" not in run.stderr, run.stderr[-5000:]
    return run.stdout


@pytest.fixture(scope="module")
def asan_runtime(tmp_path_factory, runtime_make):
    archive = tmp_path_factory.mktemp("errors_asan") / "libkiln_runtime.a"
    runtime_make("asan", copy={"asan/libkiln_runtime.a": archive})
    return archive


def _output_c(artifacts, asan_runtime):
    exe = artifacts.parent / "errors_c"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-O1", *ASAN,
                    f"-I{RUNTIME / 'include'}", str(HERE / "errors_c.c"), str(asan_runtime),
                    "-o", str(exe), "-ldl", "-lpthread", "-lm"], check=True)
    return _native([str(exe), str(artifacts)])


def _output_cpp(artifacts, asan_runtime):
    exe = artifacts.parent / "errors_cpp"
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-g", "-O1", *ASAN,
                    f"-I{RUNTIME / 'include'}", f"-I{ROOT / 'bindings' / 'cpp'}",
                    str(HERE / "errors_cpp.cpp"), str(asan_runtime), "-o", str(exe),
                    "-ldl", "-lpthread", "-lm"], check=True)
    return _native([str(exe), str(artifacts)])


def _output_java(artifacts, java_build):
    out = artifacts.parent / "java"
    subprocess.run([str(java_build["javac"]), "--release", "11", "-Xlint:all", "-Werror", "-cp",
                    str(java_build["jar"]), "-d", str(out), str(HERE / "ErrorsJava.java")],
                   check=True, timeout=120)
    run = subprocess.run([str(java_build["java"]), "-Xcheck:jni", "-cp",
                          os.pathsep.join([str(java_build["jar"]), str(out)]),
                          f"-Djava.library.path={java_build['lib_dir']}", "ErrorsJava", str(artifacts)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "WARNING" not in run.stdout + run.stderr, run.stdout + run.stderr
    return run.stdout


@pytest.fixture(scope="module")
def output(request, artifacts, asan_runtime):
    """binding -> its runner's lines, parsed: {case name: (status, message)} in printed order;
    the artifacts' directory is shown as <dir>."""
    cache = {}

    def get(binding):
        if binding not in cache:
            if binding == "python":
                text = run_python(artifacts)
            elif binding == "c":
                text = _output_c(artifacts, asan_runtime)
            elif binding == "cpp":
                text = _output_cpp(artifacts, asan_runtime)
            else:
                text = _output_java(artifacts, request.getfixturevalue("java_build"))
            rows = {}
            # The feature the missing_cpu_feature model needs depends on the host's CPU.
            feature = (artifacts / "cpu_feature.txt").read_text()
            text = text.replace(f"CPU feature {feature},", "CPU feature <feature>,")
            for line in text.replace(str(artifacts), "<dir>").splitlines():
                name, status, message = line.split("\t", 2)
                assert name not in rows, f"{binding}: case {name} printed twice"
                rows[name] = (status, message)
            cache[binding] = rows
        return cache[binding]
    return get


def test_catalogue_has_at_least_30_distinct_cases():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)) and len(names) >= 30, names


@pytest.mark.parametrize("binding", BINDINGS)
def test_every_case_reports_its_error(binding, output):
    rows = output(binding)
    assert list(rows) == [c.name for c in CASES], "every case, in catalogue order"
    wrong = []
    for case in CASES:
        status, message = rows[case.name]
        want_status, want_text = case.expected(binding)
        if status != want_status or want_text not in message or not message:
            wrong.append(f"{case.name}: got {status!r} {message!r}, want {want_status!r} "
                         f"containing {want_text!r}")
    assert wrong == [], "\n".join(wrong)


_LANG = {"c": "C (`kiln_last_error()`)", "cpp": "C++ (`kiln::Error::what()`)",
         "python": "Python (`str(e)`)", "java": "Java (`getMessage()`)"}
_STATUS_LABEL = {"c": "status", "cpp": "`kiln::Error::code()`", "python": "`KilnError.status`",
                 "java": "`KilnException.getStatus()`"}


def _render(outputs) -> str:
    lines = [
        "# Bad inputs and what each binding says",
        "",
        "Generated by `tests/reliability/test_error_catalogue.py` from what the C, C++, Python and",
        "Java bindings actually report for each case (the test fails when this page and the",
        "bindings disagree; `KILN_UPDATE_ERRORS_DOC=1` rewrites it). The cases are",
        "`tests/reliability/error_catalogue.py`; the runners `errors_c.c`, `errors_cpp.cpp`,",
        "`ErrorsJava.java` and `run_python` provoke every case in one process (C and C++ under",
        "AddressSanitizer + UBSan: no case crashes or leaks).",
        "",
        "A runtime error is a status (`kiln_status_t`; its short name, `kiln_status_string`, is shown",
        "here) and a message: C returns the status and `kiln_last_error()` gives the message; C++",
        "throws `kiln::Error` (`code()`, `what()`); Python raises `kiln.KilnError` (`status`,",
        "`status_name`, `str(e)`); Java throws `ai.kiln.KilnException` (`getStatus()`,",
        "`getStatusName()`, `getMessage()`). An error a binding detects itself before calling the",
        "runtime is shown with its exception class instead of a status. *n/a*: the binding cannot",
        "express the input (why is given). `<dir>` is the directory of the test artifacts, and",
        "`<feature>` a CPU feature the machine lacks (`amx-tile` on an Intel Xeon without AMX);",
        "numbers (offsets, sizes, addresses) are from the machine that last wrote this page.",
        "",
        f"{len(CASES)} cases.",
        "",
    ]
    for i, case in enumerate(CASES, 1):
        lines += [f"## {i}. `{case.name}`: {case.what}", ""]
        groups = {}
        for b in ("c", "cpp", "python", "java"):
            groups.setdefault(outputs[b][case.name], []).append(b)
        for (status, message), bindings in groups.items():
            who = ", ".join(_LANG[b] for b in bindings)
            if status == "n/a":
                lines.append(f"- {who}: *n/a*: {message}")
            else:
                lines.append(f"- {who}: **{status}**: `{message}`")
        lines.append("")
    return "\n".join(lines)


def _numbers_masked(text):
    """The page with every number (and hex address) masked: the sizes and offsets in messages
    depend on the host's compiled model, the words must not."""
    return re.sub(r"0x[0-9a-f]+|\d+", "#", text)


def test_docs_errors_md_shows_what_the_bindings_report(output):
    outputs = {b: output(b) for b in BINDINGS}
    page = _render(outputs) + "\n"
    if os.environ.get("KILN_UPDATE_ERRORS_DOC"):
        DOC.write_text(page)
    assert DOC.exists(), f"{DOC} is missing; write it with KILN_UPDATE_ERRORS_DOC=1"
    assert _numbers_masked(DOC.read_text()) == _numbers_masked(page), (
        f"{DOC} differs from what the bindings report; rewrite it with KILN_UPDATE_ERRORS_DOC=1 "
        "(see this module's docstring) and review the diff")
