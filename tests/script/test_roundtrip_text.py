"""Round trip of script text: canonical texts are fixed points of parse -> print, and every
parsed module prints, reparses to a structurally equal module, and prints the same again.

Each text below is exactly what the printer writes, so these also pin the printed syntax of
every construct: loop kinds and annotations, T.grid, T.axis.remap, reductions with T.init,
predicates, scratch buffers (root and block, local scope), if/elif/else, T.Select, T.Cast, every
intrinsic, every operator with minimal parentheses, dtypes, symbolic shapes, several functions,
attributes, root=False and explicit root blocks.
"""
import pytest

from kiln.script import assert_roundtrip, parse

H = "# from kiln.script import T\n\n@kiln.script.ir_module\nclass Module:\n"
CASES = {}

CASES['loop_kinds'] = H + '''    @T.prim_func
    def main(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        for i in T.parallel(2):
            for j in T.serial(2, 6, annotations={"pragma_auto_unroll": 16, "tag": "x"}):
                for k in T.unroll(2):
                    for l in T.vectorized(4):
                        with T.block("B"):
                            vi = T.axis.spatial(64, i * 32 + j * 8 + k * 4 + l)
                            T.reads(A[vi])
                            T.writes(B[vi])
                            B[vi] = A[vi]
        for bx in T.thread_binding(8, thread="blockIdx.x"):
            for tx in T.thread_binding(8, thread="threadIdx.x", annotations={"unroll": T.int32(1)}):
                with T.block("C"):
                    vi = T.axis.spatial(64, bx * 8 + tx)
                    T.reads(B[vi])
                    T.writes(A[vi])
                    A[vi] = B[vi] * T.float32(0.5)'''

CASES['predicate_split'] = H + '''    @T.prim_func
    def main(A: T.Buffer((10,), "float32"), B: T.Buffer((10,), "float32")):
        for i_0, i_1 in T.grid(3, 4):
            with T.block("B"):
                vi = T.axis.spatial(10, i_0 * 4 + i_1)
                T.where(i_0 * 4 + i_1 < 10)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] + T.float32(1)'''

CASES['alloc_scopes'] = H + '''    @T.prim_func
    def main(A: T.Buffer((4, 4), "float32"), C: T.Buffer((4, 4), "float32")):
        B = T.alloc_buffer((4, 4), "float32")
        for i, j in T.grid(4, 4):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                B[vi, vj] = A[vi, vj] * T.float32(2)
        for i in range(4):
            with T.block("C_outer"):
                vi = T.axis.spatial(4, i)
                T.reads(B[vi, 0:4])
                T.writes(C[vi, 0:4])
                T.block_attr({"meta": [1, 2.5, "s", True, None], "nested": {"k": (1,)}})
                X = T.alloc_buffer((4,), "float16", scope="local")
                for j in range(4):
                    with T.block("X"):
                        vj = T.axis.spatial(4, j)
                        T.reads(B[vi, vj])
                        T.writes(X[vj])
                        X[vj] = T.Cast("float16", B[vi, vj])
                for j in range(4):
                    with T.block("C"):
                        vj = T.axis.spatial(4, j)
                        T.reads(X[vj])
                        T.writes(C[vi, vj])
                        C[vi, vj] = T.Cast("float32", X[vj])'''

CASES['if_else_select'] = H + '''    @T.prim_func
    def main(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        for i in range(16):
            with T.block("B"):
                vi = T.axis.spatial(16, i)
                T.reads(A[vi])
                T.writes(B[vi])
                if vi < 4:
                    B[vi] = T.Select(A[vi] > T.float32(0), A[vi], T.float32(0))
                elif vi % 2 == 0 and not vi == 8 or vi // 3 != 1:
                    B[vi] = T.float32(-1.5)
                else:
                    if vi >= 10:
                        B[vi] = T.float32("inf")
                    B[vi] = T.float32("-inf")'''

CASES['intrinsics'] = H + '''    @T.prim_func
    def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8, 16), "float32")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi, 0:16])
                B[vi, 0] = T.exp(A[vi])
                B[vi, 1] = T.log(A[vi])
                B[vi, 2] = T.sqrt(A[vi])
                B[vi, 3] = T.rsqrt(A[vi])
                B[vi, 4] = T.tanh(A[vi])
                B[vi, 5] = T.sigmoid(A[vi])
                B[vi, 6] = T.erf(A[vi])
                B[vi, 7] = T.pow(A[vi], T.float32(2))
                B[vi, 8] = T.abs(A[vi])
                B[vi, 9] = T.floor(A[vi])
                B[vi, 10] = T.ceil(A[vi])
                B[vi, 11] = T.round(A[vi])
                B[vi, 12] = T.sin(A[vi])
                B[vi, 13] = T.cos(A[vi])
                B[vi, 14] = T.min(A[vi], T.float32(1)) + T.max(A[vi], T.float32(0.25))
                B[vi, 15] = T.exp(A[vi], dtype="float16")'''

