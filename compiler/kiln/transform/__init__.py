"""Graph passes and pipelines (DESIGN.md, "Passes"): each factory returns a pure
``IRModule -> IRModule`` pass, e.g. ``kiln.transform.legalize()(mod)``.

- ``bind_params(func_name, params)`` (also spelled ``BindParams``): parameters -> constants
- ``legalize()``: operator calls -> ``call_tir`` of tensor programs
- ``fuse_ops()``: groups of operators -> one tensor program each
- ``fold_constant()``: evaluate what depends only on constants
- ``eliminate_common_subexpr()``, ``dead_code_elimination()``
- ``default_schedule()``: a schedule per kernel kind for every unscheduled tensor program
- ``conv_winograd()``: 3x3 stride-1 conv2d as Winograd F(4x4 or 2x2, 3x3) where a cost rule says
  it is faster; ``default_schedule`` schedules its transform kernels (docs/winograd.md)
- ``fuse_winograd()``: a Winograd conv whose V and M would not fit in L2 as one kernel, run per
  block of tiles (docs/winograd.md)
- ``conv_live_taps()``: a conv computes only the taps that read its input (a dilated conv over a
  small map: DeepLabV3's ASPP), trimmed or split into bands
- ``fuse_attention()``: softmax(q @ kt * scale + mask) @ v -> one ``attention`` call, one kernel
  per block of query rows (``schedule_attention.py``)
- ``split_as_slices()``: a split whose pieces are taken one by one -> a slice per piece, which
  fuses into its reader (or is a view)
- ``convert_layout_nchwc()``: channel-blocked (NCHW[b]c) activations from conv to conv
  (docs/layout.md; ``schedule_nchwc.py`` schedules its depthwise convs and pools)
- ``Sequential``, ``PassContext`` (options, passed explicitly); pipelines:
  ``kiln.get_pipeline("zero" | "default", ctx)`` (``pipeline.py`` lists them and why)

Files: one per pass; ``kernels.py`` builds tensor programs from operator calls (shared by
legalize and fuse_ops), ``layout.py`` the weight packing and tile shapes, ``conv_blocked.py``
when a conv2d is computed channel-blocked (NCHW[x]c), ``schedule_rules.py`` / ``schedule_tile.py``
/ ``schedule_conv.py`` the default schedule rules (``block_iter.py`` regroups a conv's epilogue
for the blocked tile), ``graph_util.py`` the graph rewriting
helpers, ``well_formed.py`` the module check run by ``PassContext(verify=True)``.
"""
from .infra import Pass, PassContext, Sequential
from .bind_params import BindParams, BindParamsError, bind_params
from .legalize import legalize
from .kernels import LegalizeError
from .fold_constant import fold_constant
from .dead_code_elimination import dead_code_elimination
from .eliminate_common_subexpr import eliminate_common_subexpr
from .fuse_ops import fuse_ops
from .default_schedule import default_schedule
from .conv_winograd import conv_winograd
from .conv_live_taps import conv_live_taps
from .fuse_winograd import fuse_winograd
from .fuse_attention import fuse_attention
from .layout_nchwc import convert_layout_nchwc
from .split_as_slices import split_as_slices
from .pipeline import get_pipeline
from .well_formed import WellFormedError, check_well_formed

__all__ = ["Pass", "PassContext", "Sequential", "BindParams", "BindParamsError", "LegalizeError", "bind_params",
           "legalize", "fold_constant", "dead_code_elimination", "eliminate_common_subexpr",
           "fuse_ops", "default_schedule", "conv_winograd", "fuse_winograd", "conv_live_taps", "fuse_attention", "convert_layout_nchwc", "split_as_slices", "get_pipeline", "WellFormedError", "check_well_formed"]
