"""End-to-end: whole models exported from PyTorch to ONNX (opset 17, seeded random weights)
and real models shipped in PyPI packages, imported with ``kiln.frontend.from_onnx``, compiled
with the "default" pipeline and compared with onnxruntime in the same process."""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import onnx_model_zoo as zoo  # noqa: E402
from onnx_e2e import compile_onnx, run_kiln  # noqa: E402

RTOL = ATOL = 1e-4

# Compiling seven models and running them against onnxruntime takes about two minutes on two cores.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_cnn_matches_onnxruntime(name, onnx_model_path):
    path = onnx_model_path(name)
    vm = compile_onnx(path)
    sess = zoo.ort_session(path)
    rng = np.random.default_rng(1)
    for i in range(20):
        x = rng.standard_normal((1, 3, 224, 224)).astype("float32")
        got = run_kiln(vm, {"x": x})[0]
        want = sess.run(None, {"x": x})[0]
        assert got.shape == want.shape == (1, 1000)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{name}, input {i}")
        assert got.argmax() == want.argmax(), f"{name}, input {i}: top-1 differs"


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_cnn_scheduled_for_avx2_matches_onnxruntime(name, onnx_model_path):
    """The same models with the tiles, channel blocks and layouts of an AVX2 target (16 ymm
    registers), which every CPU here runs: the path an AMD Zen 3 host takes as its own."""
    path = onnx_model_path(name)
    vm = compile_onnx(path, target="llvm -mcpu=haswell")
    x = np.random.default_rng(2).standard_normal((1, 3, 224, 224)).astype("float32")
    got = run_kiln(vm, {"x": x})[0]
    want = zoo.ort_session(path).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=name)


def test_gpt2_decoder_matches_onnxruntime(onnx_model_path):
    path = onnx_model_path("gpt2")
    vm = compile_onnx(path)
    sess = zoo.ort_session(path)
    rng = np.random.default_rng(2)
    for i in range(5):
        idx = rng.integers(0, 1024, size=(1, 64), dtype=np.int64)
        got = run_kiln(vm, {"idx": idx})[0]
        want = sess.run(None, {"idx": idx})[0]
        assert got.shape == want.shape == (1, 64, 1024)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"gpt2, input {i}")
        assert (got.argmax(-1) == want.argmax(-1)).all(), f"gpt2, input {i}: next-token argmax differs"


# ---- real models shipped in PyPI wheels -----------------------------------------------------
def _package_file(package: str, *parts: str) -> str:
    """A data file inside an installed package, found without importing the package (its
    runtime dependencies, e.g. OpenCV for rapidocr, are not needed to read the model)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"package {package!r} is not installed (pip install --no-deps {package.replace('_', '-')})")
    path = os.path.join(spec.submodule_search_locations[0], *parts)
    if not os.path.exists(path):
        pytest.skip(f"{package!r} is installed but has no {os.path.join(*parts)}")
    return path


def _pinned(path: str):
    """The model at ``path`` with IR version <= 10, so onnxruntime 1.31 loads it."""
    import onnx
    m = onnx.load(path)
    m.ir_version = min(m.ir_version, 10)
    return m


def _compare_with_ort(model, inputs: dict, rtol=RTOL, atol=ATOL):
    import onnxruntime as ort
    vm = compile_onnx(model, {k: v.shape for k, v in inputs.items()})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    wants = sess.run(None, inputs)
    gots = run_kiln(vm, inputs)
    assert len(gots) == len(wants)
    for k, (got, want) in enumerate(zip(gots, wants)):
        assert got.shape == want.shape, f"output {k}"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"output {k}")


# PaddleOCR models in rapidocr-onnxruntime: text detection (DB, 1x3xHxW, H and W multiples of 32),
# direction classifier (1x3x48x192) and recogniser (1x3x48xW).
RAPIDOCR = {"det": ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 160, 160)),
            "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
            "rec": ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320))}


@pytest.mark.parametrize("which", list(RAPIDOCR))
def test_rapidocr_model(which):
    fname, shape = RAPIDOCR[which]
    model = _pinned(_package_file("rapidocr_onnxruntime", "models", fname))
    x = np.random.default_rng(3).uniform(-1, 1, shape).astype("float32")
    _compare_with_ort(model, {"x": x})


# Silero VAD (speech probability of an audio chunk, with a recurrent state carried from chunk
# to chunk): 512 samples at 16 kHz or 256 at 8 kHz. silero_vad.onnx picks the encoder with an
# If on the sample rate `sr`.
def _silero(fname):
    return _pinned(_package_file("silero_vad", "data", fname))


def _stream_against_ort(model, vm, params, chunk: int, srs):
    """Feed chunks through Kiln and onnxruntime, each carrying its own state; compare every
    output of every chunk. ``params``: the compiled function's inputs; ``srs``: the sample rate
    per chunk (None: the model takes no sr)."""
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    state_k = state_o = np.zeros((2, 1, 128), np.float32)
    for i, sr in enumerate(srs):
        x = (0.1 * rng.standard_normal((1, chunk))).astype("float32")
        feed = {"input": x, "state": state_o}
        if sr is not None:
            feed["sr"] = np.array(sr, np.int64)
        want = sess.run(None, feed)
        kfeed = dict(feed, state=state_k)
        got = run_kiln(vm, {k: kfeed[k] for k in params})
        assert len(got) == len(want), f"chunk {i}: {len(got)} outputs, onnxruntime gives {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape, f"chunk {i}, output {k}"
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"chunk {i} (sr {sr}), output {k}")
        state_k, state_o = got[1], want[1]


def test_silero_vad_16k_sample_rate_fixed_at_import():
    """``const_inputs`` fixes sr, so the If folds and only the 16 kHz encoder is compiled."""
    model = _silero("silero_vad.onnx")
    vm, ex = compile_onnx(model, {"input": (1, 512), "state": (2, 1, 128)}, const_inputs={"sr": 16000},
                          with_executable=True)
    assert [p.name for p in ex.spec.function("main").params] == ["input", "state"]
    assert not any(f.private for f in ex.spec.functions)
    _stream_against_ort(model, vm, ["input", "state"], 512, [16000] * 4)


def test_silero_vad_sample_rate_chosen_at_run_time():
    """sr stays an input: the If becomes call_if over two private branch functions, and one
    artifact serves both rates (256-sample chunks are valid for both encoders)."""
    model = _silero("silero_vad.onnx")
    vm, ex = compile_onnx(model, {"input": (1, 256), "state": (2, 1, 128)}, with_executable=True)
    assert [f.name for f in ex.spec.functions if f.private] == ["main_if0_then", "main_if0_else"]
    _stream_against_ort(model, vm, ["input", "state", "sr"], 256, [16000, 8000, 8000, 16000])


def test_silero_vad_openvino_variant():
    model = _silero("silero_vad_openvino_16k.onnx")
    vm = compile_onnx(model)
    _stream_against_ort(model, vm, ["input", "state"], 576, [None] * 4)
