"""Scheduled kernels kept on disk, so that a kernel scheduled once is not scheduled again.

``default_schedule`` runs each unscheduled kernel through its rules: Python that costs a few to
a hundred milliseconds a kernel, paid again by every compile of the same model and, within a
test suite or a tuning session, by every model that makes the same kernel (in a cold run of
Kiln's suite, 40% of the kernels repeat one made before). ``scheduled(func, ctx, schedule)``
looks the result up under a hash of the pickled kernel, the ``PassContext`` (target, machine,
tile options) and Kiln's sources (``kiln.codegen.worker.code_digest``: any edit starts new
records, like the ``.lowered`` records of codegen), in ``<ctx.cache_dir>/schedules``
(``kiln.compile`` sets it to ``BuildOptions.cache_dir``; None: ``KILN_CACHE_DIR`` or
``~/.cache/kiln``). A record that is missing or does not read back is made again; a kernel
scheduled from a tuning database is not cached (the database decides it).
"""
from __future__ import annotations

import dataclasses
import os
import pickle
from typing import Callable, Optional

from ..ir import PrimFunc
from .infra import PassContext


# Fields of PassContext that say where things are kept, not how kernels are scheduled.
_NOT_SCHEDULING = ("cache_dir",)


def context_key(ctx: PassContext) -> str:
    """The options a schedule depends on, as text: every field of the (resolved) context but
    ``cache_dir``, the target by its string and its machine by every field of it. All of
    them: ``Machine.key()`` leaves out the caches and cores, on which the rules' choices
    (K chunks, row blocks, loop orders, splits) depend, so a cache shared between two AVX-512
    hosts (Zen 4 with 1 MiB of L2, a Xeon with 2 MiB) would have served one's schedules to the
    other."""
    parts = [f"machine={ctx.machine!r}"]
    for f in dataclasses.fields(ctx):
        if f.name in _NOT_SCHEDULING:
            continue
        v = getattr(ctx, f.name)
        parts.append(f"{f.name}={v if f.name == 'target' else repr(v)}")
    return ";".join(parts)


def record_path(func: PrimFunc, ctx: PassContext) -> Optional[str]:
    """Where the schedule of ``func`` under ``ctx`` is kept, or None when it is not cached (no
    code digest, a tuning database, or a kernel that does not pickle)."""
    from ..codegen.emit import default_cache_dir
    from ..codegen.worker import code_digest, record_key
    key = None if ctx.tuning_db else record_key(code_digest(), [context_key(ctx)], func)
    if key is None:
        return None
    return os.path.join(ctx.cache_dir or default_cache_dir(), "schedules", key + ".sched")


def scheduled(func: PrimFunc, ctx: PassContext, schedule: Callable[[PrimFunc], PrimFunc]) -> PrimFunc:
    """``schedule(func)``, read from the cache when ``func`` was scheduled before under ``ctx``
    by the same Kiln sources, else computed and written there."""
    from ..codegen.cache_limit import touch
    from ..codegen.worker import read_record, write_atomic
    path = record_path(func, ctx)
    if path is None:
        return schedule(func)
    hit = read_record(path)
    if isinstance(hit, PrimFunc):
        touch(path)     # used: the cache's size limit evicts the least recently used first
        return hit
    out = schedule(func)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, pickle.dumps(out, protocol=4))
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass   # a cache that cannot be written only costs the next compile this schedule
    return out
