"""An ``onnx.backend`` backend running Kiln-compiled code (used by the ONNX backend node tests).

``prepare(model)`` imports the model with ``from_onnx``, binds its initializers, compiles it
with a Kiln pipeline (``"default"``) for ``llvm`` and returns a rep whose ``run(inputs)`` calls
the VM.

Ahead-of-time compilation needs some values at compile time (Reshape's shape, Reduce's axes,
TopK's K...). When a model feeds such a value as a graph *input* (common in the node tests),
``prepare`` cannot compile yet: the rep compiles at ``run`` time with those inputs' values
bound as initializers (specialisation), caching one executable per set of values. All the
other inputs stay runtime arguments of the compiled function.

``KilnRuntimeBackend`` is the strict variant, as ONNX's own runner sees a backend: one
executable compiled at ``prepare``, every graph input a run-time argument (no value frozen, no
sequence structure specialised); a model that needs either fails to prepare. Each rep keeps
``kernel_counts``, the number of kernels of each executable it compiled, and ``num_args``, the
run-time arguments its last ``run`` passed (no kernel and no argument: every output was
computed at import).
"""
from __future__ import annotations

import copy

import numpy as np
from onnx import numpy_helper
from onnx.backend.base import Backend, BackendRep

from . import sequence
from .common import ONNXImportError
from .importer import from_onnx

PIPELINE = "default"


def _to_numpy(v):
    if isinstance(v, np.ndarray):
        return v
    if hasattr(v, "numpy"):
        return v.numpy()
    return np.asarray(v)


def _compile(model, pipeline, shape_dict=None):
    """The model compiled for ``llvm``: ``(vm, number of kernels)``."""
    import kiln
    mod, params = from_onnx(model, shape_dict=shape_dict)
    if params:
        mod = kiln.transform.bind_params("main", params)(mod)
    ex = kiln.compile(kiln.get_pipeline(pipeline)(mod), "llvm")
    return kiln.VirtualMachine(ex, kiln.cpu()), ex.stats.num_kernels


def _input_names(model):
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def _freeze(model, values):
    """A copy of ``model`` with the graph inputs in ``values`` turned into initializers."""
    m = copy.deepcopy(model)
    keep = [i for i in m.graph.input if i.name not in values]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    for name, v in values.items():
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(v), name))
    return m


class KilnRep(BackendRep):
    def __init__(self, model, pipeline, vm=None, frozen=(), num_kernels=None, specialise=True):
        self.model = model
        self.pipeline = pipeline
        self.names = _input_names(model)
        self.frozen = list(frozen)       # inputs that must be known at compile time
        self.containers = [i.name for i in model.graph.input if i.name in self.names
                           and sequence.is_container_type(i)]
        self.optional_outputs = [o.type.WhichOneof("value") == "optional_type" for o in model.graph.output]
        self.specialise = specialise     # False: run only the executable given, never recompile
        self._cache = {}
        self.kernel_counts = []          # kernels of each executable compiled, in order
        self.num_args = None             # run-time arguments the last run passed
        if vm is not None:
            self._cache[()] = vm
            self.kernel_counts.append(num_kernels)

    def _vm_for(self, feeds):
        # Sequence and optional inputs: their lengths and element shapes are compiled in
        # (sequence.py), so one executable per structure.
        if not self.specialise:
            return self._cache[()]
        structure = {n: sequence.input_structure(feeds[n]) for n in self.containers}
        while True:
            key = tuple((n, feeds[n].dtype.str, feeds[n].shape, feeds[n].tobytes()) for n in self.frozen)
            key += tuple((n, repr(s)) for n, s in sorted(structure.items()))
            if key in self._cache:
                return self._cache[key]
            try:
                vm, nk = _compile(_freeze(self.model, {n: feeds[n] for n in self.frozen}), self.pipeline,
                                  structure or None)
            except ONNXImportError as e:
                if e.needs_constant and e.needs_constant in feeds and e.needs_constant not in self.frozen:
                    self.frozen.append(e.needs_constant)
                    continue
                more = [n for n in self.names if n not in self.frozen and n not in self.containers
                        and feeds[n].dtype.kind in "iub"]
                if "must be a constant" in str(e) and more:
                    # the value comes from a computation over inputs: fix the integer inputs
                    self.frozen.extend(more)
                    continue
                raise
            self._cache[key] = vm
            self.kernel_counts.append(nk)
            return vm

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = {k: self._feed(k, v) for k, v in inputs.items()}
        else:
            if not isinstance(inputs, (list, tuple)):
                inputs = [inputs]
            feeds = {n: self._feed(n, v) for n, v in zip(self.names, inputs)}
        vm = self._vm_for(feeds)
        args = []
        for n in self.names:
            if n in self.containers:
                args.extend(np.require(a, requirements="C") for a in sequence.flatten_value(feeds[n]))
            elif n not in self.frozen:
                args.append(np.require(feeds[n], requirements="C"))
        self.num_args = len(args)
        out = vm["main"](*args)
        if len(self.optional_outputs) == 1:
            out = (out,)
        return tuple(self._output(o, opt) for o, opt in zip(out, self.optional_outputs))

    def _feed(self, name, v):
        # a sequence input is a list of arrays (of any shapes), an empty optional None
        if name in self.containers:
            return None if v is None else [np.asarray(a) for a in v] if isinstance(v, list) else np.asarray(v)
        return np.asarray(v)

    @staticmethod
    def _output(o, optional):
        if isinstance(o, (list, tuple)):  # a sequence output (sequence.py): a list of arrays
            return None if optional and not o else [_to_numpy(x) for x in o]
        return _to_numpy(o)


class KilnBackend(Backend):
    @classmethod
    def prepare(cls, model, device="CPU", runtime_inputs=False, **kwargs):
        """A rep of ``model`` compiled with ``kwargs.get("pipeline", "default")``.
        ``runtime_inputs=True``: every graph input a run-time argument of one executable
        compiled here, never frozen or specialised (``KilnRuntimeBackend``)."""
        super().prepare(model, device, **kwargs)
        pipeline = kwargs.get("pipeline", PIPELINE)
        if runtime_inputs:
            vm, nk = _compile(model, pipeline)
            return KilnRep(model, pipeline, vm, num_kernels=nk, specialise=False)
        try:
            vm, nk = _compile(model, pipeline)
        except ONNXImportError as e:
            if getattr(e, "needs_structure", None):
                return KilnRep(model, pipeline)  # a sequence input: compiled for its length at run time
            if e.needs_constant and e.needs_constant in _input_names(model):
                return KilnRep(model, pipeline, frozen=[e.needs_constant])
            if "must be a constant" in str(e):
                return KilnRep(model, pipeline)  # find the inputs to fix at run time
            raise
        return KilnRep(model, pipeline, vm, num_kernels=nk)

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device):
        return device == "CPU"


class KilnRuntimeBackend(KilnBackend):
    """Every graph input given at run time, as ONNX's own runner gives them: ``prepare``
    compiles one executable whose arguments are all the graph inputs, and the rep never
    recompiles. A model whose import needs an input's value (a shape, axes, pads, K...) or a
    sequence input's structure raises ``ONNXImportError`` here instead of being specialised."""

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        """``KilnBackend.prepare(model, device, runtime_inputs=True)``."""
        kwargs["runtime_inputs"] = True
        return super().prepare(model, device, **kwargs)


prepare = KilnBackend.prepare
run_model = KilnBackend.run_model
supports_device = KilnBackend.supports_device
backend = KilnBackend
