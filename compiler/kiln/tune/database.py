"""The tuning records: a JSON-lines file, one line per measured candidate.

A record (one JSON object per line; ``docs/tuning.md``)::

    {"workload": "3f0c...", "target": "x86_64 v256x16 fma2x4", "threads": 2,
     "rules": "a27b55d7d527", "kernel": "fused_matmul_add", "decisions": {"mr": 4, "parallel": 1},
     "status": "ok", "message": "", "median_s": 0.00123, "min_s": 0.00119,
     "kiln_version": "0.1.0", "time": 1767225600.0}

``workload`` is ``workload.workload_hash`` of the unscheduled kernel, ``target`` the target's
``Machine.key()``, ``threads`` the runtime threads it was timed with, ``rules`` the version of
the schedule rules that made the program (``workload.rules_version``); the four together key
a lookup. Queries see only the records of the running Kiln's rules unless asked for
``rules=ANY_RULES``; a record of other rules (or of none: written before rule versions) is
stale, and the callers report it once (``apply``, ``tuner``). ``status`` is ``"ok"`` or why the candidate failed (``"build_error"``,
``"run_error"``, ``"timeout"``, ``"wrong_result"``) with ``message`` saying more; a failed
record has no times and is never returned as the best. Candidates are ranked by
``record_time`` (the minimum time); a candidate with several records (measured again) by
its median record.

A record with ``"chosen": true`` is a verdict, not a timing: the tuner's end-to-end check
(``model_check.py``) compiled the whole model with these decisions and kept them (or kept the
default, when the kernels' own gains did not survive in the model). Where a key has verdicts,
the newest one decides what ``index_best`` (what compiles apply) returns; the ranking of
timings (``best_of``, what the search uses) leaves verdicts out.

Records are appended one line per ``os.write`` on a file opened with ``O_APPEND`` under an
exclusive ``fcntl.flock``, as each measurement finishes: a run stopped by Ctrl-C or a crash
keeps every record it finished, and several processes can append to one file. A reader skips
a line it cannot parse (counted in ``Database.skipped``) rather than failing.

>>> db = Database("tuning.jsonl")                                     # doctest: +SKIP
>>> db.best(workload, "x86_64 v256x16 fma2x4", threads=2)["decisions"]  # doctest: +SKIP
{'mr': 4, 'parallel': 1}
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

STATUSES = ("ok", "build_error", "run_error", "timeout", "wrong_result")

Key = Tuple[str, str, int]
ANY_RULES = "*"     # ``rules=ANY_RULES``: records of every rule version


def decisions_key(decisions: Dict[str, Any]) -> str:
    """A canonical text of a decisions map, for deduplication."""
    return json.dumps(decisions, sort_keys=True, separators=(",", ":"))


def current_rules(rules: Optional[str] = None) -> str:
    """``rules``, or the running Kiln's rule version when None."""
    if rules is not None:
        return rules
    from .workload import rules_version
    return rules_version()


def make_record(workload: str, target: str, threads: int, kernel: str,
                decisions: Dict[str, Any], status: str, message: str = "",
                median_s: Optional[float] = None, min_s: Optional[float] = None,
                rules: Optional[str] = None, **extra) -> Dict[str, Any]:
    """A record (module docstring), checked; ``rules`` defaults to the running Kiln's."""
    from .. import __version__
    if status not in STATUSES:
        raise ValueError(f"record status must be one of {STATUSES}, got {status!r}")
    if status == "ok" and (median_s is None or min_s is None):
        raise ValueError("an 'ok' record needs median_s and min_s")
    rec = {"workload": workload, "target": target, "threads": int(threads),
           "rules": current_rules(rules), "kernel": kernel, "decisions": dict(decisions), "status": status, "message": message,
           "median_s": median_s, "min_s": min_s, "kiln_version": __version__,
           "time": round(time.time(), 3)}
    rec.update(extra)
    return rec


def _valid(rec: Any) -> bool:
    return (isinstance(rec, dict) and isinstance(rec.get("workload"), str)
            and isinstance(rec.get("target"), str) and isinstance(rec.get("threads"), int)
            and isinstance(rec.get("decisions"), dict) and rec.get("status") in STATUSES
            and (rec["status"] != "ok" or isinstance(rec.get("median_s"), (int, float))))


def read_records(path: str) -> Tuple[List[Dict[str, Any]], int]:
    """(records, lines skipped) of the file at ``path``; no file: no records."""
    records, skipped = [], 0
    try:
        f = open(path, "r", encoding="utf-8")
    except FileNotFoundError:
        return records, 0
    with f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if _valid(rec):
                records.append(rec)
            else:
                skipped += 1
    return records, skipped


