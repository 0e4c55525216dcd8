"""Scripts that do not parse raise ScriptError naming the line, the source line, and what was
expected; for decorated code the line is the line in the user's file."""
import inspect
import sys

import pytest

import kiln
from kiln.script import ScriptError, T, parse

HEAD = '@T.prim_func\ndef main(A: T.Buffer((8,), "float32"), B: T.Buffer((8, 8), "float32")):\n'
IN_BLOCK = "    for i in range(8):\n        with T.block('B'):\n"

# (body after HEAD, line of the error, words the message must contain)
CASES = [
    (IN_BLOCK + "            vi = T.axis.spacial(8, i)\n", 5,
     "expected T.axis.spatial/reduce/remap or T.alloc_buffer, got T.axis.spacial(8, i)"),
    (IN_BLOCK + "            vi = i\n", 5, "expected T.axis.spatial/reduce/remap"),
    (IN_BLOCK + "            vi, vj = T.axis.remap('SS', [i, 3])\n", 5, "binds loop variables; 3 is not one"),
    (IN_BLOCK + "            vi = T.axis.remap('SQ', [i])\n", 5, "one kind letter"),
    (IN_BLOCK + "            T.reads(A[0])\n            T.reads(A[1])\n", 6, "T.reads(...) is given twice"),
    (IN_BLOCK + "            T.where(i)\n", 5, "expected a bool condition"),
    ("    for i in foo(8):\n        pass\n", 3, "expected range(...), T.serial/parallel"),
    ("    for i, j in T.grid(8):\n        pass\n", 3, "T.grid with 1 extents needs 1 loop variable"),
    ("    for i in T.thread_binding(8):\n        pass\n", 3, 'needs thread="threadIdx.x"'),
    ("    for i in T.thread_binding(8, thread='warp.x'):\n        pass\n", 3, "unknown thread axis 'warp.x'"),
    ("    for i in range(8):\n        pass\n    else:\n        pass\n", 3, "for ... else"),
    ("    A[0] = C[0]\n", 3, "undefined name 'C'"),
    ("    A[0, 1] = 1.0\n", 3, "buffer 'A' has 1 dimension(s), got 2 index(es)"),
    ("    A[0] = A\n", 3, "buffer 'A' used as a value"),
    ("    A[0.5] = 1.0\n", 3, "expected an integer expression"),
    ("    x = 3\n", 3, "scalar local variables are not supported"),
    ("    A[0:2] = 1.0\n", 3, "slices are only allowed in T.reads/T.writes"),
    ("    T.reads(A[0])\n", 3, "must be directly inside a with T.block"),
    ("    vi = T.axis.spatial(8, 0)\n", 3, "must be directly inside a with T.block"),
    ("    with T.init():\n        pass\n", 3, "with T.init(): must be directly inside"),
    ("    with open('f'):\n        pass\n", 3, 'expected with T.block("name")'),
    ("    A[0] = T.foo(1)\n", 3, "unknown function T.foo"),
    ("    A[0] = A[0] ** 2\n", 3, "use T.pow"),
    ("    A[0] = A[1]\n    A[0] = (1 // 2) / 3\n", 4, "'/' on integers is ambiguous"),
    ("    A[0] = T.exp(1.0, 2.0)\n", 3, "exp takes 1 argument(s), got 2"),
    ("    A[0] = T.Cast('float33', 1)\n", 3, "unknown dtype 'float33'"),
    ("    A[0] = T.int32()\n", 3, "declares a symbolic size"),
    ("    if A[0]:\n        pass\n", 3, "expected a bool condition"),
    ("    A[0] = T.block('x')\n", 3, "is a statement form, not an expression"),
    ("    T.exp(A[0])\n", 3, "wrap an expression statement in T.evaluate"),
    ("    while True:\n        pass\n", 3, "unsupported statement"),
    ("    for i in range(8)\n        pass\n", 3, "invalid Python syntax"),
    ("    n = T.int32()\n    n = T.int32()\n", 4, "'n' is already defined"),
    ("    T.func_attr({'a': 1})\n    T.func_attr({'b': 1})\n", 4, "T.func_attr(...) is given twice"),
]


@pytest.mark.parametrize("body,line,words", CASES, ids=[c[2][:40] for c in CASES])
def test_error_names_line_and_expectation(body, line, words):
    text = HEAD + body
    with pytest.raises(ScriptError) as info:
        parse(text)
    err = info.value
    assert err.lineno == line, str(err)
    assert str(err).startswith(f"line {line}: ")
    assert words in err.message
    assert err.source_line == text.splitlines()[line - 1]


@pytest.mark.parametrize("text,line,words", [
    ("def main(A: T.Buffer((8,))):\n    pass", 1, "needs a function-kind decorator (@T.prim_func or @R.function)"),
    ("@T.prim_func\ndef main(A):\n    pass", 2, "parameter 'A': expected an annotation T.Buffer"),
    ("@T.prim_func\ndef main(A: T.Buffer((n,), 'float32')):\n    pass", 2,
     "declare symbolic sizes at the top of the body: n = T.int32()"),
    ("@T.prim_func(fast=True)\ndef main():\n    pass", 2, "unknown arguments ['fast']"),
    ("@T.prim_func\ndef main(A: T.Buffer((8,), 'f32')):\n    pass", 2, "unknown dtype 'f32'"),
    ("class M:\n    pass", 1, "needs the decorator @kiln.script.ir_module"),
    ("@kiln.script.ir_module\nclass M:\n    x = 1", 3, "expected a decorated function in class 'M'"),
    ("x = 1", 1, "expected a @kiln.script.ir_module class or a @T.prim_func function"),
])
def test_module_level_errors(text, line, words):
    with pytest.raises(ScriptError) as info:
        parse(text)
    assert info.value.lineno == line and words in info.value.message


def test_decorator_errors_use_the_line_in_the_file():
    with pytest.raises(ScriptError) as info:
        @kiln.script.ir_module
        class Bad:
            @T.prim_func
            def main(A: T.Buffer((8,), "float32")):
                for i in range(8):
                    with T.block("A"):
                        vi = T.axis.spatial(8, i)
                        A[vi] = A[vi] * 2.0 + vj  # noqa: F821  (the error under test)
    here = inspect.currentframe().f_lineno
    err = info.value
    assert err.lineno == here - 1
    assert err.filename == __file__ and str(err).startswith(f"{__file__}, line {here - 1}: ")
    assert "undefined name 'vj'" in err.message and "A[vi] = A[vi] * 2.0 + vj" in str(err)


def test_script_error_is_a_value_error():
    assert issubclass(ScriptError, ValueError)


class _Outer:
    class Inner:   # a nested class: inspect names it _Outer.Inner
        pass


def _keep(cls):
    return cls


def test_class_sources_are_found_as_inspect_finds_them():
    """``Source.of`` reads a class's lines from one parse of its file (``_class_source``); they
    are inspect's, for classes at module level, nested, and defined in a function (where the
    class of the same name at module level must not be taken), decorated ones from their
    first decorator."""
    from kiln.script.parser import _class_source

    @_keep
    class _Outer:   # the same name as the module-level class above
        pass

    local, module_level = _Outer, globals()["_Outer"]
    for cls in (local, module_level, module_level.Inner):
        got = _class_source(cls)
        if sys.version_info >= (3, 13):
            assert got is None   # inspect is fast there (__firstlineno__): it is used as is
        else:
            assert got == inspect.getsourcelines(cls)
    lines, start = inspect.getsourcelines(local)
    assert lines[0].strip() == "@_keep" and lines[1].strip().startswith("class _Outer:")
    assert start != inspect.getsourcelines(module_level)[1]
