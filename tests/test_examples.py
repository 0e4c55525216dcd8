"""Every example in examples/ and every Python block in README.md runs."""
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
SLOW_EXAMPLES = {"resnet18_onnx.py"}   # exports, compiles and runs a whole ResNet-18


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name,
                                               marks=[pytest.mark.slow] if p.name in SLOW_EXAMPLES else [])
                                  for p in EXAMPLES])
def test_example_runs(path, tmp_path):
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"{path.name} failed:\n{proc.stdout}\n{proc.stderr}"


def _readme_blocks():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("index", range(len(_readme_blocks())))
def test_readme_block_runs(index, tmp_path):
    # Run from a file: @kiln.script decorators read their source with inspect.
    script = tmp_path / f"readme_block_{index}.py"
    script.write_text(_readme_blocks()[index])
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"README block {index} failed:\n{proc.stdout}\n{proc.stderr}"
