"""Kernel jobs of ``build_library``: one PrimFunc -> its LLVM module -> its object file (cached),
run in this process or in a worker process started by ``kiln.codegen.emit``.

Two caches, both in ``objects_dir``: ``KEY.o`` is the object of the LLVM IR whose hash is KEY
(the IR text is the whole input of LLVM), and ``LKEY.lowered`` remembers which KEY (and
kernel table entry and notes) a PrimFunc lowered to, LKEY being a hash of the pickled
PrimFunc, the job's salt and Kiln's own sources (``code_digest``). A job whose ``.lowered``
record and object both exist skips lowering too, which is most of a warm compile's time.

A worker is ``python -I -c BOOT PATH_JSON`` (``BOOT`` puts the parent's sys.path back and calls
``main``). It reads jobs from stdin and answers on stdout, each message a pickle preceded by its
length (8 bytes, little-endian): a job is ``KernelJob``, an answer ``(key, info, notes, error)``
from ``run_job``; at end of input it exits. Everything a job needs travels in it, and its
result depends on nothing else, so the objects are the same whichever process made them.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import struct
import sys
from dataclasses import dataclass, replace
from typing import Optional

from .cache_limit import touch

BOOT = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
        "from kiln.codegen.worker import main; main()")


@dataclass
class KernelJob:
    name: str
    symbol: str
    func: object            # PrimFunc
    target: object          # Target
    lower: bool             # run kiln.lower.lower_prim_func first
    salt: tuple             # codegen version, target, options: the rest of the cache key
    objects_dir: str
    opt_level: int
    code_digest: str = ""   # of Kiln's sources (code_digest()); "" = no .lowered records


def key_of(salt, text: str) -> str:
    return hashlib.sha256("\0".join(list(salt) + [text]).encode()).hexdigest()[:32]


_CODE_DIGEST: Optional[str] = None


def code_digest() -> str:
    """A hash of every Python source file of the ``kiln`` package, computed once per process.

    How a PrimFunc becomes LLVM IR is decided by this code, so a ``.lowered`` record is only
    valid for the sources that wrote it; editing any of them (a checkout under development)
    or installing another version starts new records. "" when the sources cannot be read,
    which turns the records off."""
    global _CODE_DIGEST
    if _CODE_DIGEST is None:
        try:
            _CODE_DIGEST = sources_digest(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        except OSError:
            _CODE_DIGEST = ""
    return _CODE_DIGEST


def sources_digest(root: str) -> str:
    """A hash of the names and contents of the ``.py`` files under ``root``."""
    h = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(d, f)
                with open(path, "rb") as fh:
                    h.update(os.path.relpath(path, root).encode() + b"\0" + fh.read() + b"\0")
    return h.hexdigest()[:32]


def record_key(digest: str, parts, obj) -> Optional[str]:
    """The name of a record about ``obj`` that Kiln's sources decide (a ``.lowered`` record, a
    cached schedule): a hash of ``parts`` (strings), ``digest`` (``code_digest()``) and the
    pickle of ``obj``. None when records are off (no digest) or ``obj`` does not pickle."""
    if not digest:
        return None
    try:
        data = pickle.dumps(obj, protocol=4)
    except Exception:   # noqa: BLE001 - an unpicklable attribute: no record, do the work
        return None
    h = hashlib.sha256("\0".join([*parts, digest, ""]).encode())
    h.update(data)
    return h.hexdigest()[:32]


def read_record(path: str):
    """The object pickled at ``path``, or None when it is absent or does not read back
    (truncated, another format): the caller then does the work again and rewrites it. The
    records are pickles: like the libraries next to them, the cache folder is trusted."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception:   # noqa: BLE001 - absent or unreadable
        return None


def _lowered_path(job: KernelJob) -> Optional[str]:
    """Where the job's ``.lowered`` record lives, or None when it has none."""
    key = record_key(job.code_digest, job.salt, (job.name, job.symbol, job.func, job.lower))
    return None if key is None else os.path.join(job.objects_dir, key + ".lowered")


def _read_lowered(path: str, objects_dir: str):
    """``(key, info, notes)`` from a record whose object exists, else None."""
    hit = read_record(path)
    if not (isinstance(hit, tuple) and len(hit) == 3 and isinstance(hit[0], str)):
        return None
    if not touch(os.path.join(objects_dir, f"{hit[0]}.o")):
        return None
    touch(path)
    return hit


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary name, so that a concurrent reader (another
    build sharing the cache) never sees half a file."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


_MACHINES: dict = {}


def target_machine(target, opt_level: int):
    """The LLVM target machine for ``target`` at ``opt_level``, made once per process."""
    key = (str(target), opt_level)
    tm = _MACHINES.get(key)
    if tm is None:
        tm = _MACHINES[key] = target.create_target_machine(opt=opt_level)
    return tm


def compile_object(path: str, text: str, what: str, target, opt_level: int) -> None:
    """Write the object code of the LLVM IR ``text`` (not optimized: data and small helpers)
    to ``path`` unless it is there already."""
    from .emit import _parse
    if not touch(path):
        tm = target_machine(target, opt_level)
        write_atomic(path, bytes(tm.emit_object(_parse(text, what))))


def run_job(job: KernelJob):
    """Lower ``job.func`` into an LLVM module of its own and make sure the object for it is in
    ``job.objects_dir`` (named by the key: a hash of the IR text and ``job.salt``). Returns
    ``(key, kernel_info, notes, None)``, or ``(None, None, None, exception)`` when it failed."""
    from .abi import lower_kernel
    from .emit import _new_module, _parse
    from .lower import ModuleContext
    from . import objcompile
    try:
        record = _lowered_path(job)
        if record is not None:
            hit = _read_lowered(record, job.objects_dir)
            if hit is not None:
                return (*hit, None)
        func = job.func
        if job.lower:
            from ..lower import lower_prim_func
            func = lower_prim_func(func)
        module = _new_module(job.name, job.target)
        mctx = ModuleContext(module, job.target)
        info = lower_kernel(mctx, job.name, func, job.symbol)
        text = str(module)
        del module, mctx.module
        key = key_of(job.salt, text)
        path = os.path.join(job.objects_dir, f"{key}.o")
        if not touch(path):
            tm = target_machine(job.target, job.opt_level)
            llmod = _parse(text, f"kernel {job.name!r}, before optimization")
            del text
            objcompile.optimize(llmod, tm, job.opt_level)
            llmod.verify()
            obj = bytes(tm.emit_object(llmod))
            del llmod
            write_atomic(path, obj)
        info, notes = replace(info, fn=None), list(mctx.notes)
        if record is not None:
            write_atomic(record, pickle.dumps((key, info, notes), protocol=4))
        return key, info, notes, None
    except Exception as e:  # noqa: BLE001 - handed to the caller, which raises it
        return None, None, None, e


def send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)))
    stream.write(data)
    stream.flush()


def recv(stream) -> Optional[object]:
    """The next message, or None at end of input."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    n, = struct.unpack("<Q", head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError("truncated message")
    return pickle.loads(data)


def main() -> None:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        job = recv(inp)
        if job is None:
            break
        result = run_job(job)
        try:
            send(out, result)
        except (pickle.PicklingError, TypeError, AttributeError):
            from .errors import CodegenError   # an exception that does not pickle: its message
            err = result[3]
            send(out, (None, None, None, CodegenError(f"{type(err).__name__}: {err}")))
