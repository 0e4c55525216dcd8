"""Fixtures for the end-to-end ONNX model tests: zoo models exported once per session into a
session temporary directory (helpers in onnx_e2e.py)."""
from __future__ import annotations

import pytest

import onnx_model_zoo as zoo


@pytest.fixture(scope="session")
def onnx_model_path(tmp_path_factory):
    """``onnx_model_path(name)`` -> path of the zoo model ``name`` exported as ONNX; each model
    is exported once per session."""
    pytest.importorskip("torch", reason="the zoo models are exported from PyTorch")
    root = tmp_path_factory.mktemp("onnx_models")
    cache = {}

    def get(name: str) -> str:
        if name not in cache:
            cache[name] = zoo.export(name, str(root / f"{name}.onnx"))
        return cache[name]
    return get
