"""Worker processes that may crash or hang without taking the tuner down.

A ``Worker`` is one fresh interpreter (``python -m kiln.tune.workers``: no forked LLVM or
thread-pool state, and unlike ``multiprocessing``'s spawn it never re-runs the user's main
script) that serves calls ``fn(*args)`` sent over a socket pair, one at a time, with ``fn`` a
module-level function (pickled by reference; the child gets the parent's ``sys.path``).
``Worker.call`` returns ``("ok", value)``, ``("error", message)`` for an exception in ``fn``,
``("died", message)`` when the process ended during the call (a segfault in generated code:
the signal is named), or ``("timeout", message)`` after which the process is killed. A dead
or killed worker is started again on the next call. ``run_parallel`` spreads calls over
several workers. A worker whose parent dies sees its socket close and exits.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, List, Optional, Sequence, Tuple

Outcome = Tuple[str, Any]


def _serve(conn) -> None:
    """The worker's loop (runs in the child)."""
    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        fn, args = msg
        try:
            out: Outcome = ("ok", fn(*args))
        except BaseException as e:   # noqa: BLE001 - reported to the parent, never fatal here
            tb = traceback.format_exc(limit=6)
            out = ("error", f"{type(e).__name__}: {e}\n{tb}")
        try:
            conn.send(out)
        except Exception as e:   # an unpicklable result
            conn.send(("error", f"cannot send the result back: {type(e).__name__}: {e}"))


def _signal_name(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class Worker:
    """One worker process serving calls (module docstring). ``start_timeout_s`` bounds how
    long a fresh process may take to import and say it is ready."""

    def __init__(self, start_timeout_s: float = 120.0, stderr=subprocess.DEVNULL):
        self.start_timeout_s = start_timeout_s
        self.stderr = stderr
        self.proc = None
        self.conn = None
        self.pending = False
        self.timeout_s = 0.0
        self.deadline = 0.0

    def _start(self) -> None:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        # The child imports what the parent can (functions are pickled by reference).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        fd = child.fileno()
        proc = subprocess.Popen([sys.executable, "-m", "kiln.tune.workers", str(fd)],
                                pass_fds=(fd,), env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=self.stderr,
                                # its own session: a Ctrl-C at the terminal interrupts the
                                # tuner, not the candidate being measured (which would be
                                # recorded as failed); the tuner then ends the workers
                                start_new_session=True)
        child.close()     # so that the parent sees EOF when the child dies
        self.proc, self.conn = proc, Connection(parent.detach())
        if not self.conn.poll(self.start_timeout_s):
            self.kill()
            raise RuntimeError("a tuning worker process did not start in time")
        try:
            self.conn.recv()
        except (EOFError, OSError):
            code = self._reap()
            self.kill()
            raise RuntimeError(f"a tuning worker process failed to start ({_signal_name(code)})")

    def _reap(self) -> Optional[int]:
        try:
            return self.proc.wait(5)
        except subprocess.TimeoutExpired:
            return None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def submit(self, fn: Callable, args: Sequence[Any], timeout_s: float) -> None:
        """Send one call; collect its outcome with ``collect`` (or ``call``)."""
        if self.pending:
            raise RuntimeError("this worker is busy")
        if not self.alive:
            self.kill()
            self._start()
        self.conn.send((fn, tuple(args)))
        self.pending = True
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s

    def collect(self) -> Outcome:
        """The outcome of the call sent last, waiting until it comes or its time is up."""
        left = max(0.0, self.deadline - time.monotonic())
        try:
            ready = self.conn.poll(left)
        except (EOFError, OSError):
            ready = True
        self.pending = False
        if not ready:
            self.kill()
            return ("timeout", f"no result within {self.timeout_s:.1f} s")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            code = self._reap()
            self.kill()
            return ("died", f"the process {_signal_name(code)}")

    def call(self, fn: Callable, args: Sequence[Any], timeout_s: float) -> Outcome:
        """``fn(*args)`` in the worker: the outcome (module docstring)."""
        self.submit(fn, args, timeout_s)
        return self.collect()

    def kill(self) -> None:
        """End the process now (it is started again on the next call)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self._reap()
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None
        self.pending = False

    def close(self) -> None:
        """Ask the process to stop, then end it."""
        if self.alive and not self.pending:
            try:
                self.conn.send(None)
                self._reap()
            except (OSError, EOFError):
                pass
        self.kill()


def run_parallel(workers: List[Worker], calls: Sequence[Tuple[Callable, Sequence[Any]]],
                 timeout_s: float, on_done: Optional[Callable[[int, Outcome], None]] = None
                 ) -> List[Outcome]:
    """Each call of ``calls`` on the first free worker; ``on_done(i, outcome)`` as each ends.
    Returns the outcomes in the order of ``calls``."""
    out: List[Optional[Outcome]] = [None] * len(calls)
    todo = list(range(len(calls)))[::-1]
    busy = {}           # worker index -> call index
    while todo or busy:
        for w, worker in enumerate(workers):
            if w not in busy and todo:
                i = todo.pop()
                try:
                    worker.submit(calls[i][0], calls[i][1], timeout_s)
                except RuntimeError as e:        # the process would not start
                    out[i] = ("died", str(e))
                    if on_done:
                        on_done(i, out[i])
                    continue
                busy[w] = i
        if not busy:
            continue
        soonest = min(workers[w].deadline for w in busy)
        conns = {workers[w].conn: w for w in busy}
        ready = wait(list(conns), timeout=max(0.0, soonest - time.monotonic()))
        now = time.monotonic()
        for w in list(busy):
            if workers[w].conn in ready or workers[w].deadline <= now:
                i = busy.pop(w)
                out[i] = workers[w].collect()
                if on_done:
                    on_done(i, out[i])
    return out  # type: ignore[return-value]


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
