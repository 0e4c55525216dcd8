"""Tuning curves: the best model latency found so far against trials and against wall time.

``plot_curves({"resnet18": report.curve, ...}, "curve.png")`` draws one line per run in two
panels (left: against the trials measured, right: against the seconds since the run
started), each as a step line, since the best so far only changes when a measurement lands;
``references`` adds horizontal lines (the default schedules, onnxruntime, ...).
``TuneReport.plot(path)`` and ``kiln tune --plot curve.png`` draw one run with its default.

A curve is ``TuneReport.curve``: ``(trials, seconds, model estimate in seconds)`` per
measurement once every kernel's default has been measured (the estimate, the sum over kernels
of calls x best time, is only a model latency from then on). matplotlib (the ``tune`` extra)
is drawn through its object API and the Agg canvas, so a caller's own pyplot state and backend
are left alone.
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence, Tuple

Point = Tuple[int, float, Optional[float]]


def plot_curves(curves: Dict[str, Sequence[Point]], path,
                references: Optional[Dict[str, float]] = None,
                title: str = "kiln tune: best model latency so far",
                rechecks: Optional[Dict[str, float]] = None) -> str:
    """Draw ``curves`` (label -> points, as ``TuneReport.curve``) and the ``references``
    (label -> seconds) to the image file ``path`` (the format from its extension: .png, .svg,
    .pdf); returns the path. ``rechecks`` (label -> ``TuneReport.recheck_at``) marks where
    each run's final re-check began: from there candidates are timed again and ranked by
    their median, so the curve may rise. Raises ``ImportError`` without matplotlib and
    ``ValueError`` when no curve has a point."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("plotting tuning curves needs matplotlib: "
                          "pip install 'kiln[tune]' (or pip install matplotlib)") from None
    drawn = {k: [p for p in v if p[2] is not None] for k, v in curves.items()}
    if not any(drawn.values()):
        raise ValueError("no tuning curve has a point to draw (was every default measured?)")
    # milliseconds, or microseconds for a model under a millisecond
    top = max([p[2] for v in drawn.values() for p in v] + list((references or {}).values()))
    scale, unit = (1e3, "ms") if top >= 1e-3 else (1e6, "us")
    fig = Figure(figsize=(11, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    ax_trials, ax_time = fig.subplots(1, 2)
    for label, pts in drawn.items():
        if not pts:
            continue
        ys = [p[2] * scale for p in pts]
        line, = ax_trials.step([p[0] for p in pts], ys, where="post", label=label,
                               marker=".", markersize=3)
        ax_time.step([p[1] for p in pts], ys, where="post", label=label, marker=".",
                     markersize=3, color=line.get_color())
    for label, at in (rechecks or {}).items():
        pts = drawn.get(label) or []
        if at is None or not pts:
            continue
        before = [p for p in pts if p[1] <= at]
        trial = before[-1][0] if before else pts[0][0]
        ax_trials.axvline(trial, linestyle=":", color="grey", linewidth=1)
        ax_time.axvline(at, linestyle=":", color="grey", linewidth=1)
        ax_time.annotate("re-check", (at, 0.5), xycoords=("data", "axes fraction"),
                         ha="right", va="center", rotation=90, fontsize="small", color="grey")
    for k, (label, seconds) in enumerate((references or {}).items()):
        for ax in (ax_trials, ax_time):
            ax.axhline(seconds * scale, linestyle="--", linewidth=1, color=f"C{(k + 5) % 10}",
                       label=label if ax is ax_trials else None)
    ax_trials.set_xlabel("trials measured")
    ax_time.set_xlabel("wall time (s)")
    for ax in (ax_trials, ax_time):
        ax.set_ylabel(f"model latency estimate ({unit})")
        ax.grid(True, alpha=0.3)
    ax_trials.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fig.savefig(path)
    return path


def plot_report(report, path) -> str:
    """One ``TuneReport``'s curve, with its default schedules' estimate (the curve's first
    point: every kernel's default measured, nothing else yet) as a reference, and the start
    of its final re-check marked."""
    refs = {}
    first = next((p[2] for p in report.curve if p[2] is not None), None)
    if first is not None:
        refs["default schedules"] = first
    label = f"{report.target} at {report.threads} thread(s)"
    return plot_curves({label: report.curve}, path, refs,
                       rechecks={label: getattr(report, "recheck_at", None)})
