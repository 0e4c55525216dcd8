"""Layer decisions: graph-level choices that the tuner measures, made before there are kernels.

A kernel's decisions (tile sizes, unrolling, ...) are measured kernel by kernel (``tuner.py``).
One choice comes earlier: ``conv_winograd`` decides for each 3x3 stride-1 ``conv2d`` whether it
is computed directly (one channel-blocked kernel) or as Winograd F(m x m, 3 x 3) (three
kernels: input transform, batched GEMM, output transform), and which kernels a model has
depends on it. The default pipeline takes the cost rule's pick (``ConvPlan.choice``); this
module lets measurement pick instead:

- ``winograd_layers(mod, ctx)``: the eligible convs of a model as ``LayerTask``s, keyed by
  ``layer_workload`` (the conv's shapes, dtype and attributes), with the options ``0`` (direct)
  and each tile size, the cost rule's pick as the default;
- ``tune_layers(...)``: each option of each layer compiled alone (the conv with its constant
  weight, through the default pipeline with that option forced) and timed end to end where
  the executor runs candidates (``Executor.time_models``: alternating rounds, the fastest
  round of each); one record per option, ``{"winograd": m}`` (0: direct), in the same
  database and format as the kernels' (``database.make_record``, ``kernel`` = ``conv2d ...``);
- ``recorded_tile(call, ctx)``: what ``conv_winograd`` asks when ``PassContext.tuning_db`` is
  set: the best record's tile for this conv on this target and thread count, or None (no
  record: the cost rule decides). A recorded value that is no longer an option is reported
  once (``apply.StaleRecordWarning``) and the cost rule decides.

The tuner (``kiln.tune``) measures the layers first, so the kernels it then extracts and
tunes are those the recorded choices produce (``extract_tasks(..., layers_db=db)``).

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

# The decision name and the prefix of layer workloads in the database.
DECISION = "winograd"
WORKLOAD_PREFIX = "layer:conv2d:"


@dataclass
class LayerTask:
    """One conv layer to decide: its ``workload`` key, a readable ``kernel`` name, the
    ``call`` (the first of its kind), the ``options`` (0: direct, else the Winograd tile), the
    cost rule's ``default``, and how many convs of the model share the key (``calls``)."""
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
    kernel: str
    calls: int
    default: int
    times: Dict[int, Optional[float]] = field(default_factory=dict)
    note: str = ""

    @property
    def best(self) -> Optional[int]:
        ok = {o: t for o, t in self.times.items() if t is not None}
        return min(ok, key=ok.get) if ok else None


def layer_workload(call: Call) -> str:
    """The database key of a conv layer: its input and weight shapes, dtype and attributes
    (two convs that compute the same thing on the same shapes share it)."""
    x, w = call.args[0].ty, call.args[1].ty
    text = json.dumps({"x": list(x.static_shape()), "w": list(w.static_shape()),
                       "dtype": x.dtype, "attrs": sorted((k, _plain(v)) for k, v in call.attrs)},
                      sort_keys=True)
    return WORKLOAD_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:24]


def layer_name(call: Call) -> str:
    """``conv2d 1x64x56x56 w64x64x3x3``: how reports and records name a conv layer."""
    x, w = call.args[0].ty.static_shape(), call.args[1].ty.static_shape()
    return f"conv2d {'x'.join(map(str, x))} w{'x'.join(map(str, w))}"


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, (list, tuple)) else v


def _before_winograd(ctx: PassContext):
    """The default pipeline's passes up to (not including) ``conv_winograd``."""
    from ..transform.infra import Sequential
    from ..transform.pipeline import get_pipeline
    passes = []
    for p in get_pipeline("default", ctx):
        if p.name == "conv_winograd":
            break
        passes.append(p)
    return Sequential(passes, name="before_winograd", ctx=ctx)


