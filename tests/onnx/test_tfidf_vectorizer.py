"""ONNX TfIdfVectorizer through Kiln against onnxruntime, in the modes and shapes the backend
node tests leave out: IDF and TFIDF with weights, trigrams with skips, int64 tokens, an
ngram_indexes permutation, a min_gram_length of 2 over a pool that also holds unigrams."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP, helper as h  # noqa: E402

import kiln  # noqa: E402
from kiln.frontend.onnx import from_onnx  # noqa: E402

RNG = np.random.default_rng(2)
POOL = dict(ngram_counts=[0, 3, 7], pool_int64s=[2, 3, 5, 2, 3, 5, 3, 3, 4, 2, 3, 5, 4],
            ngram_indexes=[6, 0, 1, 2, 3, 4, 5])  # 3 unigrams, 2 bigrams, 2 trigrams


@pytest.mark.parametrize("mode,lo,hi,skip,dtype", [
    ("TF", 1, 3, 2, np.int64), ("IDF", 1, 2, 1, np.int32), ("TFIDF", 2, 3, 3, np.int64),
    ("TFIDF", 1, 1, 4, np.int32)])
def test_tfidf_vectorizer(mode, lo, hi, skip, dtype):
    x = RNG.integers(2, 6, (3, 11)).astype(dtype)
    node = h.make_node("TfIdfVectorizer", ["x"], ["y"], mode=mode, min_gram_length=lo, max_gram_length=hi,
                       max_skip_count=skip, weights=[0.5 + 0.25 * i for i in range(7)], **POOL)
    elem = TP.INT64 if dtype == np.int64 else TP.INT32
    m = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", elem, list(x.shape))],
                                  [h.make_tensor_value_info("y", TP.FLOAT, None)]),
                     opset_imports=[h.make_opsetid("", 11)])
    m.ir_version = 8
    (want,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    mod, _ = from_onnx(m)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    got = vm["main"](x).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)
