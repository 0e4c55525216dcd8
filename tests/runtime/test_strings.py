"""libkiln_strings.so (runtime_c/strings): string tensors and the ONNX string kernels, called
from Python through kiln.runtime.strings, checked against the ONNX node tests' own inputs and
expected outputs (docs/strings.md). The node tests themselves run compiled, through the VM and
the functions libkiln_strings registers, in tests/onnx (test_onnx_backend.py, test_strings_e2e.py)."""
from __future__ import annotations

import os
import pathlib
import struct
import subprocess
import sys

import numpy as np
import pytest

from kiln.runtime.strings import StringError, StringLibrary, pack, unpack


@pytest.fixture(scope="module")
def lib(runtime_make, tmp_path_factory):
    out = tmp_path_factory.mktemp("strings")
    runtime_make("strings", copy={"libkiln_strings.so": out / "libkiln_strings.so",
                                  "libkiln_runtime.so": out / "libkiln_runtime.so"})
    return StringLibrary(str(out / "libkiln_strings.so"))


def test_pack_unpack_round_trip():
    a = np.array([["", "a"], ["ß漢字", "x\ty"]])   # numpy 'U': ONNX's runner passes these too
    block = pack(a)
    assert unpack(block, a.shape).tolist() == a.tolist()
    assert unpack(pack(np.array(["q"], dtype=object)), (1,)).dtype == object
    with pytest.raises(TypeError, match="element 1 is bytes"):
        pack(np.array(["a", b"b"], dtype=object))


def test_validate_accepts_packed_and_refuses_bad_blocks(lib):
    good = pack(np.array(["ab", "ü"]))
    lib.validate(good, 2)
    lib.validate(b"", 0)
    with pytest.raises(StringError, match="2 elements need 32 bytes of records, the block has 16"):
        lib.validate(good[:16], 2)
    bad_offset = struct.pack("<QQQQ", 32, 2, 30, 2) + b"abxx"    # element 1 inside the records
    with pytest.raises(StringError, match=r"element 1 \(offset 30, length 2\) lies outside"):
        lib.validate(bad_offset, 2)
    past_end = struct.pack("<QQ", 16, 5) + b"abc"
    with pytest.raises(StringError, match=r"element 0 \(offset 16, length 5\) lies outside"):
        lib.validate(past_end, 1)
    not_utf8 = struct.pack("<QQ", 16, 3) + b"a\xc3("
    with pytest.raises(StringError, match=r"element 0 is not UTF-8 \(byte 1 of it, 0xc3\)"):
        lib.validate(not_utf8, 1)
    surrogate = struct.pack("<QQ", 16, 3) + "\ud800".encode("utf-8", "surrogatepass")
    with pytest.raises(StringError, match="not UTF-8"):
        lib.validate(surrogate, 1)


def test_regex_translation_and_refusals(lib):
    assert lib.regex_translate(r"[\w.\-]+\d") == "^([[:alnum:]_.-]+[[:digit:]])$"
    for pattern, what in [(r"a+?", "lazy quantifier"), (r"(?i)abc", r"\(\?\.\.\.\) group"),
                          (r"\p{Greek}", r"Unicode class \(\\p\)"), (r"(a)\1", "back-reference"),
                          (r"\Aabc", r"escape \(\\A")]:
        with pytest.raises(StringError, match=what):
            lib.regex_full_match(np.array(["abc"]), pattern)


def test_kernels_on_edge_cases(lib):
    assert lib.concat(np.array([["a"], ["b"]]), np.array(["x", "yz"])).tolist() == [["ax", "ayz"], ["bx", "byz"]]
    assert lib.equal(np.array(["é", "e"]), np.array(["é"])).tolist() == [True, False]
    assert lib.take(np.array(["zero", "one"]), [1, -1, 0], default="?").tolist() == ["one", "?", "zero"]
    with pytest.raises(StringError, match="index 2 of element 0 >= 2 strings"):
        lib.take(np.array(["zero", "one"]), [2])
    tokens, n = lib.split(np.array(["a,,b", ""]), ",")
    assert tokens.tolist() == [["a", "", "b"], ["", "", ""]] and n.tolist() == [3, 1]


