"""codegen/opaque_dims.py: a kernel that sees a symbolic dim only inside expressions binds the
first as one unknown and computes the others from it (derived dims the runtime checks)."""
from __future__ import annotations

import numpy as np
from kiln import codegen
from kiln.ir import Var

from cg_irbuild import buf, nest, prim_func, realize, store


def test_second_whole_is_derived_from_the_first(build):
    n, i = Var("n"), Var("i")
    P, Q = buf("P", (n - 1,)), buf("Q", (n + 1,))
    # Q[i] = 1 for every i < n + 1: the body uses n only through Q's extent
    body = nest([(i, n + 1, "serial")], realize("Q", [("S", n + 1, i)], lambda vi: store(Q, 1.0, vi)))
    cm = codegen.compile_module(prim_func([P, Q], body))
    (info,) = cm.kernels
    assert info.sym_names == ["n - 1"] and info.params[0].shape == [-1]
    assert info.params[1].shape == [-2] and len(info.derived) == 1      # (n - 1) + 2
    lib = build(prim_func([P, Q], body))
    q = np.zeros(6, "float32")
    assert lib.call("main", np.zeros(4, "float32"), q) == 0
    np.testing.assert_array_equal(q, np.ones(6, "float32"))


def test_a_multiple_whole_solves_its_variable_by_floor_division(build):
    # X (h * 2,) in, Y (h * 2,) out; the body writes Y over h * 4 // 2 rows, h on its own
    # (as a schedule writes (h * 2 + 2) * 2 as h * 4 + 4): h = floor((h * 2) / 2)
    h, i = Var("h"), Var("i")
    X, Y = buf("X", (h * 2,)), buf("Y", (h * 2,))
    body = nest([(i, h * 4 // 2, "serial")], realize("Y", [("S", h * 2, i)], lambda vi: store(Y, 2.0, vi)))
    cm = codegen.compile_module(prim_func([X, Y], body))
    (info,) = cm.kernels
    assert info.sym_names == ["h * 2"]
    y = np.zeros(6, "float32")
    assert build(prim_func([X, Y], body)).call("main", np.zeros(6, "float32"), y) == 0
    np.testing.assert_array_equal(y, np.full(6, 2.0, "float32"))
