"""SEED_FLOWS.md section C, the Python statements: API.md section 1 (tests/test_api_graph.py runs
it as written), plus DLPack both ways with torch sharing memory and `to_dlpack()` returning a
capsule of the old protocol. The language-model call shapes from Python, C++ and Java are in
tests/deploy/test_section_c_calls.py (they need the built runtime and bindings)."""
from __future__ import annotations

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch", reason="section C exchanges tensors with torch (not installed)")


def test_from_dlpack_of_a_torch_tensor_shares_memory():
    x_torch = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    x_kiln = kiln.nd.from_dlpack(x_torch)
    assert x_kiln.shape == (2, 3) and x_kiln.dtype == "float32"
    x_torch[1, 2] = 42.0
    assert x_kiln.numpy()[1, 2] == 42.0


def test_torch_from_dlpack_of_a_kiln_array_shares_memory():
    x_kiln = kiln.nd.array(np.zeros((2, 3), "float32"))
    x_torch = torch.from_dlpack(x_kiln)
    x_torch[0, 1] = 7.0
    assert x_kiln.numpy()[0, 1] == 7.0


def test_to_dlpack_returns_a_legacy_capsule_sharing_memory():
    x_kiln = kiln.nd.array(np.arange(4, dtype="float32"))
    capsule = x_kiln.to_dlpack()
    assert type(capsule).__name__ == "PyCapsule"
    assert "dltensor" in repr(capsule) and "dltensor_versioned" not in repr(capsule)
    x_torch = torch.utils.dlpack.from_dlpack(capsule)
    x_torch[3] = -1.0
    np.testing.assert_array_equal(x_kiln.numpy(), [0, 1, 2, -1])


def test_repr_shows_values_like_numpy():
    a = kiln.nd.array(np.arange(3, dtype="float32"))
    assert str(a) == "[0. 1. 2.]"
    assert repr(a) == "kiln.nd.array([0., 1., 2.], dtype=float32)"
    m = kiln.nd.array(np.arange(4, dtype="int32").reshape(2, 2))
    assert repr(m) == "kiln.nd.array([[0, 1],\n               [2, 3]], dtype=int32)"
