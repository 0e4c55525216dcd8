"""``kiln.nn`` and PyTorch weights: a PyTorch ``state_dict()`` loads into the kiln.nn model of the
same layers (Linear, Conv2d, BatchNorm2d, GroupNorm, LayerNorm, Embedding), and the compiled
model matches torch; a missing or mis-shaped key is an error naming it."""
from __future__ import annotations

import numpy as np
import pytest

from torch_helpers import perturb, torch

import kiln
from kiln import nn as knn

tnn = torch.nn


def pair(lib, F):
    class Net(lib.Module):
        def __init__(self):
            super().__init__()
            self.emb = lib.Embedding(10, 8)
            self.conv = lib.Conv2d(8, 12, 3, padding=1)
            self.bn = lib.BatchNorm2d(12)
            self.gn = lib.GroupNorm(3, 12)
            self.ln = lib.LayerNorm(12)
            self.fc = lib.Linear(12, 5)

        def forward(self, ids):
            x = self.emb(ids)                                  # (1, 16, 8)
            x = x.reshape(1, 4, 4, 8).permute(0, 3, 1, 2)      # (1, 8, 4, 4)
            x = self.gn(F.relu(self.bn(self.conv(x))))
            x = x.mean((2, 3))
            return self.fc(self.ln(x))
    return Net()


def test_torch_state_dict_runs_in_kiln_nn():
    tm = perturb(pair(tnn, torch.nn.functional)).eval()
    km = pair(knn, knn.functional)
    missing, unexpected = km.load_state_dict(tm.state_dict())     # num_batches_tracked is ignored
    assert missing == [] and unexpected == []
    mod, _ = km.export(spec={"forward": {"ids": knn.spec.Tensor((1, 16), "int64")}})
    mod = kiln.transform.bind_params("forward", km.state_dict())(mod)
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    ids = torch.randint(0, 10, (1, 16))
    with torch.no_grad():
        want = tm(ids).numpy()
    np.testing.assert_allclose(vm["forward"](ids.numpy()).numpy(), want, rtol=1e-4, atol=1e-4)


def test_missing_and_misshaped_keys_are_named():
    tm = pair(tnn, torch.nn.functional).eval()
    km = pair(knn, knn.functional)
    sd = tm.state_dict()
    del sd["bn.running_var"]
    with pytest.raises(KeyError, match=r"missing: bn\.running_var"):
        km.load_state_dict(sd)
    sd = tm.state_dict()
    sd["fc.weight"] = torch.zeros(5, 13)
    with pytest.raises(ValueError, match=r"fc\.weight: .*shape \(5, 13\), expected \(5, 12\)"):
        km.load_state_dict(sd)
