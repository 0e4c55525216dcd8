"""Ctrl-C that a tuning run never loses.

Python turns SIGINT into a ``KeyboardInterrupt`` raised wherever the main thread happens to
be. When that is a ``__del__`` method or a weakref callback (the garbage collector runs them
at any bytecode), the exception is printed as "Exception ignored in ..." and dropped: the
run went on as if no key had been pressed, and finished with exit status 0. ``latch``
installs a handler that also remembers the signal, and the tuner calls ``check`` after each
measurement, so a dropped interrupt is raised again at the next safe point.

>>> with latch() as ctrl_c:      # doctest: +SKIP
...     for batch in batches:
...         measure(batch)
...         ctrl_c.check()       # raises KeyboardInterrupt if Ctrl-C came, even if dropped
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class CtrlC:
    """Whether SIGINT arrived since ``latch`` was entered."""

    def __init__(self) -> None:
        self.pressed = False

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if Ctrl-C came, also when its first one was dropped."""
        if self.pressed:
            raise KeyboardInterrupt


@contextlib.contextmanager
def latch() -> Iterator[CtrlC]:
    """Remember SIGINT for the duration of the block (and raise ``KeyboardInterrupt`` as
    Python's own handler does). Off the main thread, or when the program has a SIGINT handler
    of its own, nothing is installed and ``check`` never raises."""
    state = CtrlC()
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield state
        return

    def handle(signum, frame):
        state.pressed = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handle)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)
