"""Layer decisions: graph-level choices that the tuner measures, made before there are kernels.

A kernel's decisions (tile sizes, unrolling, ...) are measured kernel by kernel (``tuner.py``).
Two choices come earlier, in graph passes, and which kernels a model has depends on them:

- ``winograd`` (``conv_winograd``): whether each 3x3 stride-1 ``conv2d`` is computed directly
  (0) or as Winograd F(m x m, 3 x 3) (m = 4 or 2: three kernels, input transform, batched
  GEMM, output transform; ``-m``: the same stages as one kernel per block of tiles,
  ``fuse_winograd``, offered where its rule would fuse them); the cost rule's pick
  (``conv_winograd.layer_options``) is the default;
- ``conv_block`` (``convert_layout_nchwc``): the output-channel block ``bn`` of each
  channel-blocked conv (``conv_blocked.channel_blocks``: 40, 32, 24, 16, 8 on AVX-512), the
  layout its result flows in; ``conv_blocked.conv_tile``'s pick is the default;
- ``panel`` (``fuse_ops``, ``layout.pack_plan``): the panel width a ``linear``/``matmul``
  weight is packed in, the register tile's vector width (``layout.panel_options``: 64 or 32
  on AVX-512, and 128 or 256 for a matrix-vector product, one stream per tile).

This module lets measurement pick:

- ``winograd_layers`` / ``block_layers`` / ``panel_layers`` ``(mod, ctx)``: the layers of a
  model a rule decides, as ``LayerTask``s keyed by ``layer_workload`` (the decision, the conv's shapes,
  dtype and attributes), with their options and default;
- ``tune_layers(...)``: each option of each layer compiled alone (the operator with its
  weight, through the default pipeline with that option forced the way a record forces it:
  a one-record database) and timed end to end where the executor runs candidates
  (``Executor.time_models``: alternating rounds, the fastest round of each); one record per
  option, ``{"winograd": m}``, ``{"conv_block": bn}`` or ``{"panel": p}``, in the same
  database and format as the kernels' (``database.make_record``, ``kernel`` = ``conv2d ...``);
- ``recorded_choice(call, ctx, decision, options)``: what the passes ask when
  ``PassContext.tuning_db`` is set: the best record's value for this layer on this target
  and thread count, or None (no record: the default rule decides). A recorded value that is
  no longer an option is reported once (``apply.StaleRecordWarning``).

The tuner (``kiln.tune``) measures the Winograd choices first, then the blocks of the convs
that stay direct, then the panels, so the kernels it then extracts and tunes are those the recorded choices
produce (``extract_tasks(..., layers_db=db)``).

>>> tasks = winograd_layers(mod, PassContext(target="llvm"))          # doctest: +SKIP
>>> [(t.kernel, t.options, t.default) for t in tasks]                   # doctest: +SKIP
[('conv2d 1x64x56x56 w64x64x3x3', [0, 4, 2], 4), ...]
"""
from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from ..ir import IRModule
from ..ir.graph import Binding, Call, Constant
from ..transform.infra import PassContext

# The decisions' names (and their records' workload prefix: ``layer:<decision>:<hash>``).
WINOGRAD = "winograd"
BLOCK = "conv_block"
PANEL = "panel"


@dataclass
class LayerTask:
    """One layer to decide: the ``decision`` (``WINOGRAD``, ``BLOCK``), its ``workload`` key,
    a readable ``kernel`` name, the ``call`` (the first of its kind), the ``options``, the
    default rule's pick (``default``), and how many convs of the model share the key
    (``calls``)."""
    decision: str
    workload: str
    kernel: str
    call: Call
    options: List[int]
    default: int
    calls: int = 1


@dataclass
class LayerReport:
    """What ``tune_layers`` measured for one layer: seconds per call of each option (None:
    it failed; ``note`` says why), the default and the best option."""
    decision: str
    kernel: str
    calls: int
    default: int
    times: Dict[int, Optional[float]] = field(default_factory=dict)
    note: str = ""
    workload: str = ""      # the layer's database key (``layer_workload``)
    kept: bool = True       # False: the end-to-end check kept the default (``model_check``)

    @property
    def best(self) -> Optional[int]:
        ok = {o: t for o, t in self.times.items() if t is not None}
        return min(ok, key=ok.get) if ok else None


def layer_workload(call: Call, decision: str) -> str:
    """The database key of ``decision`` for a conv layer: the decision, the input and weight
    shapes, dtype and attributes (two convs that compute the same thing on the same shapes
    share it)."""
    x, w = call.args[0].ty, call.args[1].ty
    text = json.dumps({"x": list(x.static_shape()), "w": list(w.static_shape()),
                       "dtype": x.dtype, "attrs": sorted((k, _plain(v)) for k, v in call.attrs)},
                      sort_keys=True)
    return f"layer:{decision}:" + hashlib.sha256(text.encode()).hexdigest()[:24]


