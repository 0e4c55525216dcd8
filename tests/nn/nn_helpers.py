"""Helpers for the nn frontend tests: export a model, run the graph with the reference
interpreter, and compare with PyTorch given the same weights."""
import numpy as np
import pytest

from kiln import nn
from kiln.ir.graph_interp import interpret


def export_run(model, inputs, state=None, seed=0, method="forward"):
    """Export ``model`` for ``inputs`` (name -> numpy) and interpret it. Returns
    (result, state used, IRModule, param_spec)."""
    spec = {method: {k: nn.spec.Tensor(v.shape, str(v.dtype)) for k, v in inputs.items()}}
    mod, param_spec = model.export(spec)
    if state is None:
        state = model.init_params(seed)
    args = list(inputs.values()) + [state[name] for name, _ in param_spec]
    return interpret(mod[method], args), state, mod, param_spec


def torch_state(state):
    import torch
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}


def ops_of(func):
    """The operator names of a graph function's bindings, in order."""
    return [b.value.op if hasattr(b.value, "op") else type(b.value).__name__ for b in func.bindings()]


@pytest.fixture
def rng():
    return np.random.default_rng(0)
