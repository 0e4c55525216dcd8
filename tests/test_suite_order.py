"""tests/suite_order.py (issue 17 item 7): the modules with the longest tests first, a module's
tests together and in order, the same order in every xdist worker, and recorded durations that a
partial run does not shrink."""
from __future__ import annotations

import json
from types import SimpleNamespace

import suite_order


class _Cache:
    def __init__(self, data=None):
        self.data = dict(data or {})

    def get(self, key, default):
        return self.data.get(key, default)

    def set(self, key, value):
        self.data[key] = value


def _items(*nodeids):
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_modules_with_the_longest_tests_first_each_kept_together_and_in_order(monkeypatch, tmp_path):
    monkeypatch.setattr(suite_order, "COMMITTED", tmp_path / "none.json")
    # [seconds in all, longest test]: a.py has the most seconds but only short tests; d.py ties
    # with c.py on its longest test and has more seconds in all.
    durations = {"a.py": [40.0, 1.0], "b.py": [30.0, 30.0], "c.py": [8.0, 8.0], "d.py": [12.0, 8.0]}
    # A worker orders by what the controller handed it, whatever its own cache says.
    config = SimpleNamespace(workerinput={suite_order.WORKERINPUT_KEY: json.dumps(durations)},
                             cache=_Cache({suite_order.CACHE_KEY: {"a.py": [99.0, 3, 99.0]}}))
    items = _items("a.py::t1", "b.py::t1", "a.py::t2", "new.py::t1", "c.py::t1", "d.py::t1",
                   "b.py::t2")
    suite_order.pytest_collection_modifyitems(config, items)
    assert [i.nodeid for i in items] == ["b.py::t1", "b.py::t2", "d.py::t1", "c.py::t1",
                                         "new.py::t1", "a.py::t1", "a.py::t2"]  # new.py: UNMEASURED


def test_controller_hands_workers_one_reading_and_records_full_runs_only(monkeypatch, tmp_path):
    committed = tmp_path / "module_durations.json"
    # an entry of the older format (seconds only) counts as one test that long
    committed.write_text(json.dumps({"a.py": 2.0, "b.py": [4.0, 3.0], "c.py": [9.0, 5.0]}))
    monkeypatch.setattr(suite_order, "COMMITTED", committed)
    # b.py measured here; c.py measured before the longest test was recorded: committed longest
    cache = _Cache({suite_order.CACHE_KEY: {"b.py": [6.0, 2, 4.0], "c.py": [7.0, 4]}})
    config = SimpleNamespace(cache=cache, getoption=lambda name: False)
    node = SimpleNamespace(config=config, workerinput={})
    suite_order.pytest_configure_node(node)
    assert json.loads(node.workerinput[suite_order.WORKERINPUT_KEY]) == {
        "a.py": [2.0, 2.0], "b.py": [6.0, 4.0], "c.py": [7.0, 5.0]}
    cache.data[suite_order.CACHE_KEY]["b.py"] = [60.0, 2, 50.0]   # another session writes meanwhile
    node2 = SimpleNamespace(config=config, workerinput={})
    suite_order.pytest_configure_node(node2)
    assert node2.workerinput == node.workerinput

    recorder = suite_order._Recorder()
    for nodeid, when, seconds in [("a.py::t1", "setup", 0.5), ("a.py::t1", "call", 3.0),
                                  ("a.py::t2", "setup", 0.1), ("a.py::t2", "call", 2.0),
                                  ("b.py::t1", "setup", 0.1), ("b.py::t1", "call", 1.0)]:
        recorder.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, when=when, duration=seconds))
    config._kiln_durations = recorder
    suite_order.pytest_sessionfinish(SimpleNamespace(config=config), 0)
    # a.py: a first measurement is kept (5.6 s, its longest test 3.5 s); b.py: one test of the
    # two recorded keeps the old figures
    assert cache.data[suite_order.CACHE_KEY] == {"a.py": [5.6, 2, 3.5], "b.py": [60.0, 2, 50.0],
                                                 "c.py": [7.0, 4]}


def test_write_module_durations_keeps_the_longest_test(monkeypatch, tmp_path):
    committed = tmp_path / "module_durations.json"
    committed.write_text(json.dumps({"old.py": 1.0}))
    monkeypatch.setattr(suite_order, "COMMITTED", committed)
    cache = _Cache()
    config = SimpleNamespace(cache=cache, getoption=lambda name: name == "--write-module-durations")
    recorder = suite_order._Recorder()
    for nodeid, seconds in [("a.py::t1", 1.0), ("a.py::t2", 1.5), ("b.py::t1", 2.0)]:
        recorder.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, when="call", duration=seconds))
    config._kiln_durations = recorder
    suite_order.pytest_sessionfinish(SimpleNamespace(config=config), 0)
    written = json.loads(committed.read_text())
    assert written == {"a.py": [2.5, 1.5], "b.py": [2.0, 2.0], "old.py": [1.0, 1.0]}
    assert list(written) == ["b.py", "a.py", "old.py"]   # longest test first, then seconds