CASES['binary_ops'] = H + '''    @T.prim_func
    def main(A: T.Buffer((8,), "int32"), F: T.Buffer((8,), "float32"), M: T.Buffer((8,), "bool")):
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[0:8], F[vi])
                T.writes(A[vi], F[vi], M[vi])
                A[vi] = (A[vi] + 1) * (A[vi] - 2) // 3 % 4 - (A[vi] - (vi - 1))
                A[vi] = A[vi] * -1 - -2 + (0 - vi)
                A[vi] = A[(vi + 1) % 8] // (vi + 1) * 2
                F[vi] = F[vi] / (F[vi] + T.float32(1)) - F[vi] * (F[vi] / T.float32(2))
                M[vi] = vi < 1 or vi <= 2 and (vi > 3 or vi >= 4) and (vi == 5) == (vi != 6)
                M[vi] = not (M[vi] and True) or not M[vi] and False'''

CASES['dtypes'] = H + '''    @T.prim_func
    def main(A: T.Buffer((T.int64(8),), "float16"), B: T.Buffer((T.int64(8),), "uint8"), C: T.Buffer((8,), "int64"), D: T.Buffer((8,), "bool"), E: T.Buffer((8,), "float64"), F: T.Buffer((8,), "int8")):
        for i in range(T.int64(8)):
            with T.block("B"):
                vi = T.axis.spatial(T.int64(8), i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = T.Cast("uint8", A[vi] * T.float16(2)) + T.uint8(3)
        for i in range(8):
            with T.block("C"):
                vi = T.axis.spatial(8, i)
                T.reads(C[vi], D[vi], E[vi])
                T.writes(C[vi], D[vi], E[vi], F[vi])
                C[vi] = C[vi] * T.int64(2) + T.Cast("int64", vi)
                D[vi] = D[vi] and T.Cast("int64", vi) < C[vi]
                E[vi] = E[vi] + T.float64(0.1)
                F[vi] = T.int8(-3)
        for i in T.serial(T.int64(2), T.int64(6)):
            with T.block("D"):
                vi = T.axis.spatial((T.int64(2), T.int64(6)), i)
                T.reads()
                T.writes(A[vi])
                A[vi] = T.float16(0)'''

CASES['symbolic'] = H + '''    @T.prim_func
    def main(A: T.Buffer((n, 4), "float32"), B: T.Buffer((n, 4), "float32"), m: T.int32):
        n = T.int32()
        for i, j in T.grid(n, 4):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                B[vi, vj] = A[vi, vj] + T.Cast("float32", m)
        for i in T.serial(m, m + 4):
            for j in T.serial(2, 2 + n):
                with T.block("C"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    T.reads(A[vi:vi + n, 0:4])
                    T.writes(B[0:n, vj])
                    B[0, 0] = A[0, 0]'''

CASES['multi_func'] = H + '''    kiln.script.module_attrs({"target": "llvm"})

    @T.prim_func
    def add_one(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        T.func_attr({"global_symbol": "add_one", "tir.noalias": True})
        for i in range(8):
            with T.block("B"):
                vi = T.axis.spatial(8, i)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] + T.float32(1)

    @T.prim_func(root=False)
    def lowered(A: T.Buffer((8,), "float32")):
        for i in range(8):
            A[i] = T.float32(0)
            T.evaluate(A[i])

    @T.prim_func
    def explicit_root(A: T.Buffer((), "float32")):
        with T.block("root"):
            T.reads()
            T.writes(A[()])
            T.block_attr({"note": 1})
            A[()] = T.float32(1)

    @T.prim_func
    def empty():
        pass'''

CASES['nested_reduce'] = H + '''    @T.prim_func
    def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16,), "float32")):
        for i_0 in range(4):
            with T.block("outer"):
                vo = T.axis.spatial(4, i_0)
                T.reads(A[vo * 4:vo * 4 + 4, 0:16])
                T.writes(B[vo * 4:vo * 4 + 4])
                for i_1, k in T.grid(4, 16):
                    with T.block("B"):
                        vi = T.axis.spatial(16, vo * 4 + i_1)
                        vk = T.axis.reduce(16, k)
                        T.reads(A[vi, vk])
                        T.writes(B[vi])
                        with T.init():
                            B[vi] = T.float32(0)
                        B[vi] = B[vi] + A[vi, vk]'''



@pytest.mark.parametrize("name", sorted(CASES))
def test_canonical_text_is_a_fixed_point(name):
    text = CASES[name]
    mod = parse(text)
    assert mod.script() == text
    assert_roundtrip(mod)


def test_single_function_text_gives_a_prim_func():
    text = CASES["predicate_split"]
    func_text = "\n".join(line[4:] for line in text.splitlines()[4:])
    func = parse(func_text)
    assert type(func).__name__ == "PrimFunc"
    assert_roundtrip(func)
    assert func.script().endswith(func_text)
