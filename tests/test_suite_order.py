"""tests/suite_order.py (issue 17 item 7): longest modules first, a module's tests together and
in order, the same order in every xdist worker, and recorded durations that a partial run does
not shrink."""
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


def test_longest_modules_first_each_module_kept_together_and_in_order(monkeypatch, tmp_path):
    monkeypatch.setattr(suite_order, "COMMITTED", tmp_path / "none.json")
    durations = {"a.py": 1.0, "b.py": 30.0, "c.py": 8.0}
    # A worker orders by what the controller handed it, whatever its own cache says.
    config = SimpleNamespace(workerinput={suite_order.WORKERINPUT_KEY: json.dumps(durations)},
                             cache=_Cache({suite_order.CACHE_KEY: {"a.py": [99.0, 3]}}))
    items = _items("a.py::t1", "b.py::t1", "a.py::t2", "new.py::t1", "c.py::t1", "b.py::t2")
    suite_order.pytest_collection_modifyitems(config, items)
    assert [i.nodeid for i in items] == ["b.py::t1", "b.py::t2", "c.py::t1", "new.py::t1",
                                         "a.py::t1", "a.py::t2"]   # new.py: UNMEASURED = 5 s


def test_controller_hands_workers_one_reading_and_records_full_runs_only(monkeypatch, tmp_path):
    committed = tmp_path / "module_durations.json"
    committed.write_text(json.dumps({"a.py": 2.0, "b.py": 4.0}))
    monkeypatch.setattr(suite_order, "COMMITTED", committed)
    cache = _Cache({suite_order.CACHE_KEY: {"b.py": [6.0, 2]}})
    config = SimpleNamespace(cache=cache, getoption=lambda name: False)
    node = SimpleNamespace(config=config, workerinput={})
    suite_order.pytest_configure_node(node)
    assert json.loads(node.workerinput[suite_order.WORKERINPUT_KEY]) == {"a.py": 2.0, "b.py": 6.0}
    cache.data[suite_order.CACHE_KEY]["b.py"] = [60.0, 2]   # another session writes meanwhile
    node2 = SimpleNamespace(config=config, workerinput={})
    suite_order.pytest_configure_node(node2)
    assert node2.workerinput == node.workerinput

    recorder = suite_order._Recorder()
    for nodeid, when, seconds in [("a.py::t1", "setup", 0.5), ("a.py::t1", "call", 3.0),
                                  ("b.py::t1", "setup", 0.1), ("b.py::t1", "call", 1.0)]:
        recorder.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, when=when, duration=seconds))
    config._kiln_durations = recorder
    suite_order.pytest_sessionfinish(SimpleNamespace(config=config), 0)
    # a.py: a first measurement is kept; b.py: one test of the two recorded keeps the old figure
    assert cache.data[suite_order.CACHE_KEY] == {"a.py": [3.5, 1], "b.py": [60.0, 2]}
