"""DFT and STFT as matmuls with constant transform matrices.

A DFT of a fixed length is linear over the reals in the (real, imaginary) parts of its input,
so ``Y = re @ A + im @ B`` with ``A = f(I)`` and ``B = f(i I)``, ``f`` being numpy's fft, ifft
or irfft with ``n = dft_length`` (which also does the zero padding or truncation the spec
asks for) applied to the identity: float64 matrices, exact to rounding, built at import time.
STFT cuts the frames with one constant-index ``take``, weights them by the window and runs
the same DFT along the frame axis.
"""
from __future__ import annotations

import numpy as np

from .common import Unsupported, converter, dtype, norm_axis, static_shape


def _maps(m, n_fft, inverse, onesided):
    """Complex ``(m, K)`` matrices A, B: the transform of unit real and imaginary inputs."""
    def f(z):
        if not inverse:
            y = np.fft.fft(z, n=n_fft, axis=-1)
            return y[:, :n_fft // 2 + 1] if onesided else y
        return np.fft.irfft(z, n=n_fft, axis=-1) if onesided else np.fft.ifft(z, n=n_fft, axis=-1)
    eye = np.eye(m)
    return np.asarray(f(eye), np.complex128), np.asarray(f(1j * eye), np.complex128)


def _component(ctx, x, k):
    s = ctx.op("strided_slice", x, begin=(k,), end=(k + 1,), axes=(-1,))
    return ctx.op("squeeze", s, axis=(-1,))


def dft(ctx, x, axis, n_fft, inverse, onesided):
    """The DFT of ``x`` (..., 1 or 2 components last) along ``axis``: (..., K, 2), or for an
    inverse one-sided (real) transform (..., n_fft, 1)."""
    shp = static_shape(x)
    r = len(shp) - 1                       # rank without the component dim
    axis = norm_axis(axis, len(shp))
    if axis == r:
        raise Unsupported("the DFT axis cannot be the last (real, imaginary) dim")
    if shp[-1] not in (1, 2):
        raise Unsupported(f"the last dim must be 1 (real) or 2 (complex), got {shp[-1]}")
    a, b = _maps(shp[axis], n_fft, inverse, onesided)
    # float64 throughout, as numpy's fft: a float32 sum of n terms is off by ~n ulps of the
    # largest term, too much for outputs that should be (near) zero
    out_dt = dtype(x)
    if out_dt != "float64":
        x = ctx.op("cast", x, dtype="float64")
    perm = tuple(d for d in range(r) if d != axis) + (axis,)
    parts = [ctx.op("permute_dims", _component(ctx, x, k), axes=perm) for k in range(shp[-1])]
    mats = [a, b][:len(parts)]

    def project(take):                     # sum over the input parts of part @ take(matrix)
        y = None
        for p, mat in zip(parts, mats):
            t = ctx.op("matmul", p, ctx.const(take(mat)))
            y = t if y is None else ctx.op("add", y, t)
        return y
    outs = [project(np.real)]
    if not (inverse and onesided):
        outs.append(project(np.imag))
    y = ctx.op("concat", *[ctx.op("expand_dims", o, axis=r) for o in outs], axis=r)
    inv = tuple(int(i) for i in np.argsort(perm)) + (r,)
    y = ctx.op("permute_dims", y, axes=inv)
    return y if out_dt == "float64" else ctx.op("cast", y, dtype=out_dt)


def _int(ctx, e, what):
    return int(np.asarray(ctx.need_value(e, what)).reshape(-1)[0])


@converter("DFT", since=17)
def dft_(ctx, node, ins, attrs):
    """ONNX DFT (forward, inverse, one-sided rfft / irfft, dft_length padding)."""
    x = ins[0]
    if ctx.opset >= 20:
        axis = _int(ctx, ins[2], "axis") if len(ins) > 2 and ins[2] is not None else -2
    else:
        axis = attrs.get("axis", 1)
    axis = norm_axis(axis, len(static_shape(x)))
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    if len(ins) > 1 and ins[1] is not None:
        n_fft = _int(ctx, ins[1], "dft_length")
    else:
        n = static_shape(x)[axis]
        n_fft = 2 * (n - 1) if inverse and onesided else n
    return dft(ctx, x, axis, n_fft, inverse, onesided)


@converter("STFT", since=17)
def stft(ctx, node, ins, attrs):
    """Frames of the signal (batch, length, 1 or 2), windowed, DFT'd: (batch, frames, bins, 2)."""
    x, step = ins[0], _int(ctx, ins[1], "frame_step")
    window = ins[2] if len(ins) > 2 else None
    shp = static_shape(x)
    frame_length = _int(ctx, ins[3], "frame_length") if len(ins) > 3 and ins[3] is not None else None
    if frame_length is None:
        frame_length = static_shape(window)[0] if window is not None else shp[-2]
    win = static_shape(window)[0] if window is not None else frame_length
    n_frames = 1 + (shp[-2] - win) // step
    if n_frames < 1:
        raise Unsupported(f"a signal of {shp[-2]} samples holds no frame of {win}")
    idx = np.arange(n_frames, dtype=np.int64)[:, None] * step + np.arange(win, dtype=np.int64)[None, :]
    frames = ctx.op("take", x, ctx.const(idx), axis=len(shp) - 2)          # (..., frames, win, c)
    if window is not None:
        frames = ctx.op("multiply", frames, ctx.op("reshape", window, shape=(win, 1)))
    return dft(ctx, frames, len(shp) - 1, frame_length, False, bool(attrs.get("onesided", 1)))


@converter("MelWeightMatrix", since=17)
def mel_weight_matrix(ctx, node, ins, attrs):
    """The (dft_length // 2 + 1, num_mel_bins) triangular filter bank mapping a one-sided
    spectrum onto mel bins. Every input is a scalar that shapes the output, so the matrix is
    built at import (numpy, as the ONNX reference: band edges equally spaced in mel, floored
    to spectrum bins)."""
    what = "(it shapes the output)"
    mels, n_fft, rate = (_int(ctx, e, f"{name} {what}") for e, name in
                         zip(ins[:3], ("num_mel_bins", "dft_length", "sample_rate")))
    lo, hi = (float(np.asarray(ctx.need_value(e, f"{name} {what}")).reshape(-1)[0])
              for e, name in zip(ins[3:5], ("lower_edge_hertz", "upper_edge_hertz")))
    if mels < 1 or n_fft < 1 or rate < 1:
        raise Unsupported(f"num_mel_bins={mels}, dft_length={n_fft} and sample_rate={rate} must be positive")
    from ...ir import dtype as dt
    from .common import kiln_dtype
    out_dt = kiln_dtype(attrs.get("output_datatype", 1), "output_datatype: ")

    def to_mel(f):
        return 2595 * np.log1p(f / 700) / np.log(10)
    step = (to_mel(hi) - to_mel(lo)) / (mels + 2)       # the reference divides by mels + 2
    edges = 700 * np.expm1((np.arange(mels + 2) * step + to_mel(lo)) / 2595 * np.log(10))
    edges = (((n_fft + 1) * edges) // rate).astype(int)
    out = np.zeros((n_fft // 2 + 1, mels))
    for i in range(mels):
        left, center, right = edges[i:i + 3]
        if center == left:
            out[center, i] = 1
        else:
            out[left:center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / (right - center)
    return ctx.const(out.astype(dt.to_numpy(out_dt)))
