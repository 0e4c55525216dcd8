"""The tutorial programs of ../shared/SEED_FLOWS.md (beside the repository), block by block.

``seed_blocks`` holds the Python blocks of that file in order; a test skips, naming why, when
the file is not beside this checkout. ``run_block(code, name)`` runs code as a script file (the
``@kiln.script`` decorators read their source with ``inspect``) in this process, with stdout
captured, and returns ``(globals, stdout)``.
"""
from __future__ import annotations

import contextlib
import io
import pathlib
import re
import runpy

import pytest

SEED_FLOWS = pathlib.Path(__file__).resolve().parents[3] / "shared" / "SEED_FLOWS.md"


@pytest.fixture(scope="session")
def seed_blocks():
    if not SEED_FLOWS.exists():
        pytest.skip(f"{SEED_FLOWS} is not beside this checkout (it lives in the shared folder)")
    return re.findall(r"```python\n(.*?)```", SEED_FLOWS.read_text(), flags=re.S)


@pytest.fixture
def run_block(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def run(code, name, namespace=None):
        path = tmp_path / f"{name}.py"
        path.write_text(code)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            ns = runpy.run_path(str(path), init_globals=namespace)
        return ns, out.getvalue()
    return run