class Database:
    """The records in the file at ``path`` (module docstring). ``append`` writes one record
    at once; the query methods read the file as it is now."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.skipped = 0

    def append(self, record: Dict[str, Any]) -> None:
        """Append ``record`` as one line, under an exclusive lock (safe across processes)."""
        if not _valid(record):
            raise ValueError(f"not a tuning record: {record!r}")
        line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                view = memoryview(line)
                while view:                      # os.write may write less than asked
                    view = view[os.write(fd, view):]
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def records(self) -> List[Dict[str, Any]]:
        """Every well-formed record, in file order (``skipped`` counts the others)."""
        fd = None
        try:
            fd = os.open(self.path, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_SH)       # no half-written line from a writer
            records, self.skipped = read_records(self.path)
        except FileNotFoundError:
            records, self.skipped = [], 0
        finally:
            if fd is not None:
                os.close(fd)
        return records

    def query(self, workload: str, target: str, threads: int,
              rules: Optional[str] = None) -> List[Dict[str, Any]]:
        """The records of one workload on one target at one thread count, made by the rule
        version ``rules`` (default: the running Kiln's; ``ANY_RULES``: every version)."""
        want = None if rules == ANY_RULES else current_rules(rules)
        return [r for r in self.records() if (r["workload"], r["target"], r["threads"])
                == (workload, target, int(threads)) and (want is None or r.get("rules") == want)]

    def best(self, workload: str, target: str, threads: int,
             rules: Optional[str] = None) -> Optional[Dict[str, Any]]:
        """The fastest ``"ok"`` candidate's record for the key (``best_of``), or None."""
        return best_of(self.query(workload, target, threads, rules))

    def measured(self, workload: str, target: str, threads: int,
                 rules: Optional[str] = None) -> Dict[str, Dict[str, Any]]:
        """``decisions_key`` -> record of every candidate already measured for the key."""
        return {decisions_key(r["decisions"]): r
                for r in self.query(workload, target, threads, rules)}

    def __len__(self) -> int:
        return len(self.records())

    def __repr__(self) -> str:
        return f"kiln.tune.Database({self.path!r})"


def record_time(r: Dict[str, Any]) -> float:
    """The time a record ranks by: its ``min_s``, the fastest of its timings. Other work on
    the machine only ever adds time, so the minimum is the estimate it disturbs least (on a
    busy 2-core machine the same kernel's median varies 2x between runs, its minimum little)."""
    return r["min_s"] if r.get("min_s") is not None else r["median_s"]


def is_timing(r: Dict[str, Any]) -> bool:
    """Whether ``r`` is an ``"ok"`` timing of a candidate (not a failure, not a verdict)."""
    return r.get("status") == "ok" and r.get("median_s") is not None and not r.get("chosen")


def candidate_time(records: Iterable[Dict[str, Any]], decisions: Dict[str, Any]
                   ) -> Optional[Dict[str, Any]]:
    """The median ``"ok"`` record of one candidate (by ``record_time``; the lower of the two
    middle ones for an even count), or None when it has none. Verdicts are not timings."""
    key = decisions_key(decisions)
    rs = sorted((r for r in records if is_timing(r) and decisions_key(r["decisions"]) == key),
                key=record_time)
    return rs[(len(rs) - 1) // 2] if rs else None


def ranking(records: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The median ``"ok"`` record of each candidate (``candidate_time``), fastest first."""
    records = list(records)
    keys = {decisions_key(r["decisions"]): r["decisions"] for r in records if is_timing(r)}
    return sorted((candidate_time(records, d) for d in keys.values()),
                  key=lambda r: (record_time(r), r["median_s"]))


def best_of(records: Iterable[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The fastest ``"ok"`` candidate among ``records``, or None. A candidate measured more
    than once (the tuner's final check re-times the default and the best) is ranked by its
    median record (``candidate_time``), so one lucky timing on a busy machine does not win;
    that record is returned."""
    ranked = ranking(records)
    return ranked[0] if ranked else None


def verdict_of(records: Iterable[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The newest verdict (``"chosen": true``) among ``records``, or None (module docstring).
    Newest by position: records are appended, so a later run's verdict comes later."""
    found = None
    for r in records:
        if r.get("chosen") and r.get("status") == "ok":
            found = r
    return found


def chosen_of(records: Iterable[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """What a compile applies for one key: the newest verdict when there is one, else the
    fastest candidate (``best_of``)."""
    records = list(records)
    return verdict_of(records) or best_of(records)


def index_best(records: Iterable[Dict[str, Any]],
               rules: Optional[str] = None) -> Dict[Key, Dict[str, Any]]:
    """(workload, target, threads) -> the record a compile applies for each key
    (``chosen_of``: the newest verdict, else the fastest ``"ok"`` candidate), among the
    records of the rule version ``rules`` (default: the running Kiln's)."""
    want = current_rules(rules)
    groups: Dict[Key, List[Dict[str, Any]]] = {}
    for r in records:
        if r.get("rules") == want:
            groups.setdefault((r["workload"], r["target"], r["threads"]), []).append(r)
    out = {}
    for k, rs in groups.items():
        b = chosen_of(rs)
        if b is not None:
            out[k] = b
    return out


def merge(a, b, out) -> int:
    """Write the records of the files ``a`` and ``b`` (either may be missing) to ``out``
    (which may be one of them), without exact duplicates; returns how many were written.
    The output is written to a temporary file and renamed into place."""
    seen, lines = set(), []
    for path in (a, b):
        for rec in read_records(os.fspath(path))[0]:
            line = json.dumps(rec, sort_keys=True, separators=(",", ":"))
            if line not in seen:
                seen.add(line)
                lines.append(line)
    out = os.fspath(out)
    d = os.path.dirname(os.path.abspath(out))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".merge-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(lines)
