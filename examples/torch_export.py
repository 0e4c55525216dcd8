"""A PyTorch model straight into Kiln: torch.export -> from_exported_program -> compile -> run.

A small CNN with a dynamic batch (torch.export.Dim), imported with its weights, compiled with
the "default" pipeline, run at two batch sizes and checked against PyTorch; then saved with
kiln.frontend.torch.save (torch.export.save keeping the Dim's name) and compiled the way
``kiln compile model.pt2`` does.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


torch.manual_seed(0)
model = SmallCNN().eval()                 # inference: batch norm uses its running statistics
batch = torch.export.Dim("batch", min=1, max=16)
ep = torch.export.export(model, (torch.randn(2, 3, 32, 32),), dynamic_shapes={"x": {0: batch}})

mod, params = kiln.frontend.from_exported_program(ep)   # weights bound; keep_params_as_input=True keeps them inputs
mod = kiln.transform.bind_params("main", params)(mod)   # (a no-op here: params is empty)
mod.show()                                              # main(x: (batch, 3, 32, 32)), bound batch <= 16
ex = kiln.compile(kiln.get_pipeline("default")(mod), target="llvm")
vm = kiln.VirtualMachine(ex, kiln.cpu())

for n in (1, 5):                          # one compiled artifact, any batch up to 16
    x = torch.randn(n, 3, 32, 32)
    y = vm["main"](x.numpy()).numpy()
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    print(f"batch {n}: output {y.shape}, max |kiln - torch| = {np.abs(y - want).max():.2e}")

# The same through a file, as `kiln compile small_cnn.pt2 -o small_cnn.so` does:
kiln.frontend.torch.save(ep, "small_cnn.pt2")
mod2, params2 = kiln.frontend.torch.load("small_cnn.pt2")
assert str(mod2["main"].params[0].ty.shape[0]) == "batch"      # the Dim's name survives the file
ex2 = kiln.compile(kiln.get_pipeline("default")(kiln.transform.bind_params("main", params2)(mod2)), "llvm")
ex2.export_library("small_cnn.so")
print("wrote small_cnn.so")
