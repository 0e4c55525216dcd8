"""API.md sections 1 and 3, as written."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.script import T, R


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(self.relu1(self.fc1(x)))


@pytest.mark.parametrize("pipeline", ["zero", "default"])
def test_section1_mlp(pipeline, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mod, param_spec = MLP().export(spec={"forward": {"x": nn.spec.Tensor((1, 784), "float32")}})
    mod.show()
    mod = kiln.get_pipeline(pipeline)(mod)
    ex = kiln.compile(mod, target="llvm")
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    x = kiln.nd.array(np.random.rand(1, 784).astype("float32"))
    params = [kiln.nd.array(np.random.rand(*p.shape).astype("float32")) for _, p in param_spec]
    y = vm["forward"](x, *params)
    w1, b1, w2, b2 = (p.numpy() for p in params)
    expected = np.maximum(x.numpy() @ w1.T + b1, 0) @ w2.T + b2
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-3)

    ex.export_library("mlp.so")
    vm = kiln.VirtualMachine(kiln.load_module("mlp.so"), kiln.cpu())
    np.testing.assert_allclose(vm["forward"](x, *params).numpy(), expected, rtol=1e-4, atol=1e-3)
    assert [name for name, _ in param_spec] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert param_spec[0][1].shape == (256, 784) and param_spec[0][1].dtype == "float32"


def test_section1_default_pipeline_fuses_mlp_into_two_kernels():
    mod, _ = MLP().export(spec={"forward": {"x": nn.spec.Tensor((1, 784), "float32")}})
    ex = kiln.compile(kiln.get_pipeline("default")(mod), target="llvm")
    assert len(ex.kernel_names) <= 2


@kiln.script.ir_module
class Net:
    @T.prim_func
    def linear0(X: T.Buffer((1, 784), "float32"), W: T.Buffer((128, 784), "float32"),
                B: T.Buffer((128,), "float32"), Z: T.Buffer((1, 128), "float32")):
        for i, j, k in T.grid(1, 128, 784):
            with T.block("Z"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    Z[vi, vj] = B[vj]
                Z[vi, vj] = Z[vi, vj] + X[vi, vk] * W[vj, vk]

    @R.function
    def main(x: R.Tensor((1, 784), "float32"), w0: R.Tensor((128, 784), "float32"),
             b0: R.Tensor((128,), "float32")):
        with R.dataflow():
            lv0 = R.call_tir(Net.linear0, (x, w0, b0), R.Tensor((1, 128), "float32"))
            lv1 = R.call_dps_packed("env.relu", (lv0,), R.Tensor((1, 128), "float32"))
            R.output(lv1)
        return lv1


def test_section3_graph_functions_externals_bound_params():
    @kiln.register_func("env.relu", override=True)
    def relu(x, out):
        np.maximum(np.from_dlpack(x), 0, out=np.from_dlpack(out))

    rng = np.random.default_rng(0)
    w0_np = rng.standard_normal((128, 784), dtype=np.float32) * 0.05
    b0_np = rng.standard_normal((128,), dtype=np.float32)
    x = rng.standard_normal((1, 784), dtype=np.float32)

    bound = kiln.transform.bind_params("main", {"w0": w0_np, "b0": b0_np})(Net)
    vm = kiln.VirtualMachine(kiln.compile(bound, "llvm"), kiln.cpu())
    y = vm["main"](x)
    np.testing.assert_allclose(y.numpy(), np.maximum(x @ w0_np.T + b0_np, 0), rtol=1e-4, atol=1e-4)


def test_section3_round_trips_through_script():
    kiln.ir.assert_structural_equal(kiln.script.parse(Net.script()), Net)


def test_wrong_input_shape_is_a_clear_error():
    mod, param_spec = MLP().export(spec={"forward": {"x": nn.spec.Tensor((1, 784), "float32")}})
    vm = kiln.VirtualMachine(kiln.compile(kiln.get_pipeline("default")(mod), "llvm"), kiln.cpu())
    params = [np.zeros(p.shape, "float32") for _, p in param_spec]
    with pytest.raises(kiln.KilnError, match=r"forward: argument 0 'x' expected shape \(1, 784\), got \(1, 785\)"):
        vm["forward"](np.zeros((1, 785), "float32"), *params)


def test_truncated_or_corrupted_export_fails_cleanly(tmp_path):
    mod, param_spec = MLP().export(spec={"forward": {"x": nn.spec.Tensor((1, 784), "float32")}})
    ex = kiln.compile(kiln.get_pipeline("default")(mod), "llvm")
    good = tmp_path / "mlp.so"
    ex.export_library(str(good))
    data = good.read_bytes()

    truncated = tmp_path / "truncated.so"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(kiln.KilnError, match="truncated.so"):
        kiln.VirtualMachine(kiln.load_module(str(truncated)), kiln.cpu())

    # Damage the executable blob inside an otherwise valid library: its magic, then a section
    # table entry. Both must be refused by the loader with a message, not crash.
    at = data.index(ex.blob[:64])
    for offset, what in ((0, "magic"), (24, "section")):
        bad = bytearray(data)
        bad[at + offset] ^= 0xFF
        path = tmp_path / f"corrupt_{offset}.so"
        path.write_bytes(bytes(bad))
        with pytest.raises(kiln.KilnError, match=what):
            kiln.VirtualMachine(kiln.load_module(str(path)), kiln.cpu())
