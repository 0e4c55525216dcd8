"""What identifies a kernel to tune, stably across processes and runs.

``workload_hash(func)``: a sha256 of the unscheduled PrimFunc's structure, consistent with
``structural_equal`` (names of variables and buffers do not matter; block names, constants,
dtypes, shapes and attributes do). ``kiln.ir.structural_hash`` cannot serve as a key: it is
built on Python's ``hash()``, which is salted per process for strings (PYTHONHASHSEED), so
the same kernel hashes differently in every run (the platform-dependent hash of
apache/tvm#14188). The walk here feeds the same fields into a sha256 instead.

``arg_specs(func)``: each parameter's shape, dtype and whether the kernel writes it (an
output), what a measurement needs to make arguments.

``rules_version()``: the version of the schedule rules, part of every record's key. A record
says "these decisions gave this time"; it only means that while the rules turn the decisions
into the same program. A rule whose decisions keep their names and options but change meaning
(tinygrad#11908: results served after a config change) is caught by the version changing.

>>> from kiln.ir import Buffer
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
from dataclasses import dataclass
from typing import List, Tuple

import numpy as np

from ..ir import IRModule, PrimFunc, collect
from ..ir.expr import Buffer, IntImm, Node, Var
from ..ir.functor import node_fields
from ..ir.graph import GraphVar
from ..ir.stmt import BufferStore, Block
from ..transform.kernels import ATTR_DECISIONS, ATTR_SCHEDULE, ATTR_SCHEDULED_FOR

# Attributes a schedule adds; a workload is the kernel before scheduling.
_SCHEDULE_ATTRS = (ATTR_SCHEDULE, ATTR_SCHEDULED_FOR, ATTR_DECISIONS)


def workload_hash(func: PrimFunc) -> str:
    """The stable key of an unscheduled kernel: 24 hex digits of a sha256 over its structure
    (module docstring). Equal for structurally equal kernels, in any process."""
    if not isinstance(func, PrimFunc):
        raise TypeError(f"workload_hash takes a PrimFunc, got {type(func).__name__}")
    attrs = tuple((k, v) for k, v in func.attrs if k not in _SCHEDULE_ATTRS)
    func = PrimFunc(func.params, func.body, attrs)
    h = hashlib.sha256()
    ids = {}

    def put(tag: str, text: str = "") -> None:
        h.update(f"{tag}:{len(text)}:{text};".encode())

    def walk(x) -> None:
        if isinstance(x, (Var, Buffer, GraphVar)):
            if id(x) in ids:
                put("use", str(ids[id(x)]))
                return
            ids[id(x)] = len(ids)
            put("def", type(x).__name__)
            if isinstance(x, GraphVar):
                walk(x.ty)
            else:
                put("dtype", x.dtype)
                if isinstance(x, Buffer):
                    put("scope", x.scope)
                    walk(x.shape)
            return
        if isinstance(x, IRModule):
            for k in sorted(x.functions):
                ids.clear()
                put("func", k)
                walk(x.functions[k])
            return
        if isinstance(x, Node) and dataclasses.is_dataclass(x):
            put("node", type(x).__name__)
            for f in node_fields(type(x)):
                put("field", f)
                walk(getattr(x, f))
            return
        if isinstance(x, (tuple, list)):
            put("seq", str(len(x)))
            for v in x:
                walk(v)
            return
        if isinstance(x, dict):
            put("map", str(len(x)))
            for k in sorted(x):
                put("key", repr(k))
                walk(x[k])
            return
        if isinstance(x, np.ndarray):
            put("array", f"{x.dtype.str}{x.shape}")
            h.update(np.ascontiguousarray(x).tobytes())
            return
        if x is None or isinstance(x, (bool, int, float, str, bytes)):
            put(type(x).__name__, repr(x))
            return
        text = repr(x)
        if " at 0x" in text:        # an object whose repr is its address: not a stable key
            raise TypeError(f"workload_hash: cannot hash a {type(x).__name__} stably")
        put(type(x).__name__, text)

    walk(func)
    return h.hexdigest()[:24]


@dataclass(frozen=True)
class ArgSpec:
    """One kernel parameter: its shape, dtype and whether the kernel writes it."""
    shape: Tuple[int, ...]
    dtype: str
    output: bool


def arg_specs(func: PrimFunc) -> List[ArgSpec]:
    """The parameters of ``func`` as ``ArgSpec``s; raises ``ValueError`` for a kernel with a
    symbolic shape or a scalar parameter (a measurement needs concrete arrays)."""
    written = set()
    for s in collect(func.body, BufferStore):
        written.add(id(s.buffer))
    for b in collect(func.body, Block):     # blocks that declare writes (opaque stores)
        for region in getattr(b, "writes", ()) or ():
            buf = getattr(region, "buffer", None)
            if buf is not None:
                written.add(id(buf))
    specs = []
    for p in func.params:
        if not isinstance(p, Buffer):
            raise ValueError(f"parameter {p.name!r} is a scalar; only kernels over buffers are tuned")
        shape = []
        for d in p.shape:
            if not isinstance(d, IntImm):
                raise ValueError(f"parameter {p.name!r} has the symbolic shape "
                                 f"{tuple(str(x) for x in p.shape)}; pin the shape to tune it")
            shape.append(d.value)
        specs.append(ArgSpec(tuple(shape), p.dtype, id(p) in written))
    if not any(s.output for s in specs):
        raise ValueError("the kernel writes none of its parameters")
    return specs


# The code that turns decisions into a schedule: the rules (``transform/default_schedule.py``,
# ``transform/schedule_*.py``) and the schedule primitives they call (``schedule/``).
_RULE_FILES = (("transform", r"(default_schedule|schedule_\w+)\.py"), ("schedule", r"\w+\.py"))
_EXPLICIT = re.compile(r"^RULE_VERSION\s*=\s*(.+?)\s*$", re.M)


@functools.lru_cache(maxsize=None)
def rules_version() -> str:
    """12 hex digits naming the schedule rules of this Kiln (``rules_hash`` of the package's
    own sources). Without the sources (a build without .py files), the Kiln version stands
    in."""
    from .. import __version__
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return rules_hash(root) or hashlib.sha256(f"kiln {__version__}".encode()).hexdigest()[:12]


def rules_hash(root: str) -> str:
    """A sha256 (12 hex digits) over each rule and schedule-primitive module under the package
    directory ``root`` (``_RULE_FILES``), by file name and contents; "" when there is none. A
    module that states ``RULE_VERSION = ...`` at top level contributes that line instead of
    its text, so a rule can keep its records through edits that do not change what its
    decisions mean (and invalidate them by changing the value)."""
    h = hashlib.sha256()
    found = 0
    for sub, pattern in _RULE_FILES:
        d = os.path.join(root, sub)
        try:
            names = sorted(n for n in os.listdir(d) if re.fullmatch(pattern, n))
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(d, name), "r", encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            m = _EXPLICIT.search(text)
            h.update(f"{sub}/{name}:{m.group(1) if m else text}\0".encode())
            found += 1
    return h.hexdigest()[:12] if found else ""
