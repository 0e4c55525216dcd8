"""Thread count per VirtualMachine and a host application's thread pool (kiln_vm_set_num_threads,
kiln_vm_set_thread_pool): from Python, and from C with a counting host pool that shows the
per-VM cap reaching the kernels' parallel loops."""
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import kiln
from kiln import nn

HERE = pathlib.Path(__file__).resolve().parent
N_IN, N_OUT = 64 * 128, 64 * 256


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A (64, 128) x (128, 256) linear layer (parallel loops), input flattened, weights bound."""
    out = tmp_path_factory.mktemp("threads")
    m = nn.Sequential(nn.Linear(128, 256), nn.ReLU())
    m.load_state_dict(m.init_params(seed=1))

    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = m

        def forward(self, x):
            return self.body(x.reshape(64, 128)).reshape(N_OUT)
    flat = Flat()
    mod, _ = flat.export(spec={"forward": {"x": nn.spec.Tensor((N_IN,), "float32")}})
    mod = kiln.transform.bind_params("forward", flat.state_dict())(mod)
    ex = kiln.compile(kiln.get_pipeline("default")(mod), target="llvm")
    ex.export_library(str(out / "model.so"))
    x = np.random.default_rng(0).standard_normal(N_IN, dtype=np.float32)
    x.tofile(out / "x.bin")
    expected = kiln.VirtualMachine(ex, kiln.cpu())["forward"](x).numpy()
    return out, x, expected


def test_python_per_vm_thread_count(model):
    out, x, expected = model
    one = kiln.VirtualMachine(str(out / "model.so"), kiln.cpu(), num_threads=1)
    two = kiln.VirtualMachine(str(out / "model.so"), kiln.cpu())
    two.set_num_threads(2)
    np.testing.assert_array_equal(one["forward"](x).numpy(), expected)
    np.testing.assert_array_equal(two["forward"](x).numpy(), expected)
    with pytest.raises(kiln.KilnError, match="kiln_vm_set_num_threads: -1 is negative"):
        one.set_num_threads(-1)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_host_thread_pool_from_c(model, runtime_make, tmp_path):
    out, _, expected = model
    lib = tmp_path / "libkiln_runtime.a"
    runtime_make("build/libkiln_runtime.a", copy={"libkiln_runtime.a": lib})
    exe = tmp_path / "host_pool_test"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1",
                    f"-I{HERE.parents[1] / 'runtime_c' / 'include'}", str(HERE / "host_pool_test.c"),
                    str(lib), "-o", str(exe), "-ldl", "-lpthread", "-lm"], check=True, timeout=120)
    proc = subprocess.run([str(exe), str(out / "model.so"), str(out / "x.bin"), str(N_IN), str(N_OUT)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line.split()[1:] for line in proc.stdout.strip().split("\n")}
    launches, max_tasks = map(int, lines["capped"])
    assert launches >= 1 and max_tasks == 3          # the VM's cap, not the pool's 8
    launches, max_tasks = map(int, lines["uncapped"])
    assert launches >= 1 and max_tasks > 3            # the host pool's count
    assert lines["other_vm"] == ["0"]                 # another VM stays on the runtime's pool
    assert lines["errors"] == ["1"]
    np.testing.assert_array_equal(np.array(lines["out"], dtype=np.float32), expected)
