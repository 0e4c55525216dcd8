"""Errors of the torch.export importer name the FX node, its target op, where it came from and
what is unsupported."""
from __future__ import annotations

import pytest

from torch_helpers import torch

import kiln
from kiln.frontend.torch import TorchImportError, supported_ops

nn = torch.nn


class Inner(nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(x)      # no Kiln operator computes Bessel functions


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.block = Inner()

    def forward(self, x):
        return self.block(self.fc(x))


def test_unsupported_op_names_node_op_and_module():
    ep = torch.export.export(Outer().eval(), (torch.randn(2, 4),))
    with pytest.raises(TorchImportError) as info:
        kiln.frontend.from_exported_program(ep)
    msg = str(info.value)
    assert "node 'special_bessel_j0'" in msg
    assert "aten.special_bessel_j0.default" in msg
    assert "in block (Inner)" in msg                 # the submodule it came from
    assert "test_torch_errors.py:" in msg            # the source line
    assert "is not supported" in msg


def test_training_mode_batch_norm_is_refused():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    ep = torch.export.export(model, (torch.randn(2, 3, 8, 8),))
    with pytest.raises(TorchImportError, match=r"model\.eval\(\)"):
        kiln.frontend.from_exported_program(ep)


def test_unsupported_dtype_names_the_parameter():
    model = nn.Linear(4, 4).to(torch.bfloat16).eval()
    ep = torch.export.export(model, (torch.randn(2, 4, dtype=torch.bfloat16),))
    with pytest.raises(TorchImportError, match="bfloat16"):
        kiln.frontend.from_exported_program(ep)


def test_not_an_exported_program():
    with pytest.raises(TorchImportError, match="torch.export.export"):
        kiln.frontend.from_exported_program(nn.Linear(2, 2))


def test_data_dependent_indexing_names_the_node():
    class Masked(nn.Module):
        def forward(self, x, i):
            return x[:, i[0]:]          # a slice start read from a tensor: data dependent
    x, i = torch.randn(2, 6), torch.tensor([2])
    try:
        ep = torch.export.export(Masked().eval(), (x, i))
    except Exception as e:  # noqa: BLE001 - torch refuses some data-dependent programs itself
        pytest.skip(f"torch.export refuses this program itself: {type(e).__name__}")
    with pytest.raises(TorchImportError, match=r"node '\w+' \(aten\.\w+.*read from tensor data"):
        kiln.frontend.from_exported_program(ep)


def test_supported_ops_lists_the_issue_families():
    ops = set(supported_ops())
    for op in ("aten.convolution", "aten.max_pool2d_with_indices", "aten._native_batch_norm_legit_no_training",
               "aten.native_layer_norm", "aten.native_group_norm", "aten.addmm", "aten.bmm",
               "aten.scaled_dot_product_attention", "aten.embedding", "aten.hardswish", "aten.silu",
               "aten.gelu", "aten.view", "aten.permute", "aten.expand", "aten.slice", "aten.select",
               "aten.cat", "aten.split_with_sizes", "aten.index", "aten.where", "aten.masked_fill",
               "aten.arange", "aten.sum", "aten._softmax", "aten._log_softmax", "aten._to_copy"):
        assert op in ops, op


def test_run_time_boolean_mask_is_refused_by_name():
    class Positive(nn.Module):
        def forward(self, x):
            return x[x > 0]             # as many elements as are positive: known only at run time
    ep = torch.export.export(Positive().eval(), (torch.randn(3, 4),))
    with pytest.raises(TorchImportError, match=r"node 'index' \(aten\.index\.Tensor\).*mask computed at run time"):
        kiln.frontend.from_exported_program(ep)
