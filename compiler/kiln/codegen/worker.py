"""Kernel jobs of ``build_library``: one PrimFunc -> its LLVM module -> its object file (cached),
run in this process or in a worker process started by ``kiln.codegen.emit``.

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


def key_of(salt, text: str) -> str:
    return hashlib.sha256("\0".join(list(salt) + [text]).encode()).hexdigest()[:32]


_MACHINES: dict = {}


def run_job(job: KernelJob):
    """Lower ``job.func`` into an LLVM module of its own and make sure the object for it is in
    ``job.objects_dir`` (named by the key: a hash of the IR text and ``job.salt``). Returns
    ``(key, kernel_info, notes, None)``, or ``(None, None, None, exception)`` when it failed."""
    from .abi import lower_kernel
    from .emit import _new_module, _parse
    from .lower import ModuleContext
    from . import objcompile
    try:
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
        if not os.path.exists(path):
            tm_key = (str(job.target), job.opt_level)
            tm = _MACHINES.get(tm_key)
            if tm is None:
                tm = _MACHINES[tm_key] = job.target.create_target_machine(opt=job.opt_level)
            llmod = _parse(text, f"kernel {job.name!r}, before optimization")
            del text
            objcompile.optimize(llmod, tm, job.opt_level)
            llmod.verify()
            obj = bytes(tm.emit_object(llmod))
            del llmod
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(obj)
            os.replace(tmp, path)   # atomic: a concurrent reader never sees half an object
        return key, replace(info, fn=None), list(mctx.notes), None
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
