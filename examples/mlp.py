"""API.md section 1: build an MLP with kiln.nn, compile it, run it, export one file, reload it.

Run: .venv/bin/python examples/mlp.py
"""
import os
import tempfile

import numpy as np

import kiln
from kiln import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(self.relu1(self.fc1(x)))


mod, param_spec = MLP().export(spec={"forward": {"x": nn.spec.Tensor((1, 784), "float32")}})
mod.show()                                   # the IRModule as script text
mod = kiln.get_pipeline("default")(mod)      # fusion, legalize, default schedules, ...
ex = kiln.compile(mod, target="llvm")
print(ex)
vm = kiln.VirtualMachine(ex, kiln.cpu())

rng = np.random.default_rng(0)
x_np = rng.random((1, 784), dtype=np.float32)
params_np = [(rng.standard_normal(p.shape, dtype=np.float32) * 0.05) for _, p in param_spec]
x = kiln.nd.array(x_np)
params = [kiln.nd.array(p) for p in params_np]
y = vm["forward"](x, *params)                # a kiln NDArray
print("kiln :", y.numpy().round(4))

# The same computation in numpy.
w1, b1, w2, b2 = params_np
expected = np.maximum(x_np @ w1.T + b1, 0) @ w2.T + b2
print("numpy:", expected.round(4))
np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-5)

# One file holding machine code + the serialized executable; load it back and run again.
path = os.path.join(tempfile.mkdtemp(), "mlp.so")
ex.export_library(path)
vm2 = kiln.VirtualMachine(kiln.load_module(path), kiln.cpu())
np.testing.assert_allclose(vm2["forward"](x, *params).numpy(), expected, rtol=1e-4, atol=1e-5)
print(f"exported {path} ({os.path.getsize(path)} bytes), reloaded, same result")