def winograd_layers(mod: IRModule, ctx: PassContext) -> List[LayerTask]:
    """The convs of ``mod`` that ``conv_winograd`` may rewrite, as the default pipeline for
    ``ctx`` presents them to it, one ``LayerTask`` per distinct layer (module docstring)."""
    from ..ir.graph import Function
    from ..transform.conv_winograd import conv_plan, ineligible
    from ..ir import collect
    if not ctx.winograd or not ctx.prepack_weights:
        return []
    seen = _before_winograd(ctx)(mod)
    tasks: Dict[str, LayerTask] = {}
    for f in seen.functions.values():
        if not isinstance(f, Function):
            continue
        for b in collect(f, Binding):     # what conv_winograd visits: bound calls
            call = b.value
            if not isinstance(call, Call) or call.op != "conv2d" or ineligible(call) is not None:
                continue
            key = layer_workload(call)
            if key in tasks:
                tasks[key].calls += 1
                continue
            plan = conv_plan(call)
            tasks[key] = LayerTask(key, layer_name(call), call,
                                   [0] + [c.tile for c in plan.options], plan.choice() or 0)
    return list(tasks.values())


def layer_module(call: Call) -> IRModule:
    """The conv alone: ``main(x) = conv2d(x, weight)`` with the layer's constant weight."""
    from ..ir import FunctionBuilder, GraphVar
    from ..ops import call as op_call
    x = GraphVar("x", call.args[0].ty)
    fb = FunctionBuilder([x])
    with fb.dataflow():
        out = fb.emit_output(op_call("conv2d", x, Constant(call.args[1].data),
                                     **dict(call.attrs)))
    return IRModule({"main": fb.finish(out)})


def compile_option(call: Call, option: int, target: str, ctx: PassContext) -> str:
    """The library of the conv alone with ``option`` forced (0: direct); returns its path."""
    from ..executable import compile as compile_model
    from ..transform.conv_winograd import with_winograd
    from ..transform.pipeline import get_pipeline
    pipe = with_winograd(get_pipeline("default", ctx), ctx,
                         choose=lambda _call, _plan: option or None)
    return compile_model(pipe(layer_module(call)), target).library_path


def tune_layers(tasks: List[LayerTask], target: str, threads: int, ctx: PassContext,
                database, executor, rounds: int = 5,
                on_layer: Optional[Callable[[LayerReport], None]] = None) -> List[LayerReport]:
    """Measure every option of every layer (module docstring), appending one record per
    option to ``database``; a layer whose options all have records for this target and thread
    count already is not measured again. Returns one ``LayerReport`` per layer."""
    from .database import make_record, record_time
    from .workload import ArgSpec, rules_version
    rctx = ctx.replace(target=target, cores=threads, tuning_db=None).resolved()
    key = rctx.machine.key()
    rules = rules_version()
    reports = []
    for t in tasks:
        rep = LayerReport(t.kernel, t.calls, t.default)
        done = {r["decisions"].get(DECISION): r for r in database.query(t.workload, key, threads)
                if r.get("status") == "ok"}
        if all(o in done for o in t.options):
            rep.times = {o: record_time(done[o]) for o in t.options}
            rep.note = "measured before"
        else:
            try:
                libs = [compile_option(t.call, o, target, rctx) for o in t.options]
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
                            t.workload, key, threads, t.kernel, {DECISION: o}, "ok",
                            median_s=s, min_s=s, rules=rules, ops="conv2d", target_str=target))
                else:
                    rep.note = f"timing failed ({kind}): {str(value).splitlines()[0]}"
        reports.append(rep)
        if on_layer is not None:
            on_layer(rep)
    return reports


_warned: set = set()


def recorded_tile(call: Call, ctx: PassContext, options: List[int]) -> Optional[int]:
    """The best record's choice for the conv ``call`` in ``ctx.tuning_db`` (target and
    ``ctx.cores`` threads): 0 (direct) or a tile size; None without a record, or when the
    record's value is not among ``options`` any more (reported once)."""
    if not ctx.tuning_db:
        return None
    from .apply import StaleRecordWarning, best_records
    rctx = ctx.resolved()
    rec = best_records(ctx.tuning_db).get((layer_workload(call), rctx.machine.key(),
                                           int(rctx.cores or 1)))
    if rec is None:
        return None
    value = rec["decisions"].get(DECISION)
    if value not in options:
        if rec["workload"] not in _warned:
            _warned.add(rec["workload"])
            warnings.warn(f"tuning record for layer {rec.get('kernel')!r} chose {DECISION}="
                          f"{value!r}, not one of {options} any more; using the cost rule",
                          StaleRecordWarning, stacklevel=3)
        return None
    return value
