"""Helpers of the torch.export importer tests: export a module, import it, compile it with the
"default" pipeline and compare the VM's outputs with torch eager."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch.export importer needs torch (the test extra)")

import kiln  # noqa: E402


def compile_program(ep, keep_params_as_input=False):
    """(vm, mod, params) for an ExportedProgram, through the default pipeline."""
    mod, params = kiln.frontend.from_exported_program(ep, keep_params_as_input=keep_params_as_input)
    lowered = kiln.get_pipeline("default")(kiln.transform.bind_params("main", params)(mod))
    vm = kiln.VirtualMachine(kiln.compile(lowered, "llvm"), kiln.cpu())
    return vm, mod, params


def outputs(vm, *inputs):
    got = vm["main"](*[np.ascontiguousarray(x.numpy()) for x in inputs])
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    return [g.numpy() for g in got]


def torch_outputs(model, *inputs):
    with torch.no_grad():
        want = model(*inputs)
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    return [w.numpy() for w in want]


def check(model, *inputs, rtol=1e-4, atol=1e-4, dynamic_shapes=None, more=()):
    """Export ``model`` at ``inputs``, compile, and compare with torch on ``inputs`` and on
    each tuple of inputs in ``more`` (other sizes of a dynamic export). Returns the vm."""
    model = model.eval()
    ep = torch.export.export(model, tuple(inputs), dynamic_shapes=dynamic_shapes)
    vm, _, _ = compile_program(ep)
    for case in (tuple(inputs),) + tuple(more):
        got, want = outputs(vm, *case), torch_outputs(model, *case)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return vm


def randomize(model, seed=0):
    """Random weights and batch-norm statistics (so eval-mode batch norm is not the identity)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.is_floating_point():
                continue
            if name.endswith("running_var"):
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
            else:
                t.copy_(torch.randn(t.shape, generator=g) * 0.5)
    return model


def perturb(model, seed=0):
    """Random batch-norm statistics and no constant tensors: torchvision and transformers
    initialise biases, norm affines and some heads to constants, under which a wrong channel
    order or a skipped op could still match."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.is_floating_point():
                continue
            if name.endswith("running_var"):
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
            elif name.endswith("running_mean"):
                t.copy_(torch.randn(t.shape, generator=g) * 0.1)
            elif t.numel() > 1 and bool(t.min() == t.max()):
                t.add_(torch.randn(t.shape, generator=g) * 0.1)
    return model.eval()


_TV_LIB = []


def import_torchvision():
    """torchvision, or a skip naming why (see ``prepare_torchvision``)."""
    import importlib.util
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed (the test extra: pip install -e .[test])")
    prepare_torchvision()
    import torchvision
    return torchvision


def prepare_torchvision():
    """Make ``import torchvision`` work beside the CPU torch. The PyPI torchvision wheels carry
    C ops built against the CUDA torch; beside the CPU torch those ops do not load, and
    torchvision 0.28 then fails at import (and so does ``transformers``, which imports it when
    present) registering fake kernels for two of them (torchvision::nms, ::qnms). The models are
    plain Python and need none of its C ops, so when the ops do not load those two op schemas
    are declared (no kernel: calling them would fail) before the import."""
    import glob
    import importlib.util
    import os
    import sys
    spec = importlib.util.find_spec("torchvision")
    if spec is None or "torchvision" in sys.modules or _TV_LIB:
        return
    lib = glob.glob(os.path.join(os.path.dirname(spec.origin), "_C*.so"))
    try:
        torch.ops.load_library(lib[0])
    except Exception:  # noqa: BLE001 - OSError or RuntimeError, by torch version
        declared = torch.library.Library("torchvision", "FRAGMENT")
        for name in ("nms", "qnms"):
            declared.define(f"{name}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _TV_LIB.append(declared)      # a Library unregisters its ops when collected
