"""torch.cond imported as Kiln's If (call_if over two private branch functions, as the ONNX
importer maps If), compiled and compared with torch eager for both branches; a predicate known
at import time (a buffer) inlines the taken branch."""
from __future__ import annotations

import numpy as np

from torch_helpers import compile_program, outputs, randomize, torch, torch_outputs

nn = torch.nn


class Gate(nn.Module):
    """Two outputs from a branch picked by the data: a linear layer (its weights operands of
    the branch) or an affine map; over a dynamic batch."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, flag):
        def then(x):
            y = self.lin(x).relu()
            return y, y.sum(1)

        def other(x):
            return x * 2 - 1, x.amax(1)
        y, s = torch.cond(flag.sum() > 0, then, other, (x,))
        return y + 1, s


def _ops(func):
    return [b.value.op for b in func.bindings() if hasattr(b.value, "op")]


def test_cond_runs_the_branch_the_data_picks():
    model = randomize(Gate()).eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    x = torch.randn(3, 4)
    ep = torch.export.export(model, (x, torch.tensor([1.0])), dynamic_shapes=({0: batch}, None))
    vm, mod, _ = compile_program(ep)
    assert "call_if" in _ops(mod["main"]) and {"main_cond0_then", "main_cond0_else"} <= set(mod)
    for n, flag in ((3, 1.0), (3, -1.0), (5, 2.0), (1, -3.0)):
        xn, f = torch.randn(n, 4), torch.tensor([flag])
        got, want = outputs(vm, xn, f), torch_outputs(model, xn, f)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


class BufferGate(nn.Module):
    def __init__(self, on):
        super().__init__()
        self.register_buffer("on", torch.tensor(on))

    def forward(self, x):
        return torch.cond(self.on, lambda x: x.sin(), lambda x: x.cos(), (x,))


def test_cond_on_a_known_predicate_is_inlined():
    for on in (True, False):
        model = BufferGate(on).eval()
        x = torch.randn(2, 3)
        ep = torch.export.export(model, (x,))
        vm, mod, _ = compile_program(ep)
        assert list(mod) == ["main"] and "call_if" not in _ops(mod["main"])
        np.testing.assert_allclose(outputs(vm, x)[0], torch_outputs(model, x)[0], rtol=1e-6, atol=1e-6)
