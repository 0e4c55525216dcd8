"""bench/winograd_layers.py (the fused-against-three-kernels figures of bench/RESULTS.md
"Session 25"): its direct side really is the direct conv, and ``--fuse`` gives the Winograd
side as one kernel or three; a small layer runs end to end with its rows checked."""
from __future__ import annotations

import numpy as np

from bench_scripts import load


def _kernels(out):
    return [dict(f.attrs).get("kiln.anchor") for f in out.functions.values()
            if hasattr(f, "attrs") and "kiln.anchor" in dict(f.attrs)]


def test_each_side_is_the_program_it_names():
    wl = load("winograd_layers")
    conv = load("conv")
    x_shape, w_shape, attrs = wl.layer("64@56")     # the cost rule would pick Winograd
    w = np.ones(w_shape, "float32")
    mod = conv.conv_module(x_shape, w, np.zeros(w_shape[0], "float32"), attrs)
    direct = _kernels(wl.compile_fn(mod, False)[1])
    assert not any(a.startswith("winograd") for a in direct), direct
    assert "winograd_conv" in _kernels(wl.compile_fn(mod, True, 4, "on")[1])
    three = _kernels(wl.compile_fn(mod, True, 4, "off")[1])
    assert "winograd_input" in three and "winograd_conv" not in three


def test_a_layer_runs_and_agrees_with_the_direct_conv():
    wl = load("winograd_layers")
    (row,) = wl.run(["8->16@12"], rounds=1, fuse="on")
    assert row["fused"] and float(row["max_rel_err"]) < 1e-4 and row["winograd_ms"] > 0
