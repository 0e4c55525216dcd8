"""The order the suite runs in: the longest test modules first (a pytest plugin, loaded by
tests/conftest.py).

``make test`` runs the suite on every core with pytest-xdist's ``worksteal`` scheduling: the
collected tests are split into one contiguous run per worker, and a worker that runs dry takes
the back half of another's queue. Stealing moves single tests, never a test already running, so
a long module collected last (the wheel build of tests/packaging, the Java and C++ builds of
tests/deploy, ...) would run alone at the end while the other workers idle. Sorting modules by
their duration, longest first, puts the long ones where a stealer can balance around them (the
longest-processing-time rule). Tests keep their order within a module, so module-scoped
fixtures are still made once per worker.

Durations, in seconds per module (setup + call + teardown of its tests, summed):

- measured on this machine by earlier runs, kept in pytest's cache (``.pytest_cache``, key
  ``kiln/module_durations``, with the number of tests each run ran: a run of fewer of a module's
  tests than the recorded one, ``-k`` or ``-x``, leaves its duration as it was);
- else ``tests/module_durations.json``, committed, for a fresh clone (rewrite it after a whole
  run with ``pytest --write-module-durations``);
- else ``UNMEASURED`` seconds (a module added since: it runs among the middling ones, and its
  own duration is known after its first run here).
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
    durations = {}
    try:
        durations.update(json.loads(COMMITTED.read_text()))
    except (OSError, ValueError):
        pass
    durations.update({m: v[0] for m, v in _cached(config).items()})
    return durations


def _cached(config) -> dict:
    """module -> [seconds, tests run] from pytest's cache ({} without one)."""
    cache = getattr(config, "cache", None)
    entries = (cache.get(CACHE_KEY, {}) if cache is not None else {}) or {}
    return {m: v for m, v in entries.items() if isinstance(v, list) and len(v) == 2}


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
    """Longest modules first, ties in collection order; every xdist worker orders by the same
    durations (``_durations``), so they all collect the same sequence."""
    durations = _durations(config)
    first_seen = {}
    for i, item in enumerate(items):
        first_seen.setdefault(_module(item.nodeid), i)

    def key(item):
        m = _module(item.nodeid)
        return (-durations.get(m, UNMEASURED), first_seen[m])
    items[:] = sorted(items, key=key)   # stable: a module's tests keep their order


class _Recorder:
    """Sums the durations of each module's test phases as reports arrive (on the xdist
    controller they come from every worker)."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self.tests = defaultdict(int)

    def pytest_runtest_logreport(self, report):
        m = _module(report.nodeid)
        self.seconds[m] += report.duration
        self.tests[m] += report.when == "setup"


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
    for m, seconds in recorder.seconds.items():
        if recorder.tests[m] >= cached.get(m, [0, 0])[1]:
            cached[m] = [round(seconds, 2), recorder.tests[m]]
    if getattr(config, "cache", None) is not None:
        config.cache.set(CACHE_KEY, cached)
    if config.getoption("--write-module-durations"):
        merged = _recorded(config)
        merged.update({m: v[0] for m, v in cached.items()})
        COMMITTED.write_text(json.dumps(dict(sorted(merged.items(), key=lambda kv: -kv[1])),
                                        indent=0) + "\n")
