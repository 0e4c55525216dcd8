"""Exports the MLP of examples/mlp.py for the C examples (and the deployment tests).

Run: .venv/bin/python examples/c/export_mlp.py OUT_DIR

Writes into OUT_DIR: mlp.so (Executable.export_library), mlp.a + mlp.h
(Executable.export_static(OUT_DIR, name="mlp")), the input and the four parameters as raw
little-endian float32 files (input.bin, param0.bin ... param3.bin, C order), and the Python VM's
output as expected.bin. Prints the run_model command line.
"""
import os
import sys

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


def export(out_dir, seed=0):
    """Compile, export and run the MLP; returns (executable, input, params, expected output)."""
    os.makedirs(out_dir, exist_ok=True)
    mod, param_spec = MLP().export(spec={"forward": {"x": nn.spec.Tensor((1, 784), "float32")}})
    ex = kiln.compile(kiln.get_pipeline("default")(mod), "llvm")
    ex.export_library(os.path.join(out_dir, "mlp.so"))
    ex.export_static(out_dir, name="mlp")
    rng = np.random.default_rng(seed)
    x = rng.random((1, 784), dtype=np.float32)
    params = [(rng.standard_normal(p.shape, dtype=np.float32) * 0.05) for _, p in param_spec]
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    y = vm["forward"](kiln.nd.array(x), *[kiln.nd.array(p) for p in params]).numpy()
    for stem, a in [("input", x), *[(f"param{i}", p) for i, p in enumerate(params)], ("expected", y)]:
        with open(os.path.join(out_dir, stem + ".bin"), "wb") as f:
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())
    return ex, x, params, y


def shape_arg(path, shape):
    """``path:1x784``, the argument syntax of run_model."""
    return f"{path}:{'x'.join(str(d) for d in shape)}"


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "build/model"
    _, x, params, y = export(out)
    args = [shape_arg(os.path.join(out, "input.bin"), x.shape)]
    args += [shape_arg(os.path.join(out, f"param{i}.bin"), p.shape) for i, p in enumerate(params)]
    print("run_model", os.path.join(out, "mlp.so"), *args)
    print("expected:", " ".join(f"{v:.9g}" for v in y.ravel()))
