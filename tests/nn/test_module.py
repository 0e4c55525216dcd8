"""Module, Parameter and containers: registration, naming, weights."""
import numpy as np
import pytest

from kiln import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 2, bias=False)
        self.scale = nn.Parameter((2,))

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


def test_registration_order_and_names():
    m = Block()
    assert [n for n, _ in m.named_parameters()] == ["scale", "fc1.weight", "fc1.bias", "fc2.weight"]
    assert [n for n, _ in m.named_modules()] == ["", "fc1", "act", "fc2"]
    assert [n for n, _ in m.named_children()] == ["fc1", "act", "fc2"]
    assert m.fc2.bias is None
    assert m.fc1.weight.shape == (8, 4) and m.fc1.weight.dtype == "float32"
    assert len(list(m.parameters())) == 4


def test_reassign_and_delete():
    m = Block()
    m.fc1 = nn.Linear(4, 8, bias=False)
    assert "fc1.bias" not in dict(m.named_parameters())
    m.fc2 = None
    assert [n for n, _ in m.named_children()] == ["fc1", "act"]
    with pytest.raises(TypeError, match="holds a Parameter"):
        m.scale = 3.0
    del m.scale
    assert "scale" not in dict(m.named_parameters())


def test_assign_before_init_is_clear():
    class Bad(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)
    with pytest.raises(AttributeError, match="super\\(\\).__init__\\(\\)"):
        Bad()


def test_shared_parameter_listed_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight
    assert [n for n, _ in Tied().named_parameters()] == ["emb.weight"]


def test_init_params_deterministic_and_in_order():
    m = Block()
    a, b = m.init_params(seed=1), m.init_params(seed=1)
    assert list(a) == [n for n, _ in m.named_parameters()]
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        assert a[k].dtype == np.float32 and a[k].shape == dict(m.named_parameters())[k].shape
    assert not np.array_equal(a["fc1.weight"], m.init_params(seed=2)["fc1.weight"])
    # PyTorch's default bound for Linear: 1/sqrt(in_features)
    assert np.abs(a["fc1.weight"]).max() <= 0.5
    norms = nn.LayerNorm(3).init_params()
    np.testing.assert_array_equal(norms["weight"], np.ones(3, "float32"))
    np.testing.assert_array_equal(norms["bias"], np.zeros(3, "float32"))


def test_state_dict_round_trip():
    m = Block()
    with pytest.raises(ValueError, match="without data: scale, fc1.weight"):
        m.state_dict()
    values = m.init_params(0)
    assert m.load_state_dict(values) == ([], [])
    sd = m.state_dict()
    assert list(sd) == list(values)
    np.testing.assert_array_equal(sd["fc1.weight"], values["fc1.weight"])


def test_load_state_dict_errors():
    m = Block()
    values = m.init_params(0)
    bad = dict(values)
    bad["fc1.weight"] = np.zeros((4, 8), "float32")
    with pytest.raises(ValueError, match=r"fc1.weight: .*shape \(4, 8\), expected \(8, 4\)"):
        m.load_state_dict(bad)
    missing = {k: v for k, v in values.items() if k != "scale"}
    missing["extra.weight"] = np.zeros(1)
    with pytest.raises(KeyError, match="missing: scale; unexpected: extra.weight"):
        m.load_state_dict(missing)
    assert m.load_state_dict(missing, strict=False) == (["scale"], ["extra.weight"])
    with pytest.raises(ValueError, match="dtype int32, expected float32"):
        m.load_state_dict({**values, "scale": np.zeros(2, "int32")})
    # float64 arrays are cast (same kind), as torch tensors' numpy would be
    m.load_state_dict({**values, "scale": np.ones(2)})
    assert m.scale.data.dtype == np.float32


def test_load_torch_state_dict_with_batchnorm_counter():
    torch = pytest.importorskip("torch")
    tm = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    km = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    assert "1.num_batches_tracked" in tm.state_dict()
    km.load_state_dict(tm.state_dict())  # tensors accepted, the counter ignored
    np.testing.assert_array_equal(km[0].weight.data, tm[0].weight.detach().numpy())
    assert [n for n, _ in km.named_parameters()] == [k for k in tm.state_dict() if "num_batches" not in k]


def test_containers():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert isinstance(seq[1], nn.ReLU) and isinstance(seq[-1], nn.Linear) and len(seq) == 3
    assert [n for n, _ in seq[1:].named_parameters()] == ["2.weight", "2.bias"]  # as PyTorch
    ml = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    ml.append(nn.Linear(2, 1))
    assert len(ml) == 4 and [n for n, _ in ml.named_parameters()][-1] == "3.bias"
    with pytest.raises(IndexError):
        ml[4]
    md = nn.ModuleDict({"a": nn.Linear(1, 1)})
    md["b"] = nn.ReLU()
    assert list(md) == ["a", "b"] and "a" in md


def test_parameter():
    p = nn.Parameter((2, 3), data=np.ones((2, 3)))
    assert p.shape == (2, 3) and p.data.dtype == np.float32
    assert p.spec == nn.spec.Tensor((2, 3), "float32")
    with pytest.raises(ValueError, match="shape"):
        p.data = np.ones(3)
    with pytest.raises(nn.SpecError, match="ints"):
        nn.Parameter((2, "n"))
    w = nn.Parameter((3,), init=nn.init.constant(0.5))
    np.testing.assert_array_equal(w.initial_value(np.random.default_rng(0)), np.full(3, 0.5, "float32"))


def test_calling_outside_export_is_clear():
    with pytest.raises(RuntimeError, match="outside export"):
        Block()(np.zeros((1, 4), "float32"))


def test_repr():
    text = repr(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GELU(approximate="tanh")))
    assert "(0): Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))" in text
    assert "(1): GELU(approximate='tanh')" in text
