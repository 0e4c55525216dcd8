"""Keeping Kiln's build cache under a size limit, least recently used files first.

Every build adds to the cache (``kiln.codegen.build_library``): each kernel's object and
``.lowered`` record, each kernel's schedule (``schedules/``), and each linked library. A model's
library carries its weights (a ResNet-18 is 75 MB of them, Winograd-transformed), so without a
limit the folder grows by a model's size for every distinct set of weights ever compiled.

The limit is ``BuildOptions.cache_limit`` (bytes), by default ``KILN_CACHE_LIMIT`` (``"2G"``,
``"512M"``, ``"0"`` for none) or 2 GiB. After a build that linked a new library the cache is
trimmed to 80 % of the limit, the files unused for longest going first. A file counts as used
when it is written or hit (``touch``). Nothing used in the last ``GRACE_S`` seconds goes: other
processes may be building with it (a build touches its objects again just before it links) or
about to load a library that a build has just returned. A scan reads every entry's size (about
0.1 s for 20,000 files), so it runs at most every ``SCAN_EVERY_S`` seconds per cache folder,
or at once after a library of over a sixteenth of the limit.

>>> parse_size("512M")
536870912
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

DEFAULT_LIMIT = 2 << 30
TRIM_TO = 0.8
GRACE_S = 60.0
SCAN_EVERY_S = 30.0
# The marker whose modification time says when the folder was last scanned.
MARKER = ".last-trim"
# What a build leaves in the cache; anything else there (a user's file, a temp dir of a build
# in progress) is not Kiln's to delete.
_SUFFIXES = (".so", ".o", ".lowered", ".sched")

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from ``"300M"``, ``"2G"``, ``"1.5G"``, ``"4096"`` (binary units, an optional
    trailing ``B``/``iB``). Raises ValueError naming the text otherwise."""
    s = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    unit = s[-1:] if s[-1:] in _UNITS else ""
    try:
        value = float(s[:len(s) - len(unit)] if unit else s)
    except ValueError:
        value = -1.0
    if value < 0:
        raise ValueError(f"not a size: {text!r} (expected e.g. '512M', '2G' or a number of bytes)")
    return int(value * _UNITS[unit])


def default_cache_limit() -> int:
    """``KILN_CACHE_LIMIT`` in bytes when set (0: no limit), else 2 GiB."""
    text = os.environ.get("KILN_CACHE_LIMIT")
    if not text:
        return DEFAULT_LIMIT
    try:
        return parse_size(text)
    except ValueError as e:
        raise ValueError(f"KILN_CACHE_LIMIT: {e}") from None


def touch(path: str) -> bool:
    """Mark a cache file as used now; False when it is gone (evicted meanwhile)."""
    try:
        os.utime(path)
        return True
    except OSError:
        return False


@dataclass(frozen=True)
class Entry:
    path: str
    size: int
    used: float     # modification time: written or last hit


def entries(cache_dir: str) -> Iterator[Entry]:
    """The files a build left in ``cache_dir``: libraries at the top, objects and records in
    ``objects/``, schedules in ``schedules/``."""
    for folder in (cache_dir, os.path.join(cache_dir, "objects"), os.path.join(cache_dir, "schedules")):
        try:
            with os.scandir(folder) as it:
                for e in it:
                    if not e.name.endswith(_SUFFIXES):
                        continue
                    try:
                        if e.is_file(follow_symlinks=False):
                            st = e.stat(follow_symlinks=False)
                            yield Entry(e.path, st.st_size, st.st_mtime)
                    except OSError:
                        continue    # removed by another process while we looked
        except OSError:
            continue


@dataclass(frozen=True)
class TrimReport:
    size_before: int
    size_after: int
    removed: List[str]


def trim(cache_dir: str, limit: int, *, now: Optional[float] = None,
         grace_s: float = GRACE_S, to: Optional[float] = None) -> TrimReport:
    """Remove the least recently used files of ``cache_dir`` until it holds at most
    ``to * limit`` bytes (``to``: ``TRIM_TO`` by default; 0 removes every file it may);
    does nothing while it holds at most ``limit``. Files used in the last ``grace_s`` seconds
    stay, so the result may stay over the limit."""
    now = time.time() if now is None else now
    to = TRIM_TO if to is None else to
    found = list(entries(cache_dir))
    total = sum(e.size for e in found)
    removed: List[str] = []
    if limit <= 0 or total <= limit:
        return TrimReport(total, total, removed)
    size = total
    for e in sorted(found, key=lambda e: e.used):
        if size <= to * limit or e.used > now - grace_s:
            break
        try:
            # Checked again just before: a hit since the scan keeps the file.
            if os.stat(e.path).st_mtime > now - grace_s:
                continue
            os.remove(e.path)
        except OSError:
            continue
        size -= e.size
        removed.append(e.path)
    return TrimReport(total, size, removed)


def clear(cache_dir: str) -> TrimReport:
    """Remove every file a build left in ``cache_dir`` but those used in the last
    ``GRACE_S`` seconds (another process may be building with them)."""
    return trim(cache_dir, 1, to=0.0)


def after_build(cache_dir: str, limit: int, new_bytes: int) -> Optional[TrimReport]:
    """Trim ``cache_dir`` after a build added ``new_bytes`` to it, unless it was scanned in the
    last ``SCAN_EVERY_S`` seconds and ``new_bytes`` is under a sixteenth of ``limit``. Returns
    the report, or None when it did not scan."""
    if limit <= 0:
        return None
    marker = os.path.join(cache_dir, MARKER)
    now = time.time()
    try:
        recent = now - os.stat(marker).st_mtime < SCAN_EVERY_S
    except OSError:
        recent = False
    if recent and new_bytes * 16 < limit:
        return None
    try:
        with open(marker, "a"):
            pass
        os.utime(marker)
    except OSError:
        pass    # a read-only marker only means more scans
    return trim(cache_dir, limit, now=now)


def usage(cache_dir: str) -> Tuple[int, int]:
    """``(files, bytes)`` of what builds left in ``cache_dir``."""
    found = list(entries(cache_dir))
    return len(found), sum(e.size for e in found)
