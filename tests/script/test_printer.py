"""The printed form: expressions with minimal parentheses and typed constants, lone nodes (what
repr shows in error messages), and the exact text of a reduction module."""
import pytest

from kiln.ir import (Add, Block, BlockRealize, Buffer, BufferRegion, BufferStore, Cast, FloatImm,
                     For, IRModule, IntImm, IterVar, Max, Min, Not, PrimFunc, Range, Select, Var,
                     const, root_realize)
from kiln.ir.printer import to_text
from kiln.script import assert_roundtrip

i, j, k = Var("i"), Var("j"), Var("k")
x, y = Var("x", "float32"), Var("y", "float32")
b, c = Var("b", "bool"), Var("c", "bool")
n = Var("n", "int64")


@pytest.mark.parametrize("expr,text", [
    (i + j * k, "i + j * k"),
    ((i + j) * k, "(i + j) * k"),
    (i - (j - k), "i - (j - k)"),
    ((i - j) - k, "i - j - k"),
    (i // (j * k), "i // (j * k)"),
    (i * j // k % 4, "i * j // k % 4"),
    (i * -1, "i * -1"),
    (-i, "0 - i"),
    (i - IntImm(-2), "i - -2"),
    (x / (y + 1.0), "x / (y + T.float32(1))"),
    ((i < j) & (j <= k), "i < j and j <= k"),
    ((i < j) | (j > k) & (k >= i), "i < j or j > k and k >= i"),
    (((i < j) | (j > k)) & b, "(i < j or j > k) and b"),
    ((i < j) == (j != k), "(i < j) == (j != k)"),
    (Not(b & c), "not (b and c)"),
    (Not(b) & c, "not b and c"),
    (Not(i < j), "not i < j"),
    (n * 2 + 1, "n * T.int64(2) + T.int64(1)"),
    (x + 0.5, "x + T.float32(0.5)"),
    (const(True), "True"),
    (IntImm(7, "uint8"), "T.uint8(7)"),
    (FloatImm(2.0, "float16"), "T.float16(2)"),
    (FloatImm(float("nan")), 'T.float32("nan")'),
    (FloatImm(-0.0), "T.float32(-0.0)"),
    (FloatImm(1e-7, "float64"), "T.float64(1e-07)"),
    (Min(i, j) + Max(i, IntImm(3)), "T.min(i, j) + T.max(i, 3)"),
    (Select(b, x, y), "T.Select(b, x, y)"),
    (Cast("float16", x), 'T.Cast("float16", x)'),
    (Add(x, IntImm(1)), "T.Add(x, T.int32(1))"),
    (i + Var("i"), "i + i_1"),
    (Var("if") + Var("T"), "if_1 + T_1"),
])
def test_expression_text(expr, text):
    assert to_text(expr) == text == repr(expr)


def test_lone_nodes():
    A = Buffer("A", (n, 4), "float16", "local")
    assert repr(A) == 'A: T.Buffer((n, 4), "float16", scope="local")'
    assert repr(Range(0, 16)) == "Range(min=0, extent=16)"
    assert repr(IterVar(k, Range(2, 4), "reduce")) == "k = T.axis.reduce((2, 6))"
    assert repr(BufferRegion(A, (Range(i * 4, 4), Range(j, 1)))) == "A[i * 4:i * 4 + 4, j]"
    assert repr(BufferRegion(Buffer("S", ()), ())) == "S[()]"
    assert repr(BufferStore(A, FloatImm(0.0, "float16"), (i, 0))) == "A[i, 0] = T.float16(0)"
    loop = For(i, 0, 4, "serial", For(j, 0, 4, "vectorized", BufferStore(A, FloatImm(0.0, "float16"), (i, j))))
    assert repr(loop) == "for i in range(4):\n    for j in T.vectorized(4):\n        A[i, j] = T.float16(0)"


def test_reduction_module_text():
    A, B, C = Buffer("A", (16, 16)), Buffer("B", (16, 16)), Buffer("C", (16, 16))
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    block = Block("C", (IterVar(vi, Range.from_extent(16), "spatial"),
                        IterVar(vj, Range.from_extent(16), "spatial"),
                        IterVar(vk, Range.from_extent(16), "reduce")),
                  (BufferRegion.point(A, (vi, vk)), BufferRegion.point(B, (vk, vj))),
                  (BufferRegion.point(C, (vi, vj)),),
                  BufferStore(C, C[vi, vj] + A[vi, vk] * B[vk, vj], (vi, vj)),
                  init=BufferStore(C, const(0.0), (vi, vj)))
    nest = For(i, 0, 16, "serial", For(j, 0, 16, "serial", For(k, 0, 16, "serial",
                                                              BlockRealize((i, j, k), True, block))))
    mod = IRModule({"main": PrimFunc((A, B, C), root_realize(nest))})
    assert mod.script() == '''# from kiln.script import T

@kiln.script.ir_module
class Module:
    @T.prim_func
    def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
        for i, j, k in T.grid(16, 16, 16):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]'''
    assert_roundtrip(mod)


def test_grid_stops_where_an_extent_uses_an_outer_loop():
    A = Buffer("A", (8, 8))
    nest = For(i, 0, 8, "serial", For(j, 0, i + 1, "serial", BufferStore(A, FloatImm(1.0), (i, j))))
    func = PrimFunc((A,), root_realize(nest))
    assert "for i in range(8):\n        for j in range(i + 1):" in func.script()
    assert_roundtrip(func)


def test_malformed_node_falls_back_in_repr():
    weird = Add(IntImm(1), 2)  # a raw int child: malformed; repr must still not raise
    assert repr(weird).startswith("<kiln.ir.expr.Add object")
