"""Timing a function the way the tutorials users bring do it: ``time_evaluator``.

>>> timer = vm.time_evaluator("forward", kiln.cpu(), number=10, repeat=3)   # doctest: +SKIP
>>> result = timer(x, *params)                                             # doctest: +SKIP
>>> result.mean, result.median, result.std                                 # doctest: +SKIP
(0.000112, 0.000111, 2.1e-06)

Each of ``repeat`` measurements runs the function ``number`` times back to back and records
the mean seconds per call; ``min_repeat_ms`` raises ``number`` until one measurement takes at
least that long (short kernels are otherwise lost in the clock's resolution). One call before
measuring warms caches and the thread pool.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, NamedTuple, Tuple


class BenchmarkResult(NamedTuple):
    """Seconds per call: ``results`` (one per repeat) and their mean, median, std, min, max."""
    results: Tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def std(self) -> float:
        """Population standard deviation (0 for one repeat)."""
        return statistics.pstdev(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    def __str__(self):
        ms = [v * 1e3 for v in (self.mean, self.median, self.max, self.min, self.std)]
        return ("Execution time summary:\n"
                " mean (ms)   median (ms)    max (ms)     min (ms)     std (ms)\n"
                + "  ".join(f"{v:10.4f}" for v in ms))


def time_evaluator(func: Callable, number: int = 10, repeat: int = 1,
                   min_repeat_ms: float = 0) -> Callable[..., BenchmarkResult]:
    """A function that times ``func(*args)``: ``time_evaluator(f, number=10, repeat=3)(*args)``
    returns a ``BenchmarkResult``. ``number`` calls per measurement, ``repeat`` measurements."""
    if number < 1 or repeat < 1:
        raise ValueError(f"time_evaluator: number ({number}) and repeat ({repeat}) must be >= 1")

    def evaluate(*args) -> BenchmarkResult:
        func(*args)   # warm-up, not measured
        n, results = number, []
        for _ in range(repeat):
            while True:
                start = time.perf_counter()
                for _ in range(n):
                    func(*args)
                elapsed = time.perf_counter() - start
                if elapsed * 1e3 >= min_repeat_ms:
                    break
                # Scale up to reach the minimum (at least doubling), as the tutorials' runtime does.
                n = max(n * 2, int(n * min_repeat_ms / max(elapsed * 1e3, 1e-3)) + 1)
            results.append(elapsed / n)
        return BenchmarkResult(tuple(results))
    return evaluate


__all__ = ["BenchmarkResult", "time_evaluator"]
