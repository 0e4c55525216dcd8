"""Kiln: an ahead-of-time compiler and deployment packager for machine-learning models.

``import kiln`` is cheap: sub-packages load on first use (``kiln.Schedule``, ``kiln.te``, ...).
"""
from ._lazy import lazy_attributes

from . import ir
from .ir import IRModule

__version__ = "0.1.0"

# public name -> (module, attribute or None for the module itself)
_LAZY = {
    "script": ("kiln.script", None),
    "te": ("kiln.te", None),
    "arith": ("kiln.arith", None),
    "schedule": ("kiln.schedule", None),
    "Schedule": ("kiln.schedule", "Schedule"),
    "tir": ("kiln.tir", None),              # kiln.tir.Schedule: the tutorials' spelling
    "target": ("kiln.target", None),
    "ScheduleError": ("kiln.schedule", "ScheduleError"),
    "evaluate": ("kiln.ir.evaluator", "evaluate"),
    "lower": ("kiln.lower", None),
    "codegen": ("kiln.codegen", None),
    "build": ("kiln.driver", "build"),
    "runtime": ("kiln.runtime", None),
    "nd": ("kiln.runtime.nd", None),
    "cpu": ("kiln.runtime", "cpu"),
    "cuda": ("kiln.runtime", "cuda"),
    "Device": ("kiln.runtime", "Device"),
    "NDArray": ("kiln.runtime", "NDArray"),
    "Module": ("kiln.runtime", "Module"),
    "Function": ("kiln.runtime", "Function"),
    "load_module": ("kiln.runtime", "load_module"),
    "KilnError": ("kiln.runtime", "KilnError"),
    "set_num_threads": ("kiln.runtime", "set_num_threads"),
    "get_num_threads": ("kiln.runtime", "get_num_threads"),
    # graph level
    "ops": ("kiln.ops", None),
    "frontend": ("kiln.frontend", None),
    "nn": ("kiln.frontend.nn", None),
    "transform": ("kiln.transform", None),
    "get_pipeline": ("kiln.transform.pipeline", "get_pipeline"),
    "executable": ("kiln.executable", None),
    "bindgen": ("kiln.bindgen", None),
    "compile": ("kiln.executable", "compile"),
    "Executable": ("kiln.executable", "Executable"),
    "VirtualMachine": ("kiln.runtime.vm", "VirtualMachine"),
    "register_func": ("kiln.runtime.registry", "register_func"),
    # the tuner (a callable package: kiln.tune(mod, ...) is kiln.tune.tune)
    "tune": ("kiln.tune", None),
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