def describe(decision: str, option: int) -> str:
    """``direct``, ``winograd 4``, ``block 16``: an option as reports say it."""
    if decision == WINOGRAD:
        return "direct" if option == 0 else f"winograd {abs(option)}" + (
            " fused" if option < 0 else "")
    return f"{'block' if decision == BLOCK else 'panel'} {option}"


def layer_name(call: Call) -> str:
    """``conv2d 1x64x56x56 w64x64x3x3``: how reports and records name a layer."""
    x, w = call.args[0].ty.static_shape(), call.args[1].ty.static_shape()
    return f"{call.op} {'x'.join(map(str, x))} w{'x'.join(map(str, w))}"


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, (list, tuple)) else v


def _before(stage: str, ctx: PassContext):
    """The default pipeline's passes up to (not including) the pass named ``stage``."""
    from ..transform.infra import Sequential
    from ..transform.pipeline import get_pipeline
    passes = []
    for p in get_pipeline("default", ctx):
        if p.name == stage:
            break
        passes.append(p)
    return Sequential(passes, name=f"before_{stage}", ctx=ctx)


def _layers(mod: IRModule, ctx: PassContext, stage: str, decision: str,
            options_of: Callable[[Call], Optional[tuple]],
            ops: tuple = ("conv2d",)) -> List[LayerTask]:
    """One ``LayerTask`` per distinct bound call of ``ops`` with static input and weight
    shapes that ``options_of(call) -> (options, default)`` (or None: not this rule's)
    accepts, as the pass ``stage`` sees them (fused functions included)."""
    from ..ir import collect
    from ..ir.graph import Function
    seen = _before(stage, ctx)(mod)
    tasks: Dict[str, LayerTask] = {}
    for f in seen.functions.values():
        if not isinstance(f, Function):
            continue
        for b in collect(f, Binding):     # what the graph passes visit: bound calls
            call = b.value
            if not isinstance(call, Call) or call.op not in ops or len(call.args) < 2 or \
                    any(getattr(a.ty, "static_shape", lambda: None)() is None
                        for a in call.args[:2]):
                continue
            found = options_of(call)
            if found is None:
                continue
            key = layer_workload(call, decision)
            if key in tasks:
                tasks[key].calls += 1
                continue
            tasks[key] = LayerTask(decision, key, layer_name(call), call, *found)
    return list(tasks.values())


def winograd_layers(mod: IRModule, ctx: PassContext) -> List[LayerTask]:
    """The convs of ``mod`` that ``conv_winograd`` may rewrite, as the default pipeline for
    ``ctx`` presents them to it: options 0 (direct) and each tile size, the cost rule's
    pick as the default."""
    from ..transform.conv_winograd import conv_plan, ineligible, layer_options
    if not ctx.winograd or not ctx.prepack_weights:
        return []

    def options_of(call: Call):
        if ineligible(call) is not None:
            return None
        return layer_options(conv_plan(call, ctx=ctx))
    return _layers(mod, ctx, "conv_winograd", WINOGRAD, options_of)


def block_layers(mod: IRModule, ctx: PassContext) -> List[LayerTask]:
    """The convs of ``mod`` that ``convert_layout_nchwc`` computes channel-blocked and that
    have more than one block to choose from (``conv_blocked.channel_blocks``), as the
    pipeline for ``ctx`` presents them (with ``ctx.tuning_db``: after its Winograd records)."""
    from ..transform import conv_blocked
    from ..transform.layout_nchwc import conv_kind
    if not ctx.nchwc_layout:
        return []
    rctx = ctx.resolved()

    def options_of(call: Call):
        if conv_kind(call, rctx) != "conv":
            return None
        o = conv_blocked.group_width(call)      # blocks lie in one group of a grouped conv
        _, _, h, w = call.ty.static_shape()
        blocks = list(conv_blocked.channel_blocks(o, rctx))
        if len(blocks) < 2:
            return None
        return blocks, conv_blocked.conv_tile(o, h, w, rctx)[0]
    return _layers(mod, ctx, "convert_layout_nchwc", BLOCK, options_of)


def panel_layers(mod: IRModule, ctx: PassContext) -> List[LayerTask]:
    """The ``linear``/``matmul`` calls of ``mod`` whose weight ``fuse_ops`` packs in panels
    and that have more than one width to choose from (``layout.panel_options``), as the
    pipeline for ``ctx`` presents them."""
    from ..transform import layout
    if not ctx.prepack_weights:
        return []
    rctx = ctx.resolved()

    def options_of(call: Call):
        plan = layout.pack_plan(call, rctx.replace(tuning_db=None))
        if plan is None or plan.rule.by != "cols":
            return None
        options, default = layout.panel_options(plan.shape[plan.rule.dim], plan.rows, rctx)
        return (options, default) if len(options) > 1 else None
    return _layers(mod, ctx, "fuse_ops", PANEL, options_of, ops=("linear", "matmul"))


