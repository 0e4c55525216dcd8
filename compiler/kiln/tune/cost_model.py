"""A learned cost model that ranks candidates before they are built.

``features(func, decisions)`` describes a scheduled kernel by its loop nest: how many loops
and how deep, the parallel work (product of the parallel loops' extents), the vector width,
the unroll factor of the register tile, the innermost extents, the work (iterations of every
store), the bytes kept in local (register) buffers, its memory behaviour (``access.py``:
flops, bytes touched per loop level as traffic into L1 and L2 of the target's sizes, and
the arithmetic intensity against each), plus the decisions themselves as numbers.
``CostModel`` fits gradient-boosted trees (LightGBM, the ``tune`` extra; without it there is
no model and the search stays random and evolutionary) to log(seconds) of one task's
measured candidates and predicts the others; ``search.Space`` uses it to pick, among many
offspring, the ones predicted fastest.

>>> m = CostModel()                                          # doctest: +SKIP
>>> m.fit([features(f1, d1), features(f2, d2), ...], [t1, t2, ...])
>>> m.predict([features(f3, d3)])                            # log seconds
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence

import numpy as np

from ..ir import PrimFunc
from ..ir.expr import IntImm
from ..ir.stmt import Block, BlockRealize, BufferStore, For, SeqStmt, IfThenElse
from .access import access_features

Features = Dict[str, float]


def _extent(loop: For) -> int:
    return loop.extent.value if isinstance(loop.extent, IntImm) else 64


def features(func: PrimFunc, decisions: Dict[str, Any], l1_bytes: int = 32 << 10,
             l2_bytes: int = 1 << 20) -> Features:
    """The loop-nest features of the scheduled ``func`` and its ``decisions`` (module
    docstring), for caches of ``l1_bytes`` and ``l2_bytes``; extents are counted in log2."""
    f = {"loops": 0.0, "depth": 0.0, "parallel": 0.0, "vector": 0.0, "unroll": 0.0,
         "inner": 0.0, "work": 0.0, "blocks": 0.0, "local_bytes": 0.0, "stores": 0.0}
    work = 0.0
    inners: List[int] = []

    def visit(s, stack: List[For]) -> None:
        nonlocal work
        if isinstance(s, For):
            f["loops"] += 1
            f["depth"] = max(f["depth"], len(stack) + 1)
            stack = stack + [s]
            if not _has_loop(s.body):
                inners.append(_extent(s))
            visit(s.body, stack)
            return
        if isinstance(s, BufferStore):
            f["stores"] += 1
            work += math.prod(_extent(x) for x in stack) if stack else 1
            par = [_extent(x) for x in stack if x.kind == "parallel"]
            vec = [_extent(x) for x in stack if x.kind == "vectorized"]
            unr = [_extent(x) for x in stack if x.kind == "unrolled"]
            f["parallel"] = max(f["parallel"], math.log2(math.prod(par)) if par else 0.0)
            f["vector"] = max(f["vector"], math.log2(math.prod(vec)) if vec else 0.0)
            f["unroll"] = max(f["unroll"], math.log2(math.prod(unr)) if unr else 0.0)
            return
        if isinstance(s, BlockRealize):
            visit(s.block, stack)
            return
        if isinstance(s, Block):
            f["blocks"] += 1
            for b in s.alloc_buffers:
                if b.scope == "local":
                    n = math.prod(d.value if isinstance(d, IntImm) else 1 for d in b.shape)
                    f["local_bytes"] += n * 4
            if s.init is not None:
                visit(s.init, stack)
            visit(s.body, stack)
            return
        for c in _children(s):
            visit(c, stack)

    visit(func.body, [])
    f["work"] = math.log2(max(work, 1.0))
    f["inner"] = math.log2(max(1.0, float(np.mean(inners)))) if inners else 0.0
    f["local_bytes"] = math.log2(f["local_bytes"] + 1)
    try:
        f.update(access_features(func, l1_bytes, l2_bytes))
    except Exception:   # noqa: BLE001 - a kernel the analysis does not cover: no memory features
        pass            # (missing features are NaN to the model); never stop the tuner for it
    for name, v in decisions.items():
        if isinstance(v, (bool, int, float)):
            f["d:" + name] = float(v)
    return f


def _children(s) -> Sequence:
    if isinstance(s, SeqStmt):
        return s.seq
    if isinstance(s, IfThenElse):
        return [x for x in (s.then_case, s.else_case) if x is not None]
    if isinstance(s, (For,)):
        return [s.body]
    return []


def _has_loop(s) -> bool:
    if isinstance(s, For):
        return True
    if isinstance(s, BlockRealize):
        return _has_loop(s.block)
    if isinstance(s, Block):
        return _has_loop(s.body) or (s.init is not None and _has_loop(s.init))
    return any(_has_loop(c) for c in _children(s))


def available() -> bool:
    """True when LightGBM can be imported (``pip install kiln[tune]``)."""
    try:
        import lightgbm  # noqa: F401
    except ImportError:
        return False
    return True


class CostModel:
    """Gradient-boosted trees over ``features``, fitted to log(seconds) of measured candidates
    of one task. ``fit`` needs ``min_samples`` of them; until then ``trained`` is False."""

    def __init__(self, min_samples: int = 8, rounds: int = 60, seed: int = 0):
        self.min_samples, self.rounds, self.seed = min_samples, rounds, seed
        self.names: List[str] = []
        self.booster = None

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def _matrix(self, feats: Sequence[Features]) -> np.ndarray:
        return np.array([[f.get(n, np.nan) for n in self.names] for f in feats], dtype=float)

    def fit(self, feats: Sequence[Features], seconds: Sequence[float]) -> bool:
        """Fit to the candidates ``feats`` measured at ``seconds``; returns ``trained``."""
        if len(feats) < self.min_samples or not available():
            return self.trained
        import lightgbm as lgb
        self.names = sorted({k for f in feats for k in f})
        x = self._matrix(feats)
        y = np.log(np.asarray(seconds, dtype=float))
        params = {"objective": "regression", "learning_rate": 0.2, "num_leaves": 8,
                  "min_data_in_leaf": 2, "min_data_in_bin": 1, "verbose": -1,
                  "num_threads": 1, "seed": self.seed, "deterministic": True}
        data = lgb.Dataset(x, y, params={"verbose": -1, "min_data_in_bin": 1})
        self.booster = lgb.train(params, data, num_boost_round=self.rounds)
        return True

    def predict(self, feats: Sequence[Features]) -> np.ndarray:
        """Predicted log(seconds) of each candidate (``fit`` first)."""
        if self.booster is None:
            raise RuntimeError("CostModel.predict before a successful fit")
        return np.asarray(self.booster.predict(self._matrix(feats)), dtype=float)
