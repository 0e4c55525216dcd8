"""The Winograd operators (winograd_input, winograd_gemm, winograd_output) and their transform
matrices: the matrices against the definition and Lavin's published F(4x4, 3x3) ones, the
numpy references chained against conv2d's, and each te definition against its reference."""
from fractions import Fraction

import numpy as np
import pytest

from kiln import ops
from kiln.ops import winograd

F = Fraction

# Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (2015), F(4x4, 3x3).
LAVIN_BT = [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]
LAVIN_G = [[F(1, 4), 0, 0], [F(-1, 6), F(-1, 6), F(-1, 6)], [F(-1, 6), F(1, 6), F(-1, 6)],
           [F(1, 24), F(1, 12), F(1, 6)], [F(1, 24), F(-1, 12), F(1, 6)], [0, 0, 1]]
LAVIN_AT = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]


def test_f4_matrices_are_lavins():
    at, g, bt = winograd.matrices(4)
    assert [list(r) for r in bt] == LAVIN_BT
    assert [list(r) for r in g] == LAVIN_G
    assert [list(r) for r in at] == LAVIN_AT


@pytest.mark.parametrize("m", sorted(winograd.POINTS))
def test_matrices_compute_correlation_exactly(m):
    """A^T ((G g) * (B^T d)) is y[i] = sum_k g[k] d[i + k], exactly (Fractions)."""
    at, g, bt = winograd.matrices(m)
    alpha = m + 2
    rng = np.random.default_rng(m)
    for _ in range(3):
        d = [F(int(v)) for v in rng.integers(-9, 10, alpha)]
        k = [F(int(v)) for v in rng.integers(-9, 10, 3)]
        gk = [sum(g[a][j] * k[j] for j in range(3)) for a in range(alpha)]
        bd = [sum(bt[a][j] * d[j] for j in range(alpha)) for a in range(alpha)]
        y = [sum(at[i][a] * gk[a] * bd[a] for a in range(alpha)) for i in range(m)]
        assert y == [sum(k[j] * d[i + j] for j in range(3)) for i in range(m)]


def test_matrices_reject_unknown_tile():
    with pytest.raises(ValueError, match="no interpolation points for output tile 3"):
        winograd.matrices(3)


def _decomposed(x, w, padding, m):
    """The three references chained: what conv_winograd computes."""
    out = ops.get("conv2d").reference(x, w, padding=padding)
    v = ops.get("winograd_input").reference(x, padding=padding, tile=m)
    u = winograd.transform_weight(w, m, 8)
    mm = ops.get("winograd_gemm").reference(v, u, out_channels=w.shape[0])
    return ops.get("winograd_output").reference(mm, out_size=out.shape[2:], tile=m), out


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("x_shape,o,padding", [
    ((1, 3, 7, 7), 5, 1), ((2, 13, 5, 9), 16, 0), ((1, 4, 1, 1), 6, 1),
    ((1, 8, 8, 8), 9, (1, 0, 2, 1)), ((1, 64, 14, 14), 32, 1)])
def test_decomposition_matches_conv2d(x_shape, o, padding, m, rand):
    x = rand(x_shape, seed=1)
    w = (rand((o, x_shape[1], 3, 3), seed=2) / np.sqrt(9 * x_shape[1])).astype("float32")
    got, want = _decomposed(x, w, padding, m)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())


def test_transform_weight_packs_panels(rand):
    w = rand((13, 3, 3, 3), seed=3)
    up = winograd.transform_weight(w, 4, 8)
    assert up.shape == (2, 6, 6, 3, 8) and up.dtype == np.float32
    assert not up[1, ..., 5:].any()            # the last panel's padding lanes are zero
    g = winograd.matrices_f64(4)[1]
    u = winograd.unpack_weight(up, 13)
    np.testing.assert_allclose(u[:, :, 1, 7], g @ w[7, 1].astype(np.float64) @ g.T, rtol=1e-6)


@pytest.mark.parametrize("x_shape,attrs", [
    ((1, 3, 5, 5), {"padding": 1, "tile": 4}), ((2, 2, 4, 6), {"padding": (0, 1), "tile": 2}),
    ((1, 5, 1, 1), {"padding": 1, "tile": 4})])
def test_winograd_input(x_shape, attrs, check_op, rand):
    check_op("winograd_input", [rand(x_shape, seed=4)], attrs, rtol=1e-5, atol=1e-4)


def test_winograd_gemm(check_op, rand):
    v = rand((4, 4, 5, 6), seed=5)
    u = rand((2, 4, 4, 6, 4), seed=6)
    check_op("winograd_gemm", [v, u], {"out_channels": 7}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m_shape,attrs", [
    ((6, 6, 4, 3), {"out_size": (7, 7), "tile": 4}),
    ((4, 4, 8, 2), {"out_size": (3, 4), "tile": 2}),
    ((6, 6, 2, 5), {"out_size": (1, 1), "tile": 4})])
def test_winograd_output(m_shape, attrs, check_op, rand):
    check_op("winograd_output", [rand(m_shape, seed=7)], attrs, rtol=1e-5, atol=1e-4)


def test_errors(typed, op_error):
    with op_error("winograd_input: tile=3 is not supported; expected one of [2, 4, 6]"):
        ops.call("winograd_input", typed((1, 3, 8, 8)), tile=3)
    with op_error("winograd_input: expects a 4-D NCHW input, got (3, 8, 8)"):
        ops.call("winograd_input", typed((3, 8, 8)))
    with op_error("winograd_input: a 3x3 window does not fit the padded input of (1, 3, 2, 2)"):
        ops.call("winograd_input", typed((1, 3, 2, 2)))
    with op_error("winograd_gemm: out_channels=20 does not fit u (2, 6, 6, 3, 8)"):
        ops.call("winograd_gemm", typed((6, 6, 4, 3)), typed((2, 6, 6, 3, 8)), out_channels=20)
    with op_error("winograd_gemm: v float32(6, 6, 4, 3) and u float32(2, 6, 6, 4, 8) do not fit"):
        ops.call("winograd_gemm", typed((6, 6, 4, 3)), typed((2, 6, 6, 4, 8)))
    with op_error("winograd_output: 5 tiles do not cover whole images of out_size (7, 7)"):
        ops.call("winograd_output", typed((6, 6, 5, 3)), out_size=(7, 7))
    with op_error("winograd_output: attribute out_size= is required"):
        ops.call("winograd_output", typed((6, 6, 4, 3)))
