"""Applying tuning records: what ``default_schedule`` does when ``PassContext.tuning_db`` is set.

For each kernel it schedules, ``default_schedule.schedule_kernel`` asks ``recorded(func, ctx)``
for the best ``"ok"`` record of the key (``workload_hash`` of the unscheduled kernel,
``ctx.machine.key()``, ``ctx.cores`` as the thread count) and schedules the kernel with
``Decisions(fixed=record["decisions"])``; its ``kiln.schedule`` attribute then ends in
``; tuned``. A kernel with no record gets the default rule. A
record that no longer applies (a recorded value that is not among the rule's options any
more, or a rule that now makes other decisions than the record names) is reported once per
record and process with ``warnings.warn`` and the default schedule is used. So are the
records of a kernel made by other schedule rules (another ``rules`` version than this Kiln's,
``workload.rules_version``): skipped, reported once per kernel, the default used.

The file is read once per change (its size and modification time), not per kernel.
"""
from __future__ import annotations

import os
import threading
import warnings
from typing import Any, Dict, List, Optional, Tuple

from ..ir import PrimFunc
from ..transform.kernels import ATTR_SCHEDULE
from .database import Key, decisions_key, index_best, read_records
from .workload import rules_version, workload_hash

_Stale = Dict[Key, Tuple[Dict[str, Any], List[str]]]
_cache: Dict[str, Tuple[Tuple[int, int], Dict[Key, Dict[str, Any]], _Stale]] = {}
_warned: set = set()
_lock = threading.Lock()


class StaleRecordWarning(UserWarning):
    """A tuning record that no longer fits its kernel; the default schedule is used instead."""


def _load(path: str) -> Tuple[Dict[Key, Dict[str, Any]], _Stale]:
    """(key -> best record of this Kiln's rules, key -> (a record, rule versions) of the keys
    that only have records of other rules), cached until the file changes."""
    path = os.path.abspath(os.fspath(path))
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size)
    except FileNotFoundError:
        return {}, {}
    with _lock:
        hit = _cache.get(path)
        if hit is not None and hit[0] == stamp:
            return hit[1], hit[2]
    records = read_records(path)[0]
    rules = rules_version()
    index = index_best(records, rules)
    stale: _Stale = {}
    for r in records:
        key = (r["workload"], r["target"], r["threads"])
        if r.get("rules") != rules and key not in index:
            versions = stale.setdefault(key, (r, []))[1]
            if str(r.get("rules")) not in versions:
                versions.append(str(r.get("rules")))
    with _lock:
        _cache[path] = (stamp, index, stale)
    return index, stale


def best_records(path: str) -> Dict[Key, Dict[str, Any]]:
    """(workload, target, threads) -> best ``"ok"`` record of the database at ``path`` among
    this Kiln's rules, cached until the file changes. A missing file has no records."""
    return _load(path)[0]


def recorded(func, ctx) -> Optional[Dict[str, Any]]:
    """The best record of ``ctx.tuning_db`` for the unscheduled kernel ``func`` on ``ctx``'s
    target at ``ctx.cores`` threads, or None (reported once when the kernel only has records
    of other schedule rules)."""
    if not ctx.tuning_db:
        return None
    key = (workload_hash(func), ctx.machine.key(), int(ctx.cores or 1))
    index, stale = _load(ctx.tuning_db)
    rec = index.get(key)
    if rec is None and key in stale:
        _warn_rules_once(key, *stale[key])
    return rec


def schedule_from_db(func, ctx):
    """``func`` scheduled with its best record's decisions, or None when there is no record
    or the record no longer applies (reported once)."""
    from ..schedule.decisions import Decisions
    from ..transform.default_schedule import schedule_kernel
    rec = recorded(func, ctx)
    if rec is None:
        return None
    d = Decisions(fixed=rec["decisions"])
    out = schedule_kernel(func, ctx, d)
    stale = list(d.stale) + sorted(set(rec["decisions"]) - set(d.made))
    missing = sorted(set(d.made) - set(rec["decisions"]))
    if stale or missing:
        _warn_once(rec, stale, missing)
        return None
    if not d.made:          # a rule without decisions: the record changes nothing
        return None
    attrs = dict(out.attrs)
    attrs[ATTR_SCHEDULE] = f"{attrs.get(ATTR_SCHEDULE, '')}; tuned"
    return PrimFunc(out.params, out.body, tuple(attrs.items()))


def _warn_once(rec: Dict[str, Any], stale, missing) -> None:
    key = (rec["workload"], rec["target"], rec["threads"], decisions_key(rec["decisions"]))
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    why = []
    if stale:
        why.append(f"recorded decisions {stale} are not options of the rule any more")
    if missing:
        why.append(f"the rule now also decides {missing}")
    warnings.warn(f"tuning record for kernel {rec.get('kernel')!r} (workload {rec['workload']}) "
                  f"no longer applies: {'; '.join(why)}; using the default schedule",
                  StaleRecordWarning, stacklevel=3)


def _warn_rules_once(key: Key, rec: Dict[str, Any], versions: List[str]) -> None:
    with _lock:
        if ("rules",) + key in _warned:
            return
        _warned.add(("rules",) + key)
    old = ", ".join("none (before rule versions)" if v == "None" else v for v in versions)
    warnings.warn(f"tuning records for kernel {rec.get('kernel')!r} (workload {key[0]}) were "
                  f"measured with other schedule rules (rules {old}; this Kiln's are "
                  f"{rules_version()}, Kiln {rec.get('kiln_version', '?')} wrote them): skipped, "
                  f"using the default schedule; tune again to replace them",
                  StaleRecordWarning, stacklevel=3)


def describe_applied(mod) -> str:
    """``"tuning records applied to 2 of 3 kernels: matmul, add"``: which kernels of a
    scheduled module got their schedule from a record (``kiln.schedule`` ends in ``tuned``)."""
    kernels = [(n, f) for n, f in mod.functions.items() if isinstance(f, PrimFunc)]
    tuned = [n for n, f in kernels if str(dict(f.attrs).get(ATTR_SCHEDULE, "")).endswith("; tuned")]
    return (f"tuning records applied to {len(tuned)} of {len(kernels)} kernels"
            + (f": {', '.join(tuned)}" if tuned else ""))
