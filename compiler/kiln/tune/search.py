"""Candidates for one task: the default decisions, seeds (``add_seeds``: the best decisions of
other kernels of the same operators in the database), random samples, and evolution (mutate
one decision of a good candidate, cross two over), ranked by a cost model when there is one
(``cost_model.py``: among a pool of offspring, the one predicted fastest is proposed).

Every candidate is made by running the task's schedule rule with a sampler
(``Decisions(sampler=...)``), so each choice is picked among the options the rule offers *at
that point* (options depend on earlier choices: a one-row tile adds ``cols``): an illegal or
inconsistent candidate is never built. A candidate is its ``made`` map; ``Space.propose``
skips the ones already seen (measured before, in the database, or proposed in this run).

>>> space = Space(task, seed=0)                                  # doctest: +SKIP
>>> space.default()                                              # doctest: +SKIP
{'mr': 6, 'parallel': 1}
>>> space.propose(4, parents=[({'mr': 6, 'parallel': 1}, 1e-4)])  # doctest: +SKIP
"""
from __future__ import annotations

import random
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..schedule.decisions import Decisions
from ..transform.default_schedule import schedule_kernel
from .cost_model import CostModel, Features, features
from .database import decisions_key

Candidate = Dict[str, Any]


class Space:
    """The decisions of one task's rule (module docstring). ``explore``: the fraction of
    proposals that are fresh random samples rather than offspring of the best (epsilon-greedy).
    """

    def __init__(self, task, seed: int = 0, explore: float = 0.25,
                 model: Optional[CostModel] = None, pool: int = 8):
        self.task = task
        self.model, self.pool = model, pool
        self.feats: Dict[str, Features] = {}
        self.rng = random.Random(seed)
        self.explore = explore
        self.seen: set = set()
        self.exhausted = False
        self._default: Optional[Candidate] = None
        self.options: Dict[str, List[Any]] = {}
        self.seeds: List[Candidate] = []

    def _run(self, sampler: Optional[Callable[[str, Sequence[Any], Any], Any]]) -> Candidate:
        d = Decisions(sampler=sampler)
        func = schedule_kernel(self.task.func, self.task.ctx, d)
        for name, opts in d.options.items():
            known = self.options.setdefault(name, [])
            known.extend(o for o in opts if o not in known)
        if self.model is not None:
            self.feats.setdefault(decisions_key(d.made), features(func, d.made, *self._caches()))
        return dict(d.made)

    def _caches(self) -> Tuple[int, int]:
        """The target's L1 and L2 data cache sizes, for the cost model's traffic features."""
        m = self.task.ctx.machine
        return m.l1_bytes, m.l2_bytes

    def features_of(self, decisions: Candidate) -> Features:
        """The cost model's features of a candidate (scheduled again when not cached)."""
        k = decisions_key(decisions)
        if k not in self.feats:
            d = Decisions(fixed=decisions)
            self.feats[k] = features(schedule_kernel(self.task.func, self.task.ctx, d), d.made,
                                     *self._caches())
        return self.feats[k]

    def fit(self, measured: Sequence[Tuple[Candidate, float]]) -> bool:
        """Fit the cost model (if any) to ``(decisions, seconds)`` measured; True when it is
        trained."""
        if self.model is None or not measured:
            return False
        return self.model.fit([self.features_of(c) for c, _ in measured],
                              [t for _, t in measured])

    def default(self) -> Candidate:
        """The heuristic's decisions (what the default pipeline does)."""
        if self._default is None:
            self._default = self._run(None)
        return dict(self._default)

    def mark_seen(self, candidates: Iterable[Candidate]) -> None:
        for c in candidates:
            self.seen.add(decisions_key(c))

    def add_seeds(self, candidates: Iterable[Candidate]) -> int:
        """Queue candidates to propose first (e.g. the best decisions of other kernels of the
        same operators in the database): each is replayed on this kernel's rule
        (``Decisions(fixed=...)``), so a value that is not an option here falls back to the
        default and every seed is legal. Returns how many new ones were queued."""
        before = len(self.seeds)
        for c in candidates:
            d = Decisions(fixed=c)
            schedule_kernel(self.task.func, self.task.ctx, d)
            k = decisions_key(d.made)
            if k not in self.seen and all(decisions_key(x) != k for x in self.seeds):
                self.seeds.append(dict(d.made))
        return len(self.seeds) - before

    def random(self) -> Candidate:
        return self._run(lambda name, options, default: self.rng.choice(list(options)))

    def mutate(self, parent: Candidate) -> Candidate:
        """``parent`` with one decision changed to another of its options (later decisions
        keep the parent's value where it is still an option)."""
        names = [n for n in parent if len(self.options.get(n, ())) > 1] or list(parent)
        if not names:
            return self.random()
        change = self.rng.choice(names)

        def pick(name, options, default):
            options = list(options)
            if name == change:
                others = [o for o in options if o != parent.get(name)]
                return self.rng.choice(others or options)
            if name in parent and parent[name] in options:
                return parent[name]
            return self.rng.choice(options)
        return self._run(pick)

    def crossover(self, a: Candidate, b: Candidate) -> Candidate:
        """Each decision from ``a`` or ``b`` at random (whichever is an option)."""
        def pick(name, options, default):
            options = list(options)
            first, second = (a, b) if self.rng.random() < 0.5 else (b, a)
            for p in (first, second):
                if name in p and p[name] in options:
                    return p[name]
            return self.rng.choice(options)
        return self._run(pick)

    def propose(self, n: int, parents: Sequence[Tuple[Candidate, float]] = (),
                attempts: int = 20) -> List[Candidate]:
        """Up to ``n`` candidates not seen before: the queued seeds first, then with
        probability ``explore`` (or when
        there are no parents) a random sample, else a mutation of one of the better
        ``parents`` (``(decisions, seconds)``; tournament of two) or, now and then, a
        crossover of two; with a trained cost model, the offspring predicted fastest of a
        pool of ``pool``. Fewer than ``n`` when ``attempts`` tries per candidate find nothing
        new; none at all sets ``exhausted``."""
        ranked = sorted(parents, key=lambda p: p[1])
        use_model = self.model is not None and self.model.trained
        out: List[Candidate] = []
        while self.seeds and len(out) < n:          # seeds first (``add_seeds``)
            c = self.seeds.pop(0)
            if decisions_key(c) not in self.seen:
                self.seen.add(decisions_key(c))
                out.append(c)
        for _ in range(n - len(out)):
            explore = not ranked or self.rng.random() < self.explore
            want = 1 if explore or not use_model else self.pool
            pool: Dict[str, Candidate] = {}
            for _ in range(attempts * want):
                if len(pool) >= want:
                    break
                c = self.random() if explore else self._offspring(ranked)
                k = decisions_key(c)
                if k not in self.seen:
                    pool[k] = c
            for _ in range(0 if pool or explore else attempts):
                c = self.random()      # the parents' neighbourhood is measured: explore
                if decisions_key(c) not in self.seen:
                    pool[decisions_key(c)] = c
                    break
            if not pool:
                break
            keys = list(pool)
            if len(keys) > 1:
                pred = self.model.predict([self.features_of(pool[k]) for k in keys])
                keys = [keys[int(pred.argmin())]]
            self.seen.add(keys[0])
            out.append(pool[keys[0]])
        if not out:
            self.exhausted = True
        return out

    def _offspring(self, ranked: Sequence[Tuple[Candidate, float]]) -> Candidate:
        top = ranked[:max(2, min(8, len(ranked)))]
        if len(top) >= 2 and self.rng.random() < 0.3:
            a, b = self.rng.sample(top, 2)
            return self.crossover(a[0], b[0])
        x, y = self.rng.choice(top), self.rng.choice(top)
        return self.mutate(min(x, y, key=lambda p: p[1])[0])
