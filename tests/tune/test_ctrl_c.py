"""``kiln.tune.ctrl_c``: a Ctrl-C that Python drops (raised in a ``__del__``) is not lost."""
import os
import signal
import sys
import threading

import pytest

from kiln.tune import ctrl_c


class _PressesCtrlCWhenCollected:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10000):     # the handler runs here, between two bytecodes of __del__
            pass


def test_a_ctrl_c_dropped_in_a_del_is_raised_at_the_next_check(monkeypatch):
    dropped = []        # what Python prints as "Exception ignored in ..."
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with ctrl_c.latch() as pressed:
        _PressesCtrlCWhenCollected()
        assert dropped == [KeyboardInterrupt] and pressed.pressed
        with pytest.raises(KeyboardInterrupt):
            pressed.check()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler    # restored


def test_ctrl_c_still_raises_where_it_lands():
    with ctrl_c.latch() as pressed:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10000):
                pass
        assert pressed.pressed


def test_off_the_main_thread_or_under_a_handler_of_the_program_nothing_is_installed():
    seen = []
    def run():
        with ctrl_c.latch() as pressed:
            seen.append(signal.getsignal(signal.SIGINT))
            pressed.check()
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [signal.default_int_handler]

    def own(signum, frame):
        pass
    previous = signal.signal(signal.SIGINT, own)
    try:
        with ctrl_c.latch():
            assert signal.getsignal(signal.SIGINT) is own
    finally:
        signal.signal(signal.SIGINT, previous)