def layer_module(call: Call) -> IRModule:
    """The operator alone: ``main(x) = op(x, weight)`` with the layer's constant weight (seeded
    random values of its shape when the call's weight is not a constant: a fused function's
    parameter)."""
    import numpy as np
    from ..ir import FunctionBuilder, GraphVar
    from ..ops import call as op_call
    w = call.args[1]
    data = w.data if isinstance(w, Constant) else \
        np.random.default_rng(0).standard_normal(w.ty.static_shape()).astype(w.ty.dtype)
    x = GraphVar("x", call.args[0].ty)
    fb = FunctionBuilder([x])
    with fb.dataflow():
        out = fb.emit_output(op_call(call.op, x, Constant(data), **dict(call.attrs)))
    return IRModule({"main": fb.finish(out)})


def compile_option(task: LayerTask, option: int, target: str, ctx: PassContext,
                   workdir: str) -> str:
    """The library of the task's operator alone with ``option`` forced as a record forces it
    (a database in ``workdir`` holding that one record); returns the library's path. A block
    is measured on the direct conv (Winograd off)."""
    import os
    from ..executable import compile as compile_model
    from ..transform.pipeline import get_pipeline
    from .database import Database, make_record
    rctx = ctx.resolved()
    db = os.path.join(workdir, f"{task.workload.replace(':', '_')}_{option}.jsonl")
    Database(db).append(make_record(task.workload, rctx.machine.key(), int(rctx.cores or 1),
                                    task.kernel, {task.decision: option}, "ok",
                                    median_s=1.0, min_s=1.0))
    c = ctx.replace(tuning_db=db, winograd=ctx.winograd and task.decision == WINOGRAD)
    return compile_model(get_pipeline("default", c)(layer_module(task.call)), target).library_path


def tune_layers(tasks: List[LayerTask], target: str, threads: int, ctx: PassContext,
                database, executor, rounds: int = 5,
                on_layer: Optional[Callable[[LayerReport], None]] = None,
                deadline: Optional[float] = None) -> List[LayerReport]:
    """Measure every option of every layer (module docstring), appending one record per
    option to ``database``; a layer whose options all have records for this target and thread
    count already is not measured again, nor is any once ``time.monotonic()`` passes
    ``deadline`` (its report says so; it keeps its default). Returns one ``LayerReport`` per
    layer."""
    import tempfile
    import time
    from .database import is_timing, make_record, record_time
    from .workload import ArgSpec, rules_version
    base = ctx.replace(target=target, cores=threads, tuning_db=None)
    key = base.resolved().machine.key()
    rules = rules_version()
    reports = []
    for t in tasks:
        rep = LayerReport(t.decision, t.kernel, t.calls, t.default, workload=t.workload)
        done = {r["decisions"].get(t.decision): r
                for r in database.query(t.workload, key, threads) if is_timing(r)}
        if all(o in done for o in t.options):
            rep.times = {o: record_time(done[o]) for o in t.options}
            rep.note = "measured before"
        elif deadline is not None and time.monotonic() > deadline:
            rep.note = "not measured: its share of the time budget ran out (the default stays)"
        else:
            try:
                with tempfile.TemporaryDirectory(prefix="kiln-layer-") as tmp:
                    libs = [compile_option(t, o, target, base, tmp) for o in t.options]
            except Exception as e:  # noqa: BLE001 - a layer that cannot build keeps its default
                rep.note = f"build failed: {type(e).__name__}: {str(e).splitlines()[0]}"
                libs = None
            if libs is not None:
                x = t.call.args[0].ty
                specs = [ArgSpec(tuple(x.static_shape()), x.dtype, False)]
                # ~10 ms a round for a 1 ms conv (the scale of ResNet-18's on one core).
                kind, value = executor.time_models(libs, "main", specs, threads, rounds, 10, 0,
                                                   key, 300.0)
                if kind == "ok":
                    rep.times = dict(zip(t.options, value))
                    for o, s in rep.times.items():
                        database.append(make_record(
                            t.workload, key, threads, t.kernel, {t.decision: o}, "ok",
                            median_s=s, min_s=s, rules=rules, ops=t.call.op, target_str=target))
                else:
                    rep.note = f"timing failed ({kind}): {str(value).splitlines()[0]}"
        reports.append(rep)
        if on_layer is not None:
            on_layer(rep)
    return reports


_warned: set = set()


def recorded_choice(call: Call, ctx: PassContext, decision: str,
                    options: List[int]) -> Optional[int]:
    """The best record's value of ``decision`` for the conv ``call`` in ``ctx.tuning_db``
    (target and ``ctx.cores`` threads); None without a record, or when the record's value
    is not among ``options`` any more (reported once)."""
    if not ctx.tuning_db:
        return None
    from .apply import StaleRecordWarning, best_records
    rctx = ctx.resolved()
    rec = best_records(ctx.tuning_db).get((layer_workload(call, decision), rctx.machine.key(),
                                           int(rctx.cores or 1)))
    if rec is None:
        return None
    value = rec["decisions"].get(decision)
    if value not in options:
        if rec["workload"] not in _warned:
            _warned.add(rec["workload"])
            warnings.warn(f"tuning record for layer {rec.get('kernel')!r} chose {decision}="
                          f"{value!r}, not one of {options} any more; using the default rule",
                          StaleRecordWarning, stacklevel=3)
        return None
    return value
