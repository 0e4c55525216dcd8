"""Exports an MLP (weights bound) with typed bindings for C, C++ and Java (kiln.bindgen).

Run: .venv/bin/python examples/bindings/export_typed.py OUT_DIR

Writes into OUT_DIR: mlp.so, mlp.a + mlp.h + the typed C and C++ bindings mlp_bindings.h and
mlp.hpp (Executable.export_static), MlpModel.java (kiln.bindgen.write_bindings, what
`kiln export-bindings mlp.so --lang java` writes too), the input x.bin and the Python VM's output
expected.bin (raw little-endian float32). main.c, main.cpp and Main.java beside this file use
them; see README.md here.
"""
import os
import sys

import numpy as np

import kiln
from kiln import nn


def export(out_dir, seed=0):
    """Compile and export; returns (input, expected output)."""
    os.makedirs(out_dir, exist_ok=True)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    model.load_state_dict(model.init_params(seed=seed))
    mod, _ = model.export(spec={"forward": {"x": nn.spec.Tensor((1, 784), "float32")}})
    mod = kiln.transform.bind_params("forward", model.state_dict())(mod)
    ex = kiln.compile(kiln.get_pipeline("default")(mod), target="llvm")
    ex.export_library(os.path.join(out_dir, "mlp.so"))
    ex.export_static(out_dir, name="mlp")                 # mlp.a, mlp.h, mlp_bindings.h, mlp.hpp
    kiln.bindgen.write_bindings(ex.spec, out_dir, "mlp", langs=["java"])   # MlpModel.java
    x = np.random.default_rng(seed).random((1, 784), dtype=np.float32)
    y = kiln.VirtualMachine(ex, kiln.cpu())["forward"](x).numpy()
    x.astype("<f4").tofile(os.path.join(out_dir, "x.bin"))
    y.astype("<f4").tofile(os.path.join(out_dir, "expected.bin"))
    return x, y


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "build"
    _, y = export(out)
    print("expected:", " ".join(f"{v:.9g}" for v in y.ravel()))