def _string_cases():
    # The node cases pickled once per clone for every worker (tests/onnx/node_cases.py): built
    # here, they cost each pytest process 5-8 s of collection.
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "onnx"))
    from node_cases import load_node_cases
    cases = load_node_cases()
    ops = ("Equal", "StringConcat", "RegexFullMatch", "StringNormalizer", "StringSplit", "LabelEncoder")
    return [c for c in cases if c.model.graph.node[0].op_type in ops
            and any(i.type.tensor_type.elem_type == 8 for i in c.model.graph.input)]


def _attrs(node):
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _run(lib, node, inputs):
    """The node's outputs computed by the string kernels (the attributes read as ONNX defines)."""
    from onnx import numpy_helper
    op, at = node.op_type, _attrs(node)
    dec = [s.decode() if isinstance(s, bytes) else s for s in at.get("stopwords", [])]
    if op == "Equal":
        return [lib.equal(*inputs)]
    if op == "StringConcat":
        return [lib.concat(*inputs)]
    if op == "RegexFullMatch":
        return [lib.regex_full_match(inputs[0], at["pattern"].decode())]
    if op == "StringNormalizer":
        return [lib.normalize(inputs[0], at.get("case_change_action", b"NONE").decode(),
                              at.get("is_case_sensitive", 0), dec)]
    if op == "StringSplit":
        delim = at["delimiter"].decode() if "delimiter" in at else None
        return list(lib.split(inputs[0], delim, at.get("maxsplit")))
    if op == "LabelEncoder":
        keys = (numpy_helper.to_array(at["keys_tensor"]) if "keys_tensor" in at
                else np.array([k.decode() for k in at["keys_strings"]], dtype=object))
        idx = lib.index(inputs[0], keys.astype(object))
        if "values_tensor" in at:
            values = numpy_helper.to_array(at["values_tensor"])
            default = numpy_helper.to_array(at["default_tensor"]).reshape(-1)[0]
        else:
            values, default = np.array(at["values_int64s"], np.int64), at.get("default_int64", -1)
        return [np.where(idx >= 0, values[np.maximum(idx, 0)], default).astype(values.dtype)]
    raise AssertionError(op)


pytest.importorskip("onnx")
CASES = _string_cases()


def test_every_string_node_test_is_covered():
    assert len(CASES) == 26, [c.name for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_onnx_string_node_case(lib, case):
    node = case.model.graph.node[0]
    for inputs, expected in case.data_sets:
        got = _run(lib, node, inputs)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == e.shape, (g.shape, e.shape)
            assert g.dtype.kind == ("O" if e.dtype.kind in "OU" else e.dtype.kind)
            assert g.tolist() == e.tolist()


def test_blocks_under_sanitizer(runtime_make, tmp_path):
    """strings_test.c: randomly corrupted blocks are refused by kiln_str_validate or read by
    every kernel without a memory error (AddressSanitizer + UBSan)."""
    here = pathlib.Path(__file__).resolve().parent
    runtime = here.parents[1] / "runtime_c"
    archive = tmp_path / "libkiln_runtime.a"
    runtime_make("asan", copy={"asan/libkiln_runtime.a": archive})
    exe = tmp_path / "strings_test"
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-O1", *flags,
                    f"-I{runtime / 'include'}", str(here / "strings_test.c"),
                    str(runtime / "strings" / "kiln_strings.c"), str(runtime / "strings" / "kiln_strings_vm.c"),
                    str(archive), "-o", str(exe),
                    "-ldl", "-lpthread", "-lm"], check=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1"))
    assert run.returncode == 0 and run.stdout.strip() == "ALL OK", run.stdout + run.stderr
    assert "Sanitizer" not in run.stderr, run.stderr
