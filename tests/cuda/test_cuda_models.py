"""Whole models' kernels on the CUDA target, without a GPU: every tensor program of the MLP,
scheduled by the first default GPU rule (``kiln.codegen.cuda.schedule.bind_spatial_loops``),
lowers to PTX that ptxas assembles. Running them through the VM on a GPU is not built yet
(docs/cuda.md)."""
from __future__ import annotations

import pytest

from kiln import nn
from kiln.codegen.cuda import compile_cuda
from kiln.codegen.cuda.schedule import bind_spatial_loops
from kiln.ir import IRModule, PrimFunc
from kiln.transform.fuse_ops import fuse_ops
from kiln.transform.legalize import legalize

from cuda_programs import assemble, ptxas


def _mlp():
    mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    mod, _ = mlp.export({"forward": {"x": nn.spec.Tensor(("batch", 64), "float32")}})
    return mod


@pytest.mark.parametrize("fused", [False, True], ids=["legalized", "fused"])
def test_every_mlp_kernel_compiles_to_ptx(fused, tmp_path):
    mod = legalize()(fuse_ops()(_mlp()) if fused else _mlp())
    prims = {n: f for n, f in mod.items() if isinstance(f, PrimFunc)}
    assert len(prims) == (2 if fused else 5)
    cm = compile_cuda(IRModule({n: bind_spatial_loops(f) for n, f in prims.items()}), "cuda -arch=sm_80")
    assert set(cm.functions) == set(prims)
    for name, info in cm.functions.items():
        assert info["dims"]["batch"] == [0, 0]            # the symbolic batch, from x's axis 0
        for k in info["kernels"]:
            assert f".entry {k['name']}(" in cm.ptx
            assert k["block"][1:] == [1, 1] and 1 <= k["block"][0] <= 256
    if ptxas() is not None:
        r = assemble(cm.ptx, "sm_80", tmp_path)
        assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_every_resnet18_kernel_compiles_to_ptx(tmp_path):
    """ResNet-18 from ONNX (the zoo's seeded export), fused: 19 tensor programs, 65 kernels."""
    pytest.importorskip("torch")
    import sys
    import pathlib
    import onnx
    sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "onnx_models"))
    import onnx_model_zoo as zoo
    from kiln.frontend.onnx.importer import from_onnx
    mod = from_onnx(onnx.load(zoo.export("resnet18", str(tmp_path / "resnet18.onnx"))))
    mod = legalize()(fuse_ops()(mod[0] if isinstance(mod, tuple) else mod))
    prims = {n: bind_spatial_loops(f) for n, f in mod.items() if isinstance(f, PrimFunc)}
    cm = compile_cuda(IRModule(prims), "cuda -arch=sm_80")
    assert set(cm.functions) == set(prims) and len(prims) >= 15
    if ptxas() is not None:
        r = assemble(cm.ptx, "sm_80", tmp_path)
        assert r.returncode == 0, r.stderr
