"""The order the suite runs in: the modules with the longest tests first (a pytest plugin,
loaded by tests/conftest.py).

``make test`` runs the suite on every core with pytest-xdist's ``worksteal`` scheduling: the
collected tests are split by count into one contiguous run per worker, and a worker that runs
dry takes the back half (by count) of another's queue. Stealing moves single tests, never a test
already running, so a long test near the back of a queue (the fully static ARMv7 build, a fuzz
target's run, the wheel build of tests/packaging) runs alone at the end while the other workers
idle. So the modules are sorted by their longest test, longest first (the
longest-processing-time rule at the grain stealing works at): each queue starts with the tests
that cannot be split and ends with short ones, which stealing spreads evenly. Ties go to the
module with more seconds in all. Tests keep their order within a module, so module-scoped
fixtures are still made once per worker.

Durations, per module: the seconds of all its tests and of its longest test (setup + call +
teardown of a test, summed):

- measured on this machine by earlier runs, kept in pytest's cache (``.pytest_cache``, key
  ``kiln/module_durations``, with the number of tests each run ran: a run of fewer of a module's
  tests than the recorded one, ``-k`` or ``-x``, leaves its durations as they were);
- else ``tests/module_durations.json``, committed, for a fresh clone (rewrite it after a whole
  run with ``pytest --write-module-durations``);
- else ``UNMEASURED`` seconds for both (a module added since: it runs among the middling ones,
  and its own durations are known after its first run here).
"""
from __future__ import annotations

import json
import pathlib
from collections import defaultdict

import pytest


CACHE_KEY = "kiln/module_durations"
WORKERINPUT_KEY = "kiln_module_durations"
UNMEASURED = 5.0
COMMITTED = pathlib.Path(__file__).resolve().parent / "module_durations.json"


def pytest_addoption(parser):
    parser.addoption("--write-module-durations", action="store_true", default=False,
                     help="write this run's per-module durations (merged with the recorded ones) "
                          "to tests/module_durations.json, which orders a fresh clone's suite")


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _recorded(config) -> dict:
    """module -> [seconds, longest test's seconds]: the committed figures, then this machine's."""
    durations = {}
    try:
        durations.update({m: _pair(v) for m, v in json.loads(COMMITTED.read_text()).items()})
    except (OSError, ValueError, TypeError):
        pass
    for m, v in _cached(config).items():
        # an entry written before the longest test was recorded keeps the committed longest
        longest = v[2] if len(v) > 2 else durations.get(m, [v[0], v[0]])[1]
        durations[m] = [v[0], longest]
    return durations


def _pair(v) -> list:
    """A committed entry as [seconds, longest]: ``[s, longest]``, or a bare number (its
    longest test unknown: taken as the whole module, which sorts it early rather than late)."""
    return [float(v[0]), float(v[1])] if isinstance(v, list) else [float(v), float(v)]


def _cached(config) -> dict:
    """module -> [seconds, tests run(, longest)] from pytest's cache ({} without one)."""
    cache = getattr(config, "cache", None)
    entries = (cache.get(CACHE_KEY, {}) if cache is not None else {}) or {}
    return {m: v for m, v in entries.items() if isinstance(v, list) and len(v) in (2, 3)}


def _durations(config) -> dict:
    """The durations this session orders by, read once: the xdist controller reads them and
    hands the same copy to every worker (other sessions on this tree may rewrite the cache
    while the workers collect, and workers that ordered differently would abort the run)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and WORKERINPUT_KEY in workerinput:
        return json.loads(workerinput[WORKERINPUT_KEY])
    if not hasattr(config, "_kiln_order_durations"):
        config._kiln_order_durations = _recorded(config)
    return config._kiln_order_durations


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist, on the controller: every worker gets the controller's durations."""
    node.workerinput[WORKERINPUT_KEY] = json.dumps(_durations(node.config))


def pytest_collection_modifyitems(config, items):
    """Modules by their longest test, longest first, then by their seconds in all, ties in
    collection order; every xdist worker orders by the same durations (``_durations``), so they
    all collect the same sequence."""
    durations = _durations(config)
    first_seen = {}
    for i, item in enumerate(items):
        first_seen.setdefault(_module(item.nodeid), i)

    def key(item):
        m = _module(item.nodeid)
        seconds, longest = durations.get(m, [UNMEASURED, UNMEASURED])
        return (-longest, -seconds, first_seen[m])
    items[:] = sorted(items, key=key)   # stable: a module's tests keep their order


class _Recorder:
    """Sums the durations of each test's phases and of each module's tests as reports arrive
    (on the xdist controller they come from every worker)."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self.tests = defaultdict(int)
        self.per_test = defaultdict(float)

    def pytest_runtest_logreport(self, report):
        m = _module(report.nodeid)
        self.seconds[m] += report.duration
        self.per_test[report.nodeid] += report.duration
        self.tests[m] += report.when == "setup"

    def longest(self) -> dict:
        out = defaultdict(float)
        for nodeid, seconds in self.per_test.items():
            m = _module(nodeid)
            out[m] = max(out[m], seconds)
        return out


def pytest_configure(config):
    if not hasattr(config, "workerinput"):   # the controller (or a run without xdist)
        config._kiln_durations = _Recorder()
        config.pluginmanager.register(config._kiln_durations, "kiln_module_durations")


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    recorder = getattr(config, "_kiln_durations", None)
    if recorder is None or not recorder.seconds:
        return
    cached = _cached(config)
    longest = recorder.longest()
    for m, seconds in recorder.seconds.items():
        if recorder.tests[m] >= cached.get(m, [0, 0])[1]:
            cached[m] = [round(seconds, 2), recorder.tests[m], round(longest[m], 2)]
    if getattr(config, "cache", None) is not None:
        config.cache.set(CACHE_KEY, cached)
    if config.getoption("--write-module-durations"):
        merged = sorted(_recorded(config).items(), key=lambda kv: (-kv[1][1], -kv[1][0]))
        # one module a line: "path": [seconds, longest test]
        COMMITTED.write_text("{\n" + ",\n".join(f"{json.dumps(m)}: {json.dumps(v)}" for m, v in merged)
                             + "\n}\n")
