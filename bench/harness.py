"""Timing helpers shared by the benchmarks."""
from __future__ import annotations

import time


def time_best(fn, repeat: int = 10, warmup: int = 2) -> float:
    """Best wall time of ``fn()`` in seconds over ``repeat`` runs (after ``warmup`` runs).
    The best, not the mean: on a shared 2-core machine the minimum is the stable statistic."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def table(rows: list[dict]) -> str:
    """Rows as a Markdown table (columns from the first row)."""
    if not rows:
        return ""
    cols = list(rows[0])
    fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(out)
