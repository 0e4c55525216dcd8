"""``Module``: the PyTorch-like base class. Assigning a ``Parameter`` or a ``Module`` to an
attribute registers it; names join with dots (``fc1.weight``), in assignment order, and that
order is the order of the graph function's weight parameters after ``export``.

>>> class MLP(Module):
...     def __init__(self):
...         super().__init__()
...         self.fc1 = Linear(784, 256)
...         self.fc2 = Linear(256, 10)
...     def forward(self, x):
...         return self.fc2(self.fc1(x).relu())
>>> [n for n, _ in MLP().named_parameters()]                    # doctest: +SKIP
['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias']
>>> mod, param_spec = MLP().export({"forward": {"x": spec.Tensor((1, 784))}})   # doctest: +SKIP
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Dict, Iterator, Optional, Tuple

import numpy as np

from .parameter import Parameter
from .tensor import _TRACES


class Module:
    """Base class of layers and models. Subclasses call ``super().__init__()`` first, assign
    layers and parameters as attributes, and define ``forward``."""

    # Keys of a PyTorch state_dict that have no Kiln counterpart and are skipped by
    # load_state_dict (BatchNorm's num_batches_tracked), per module class.
    _ignored_state_keys: Tuple[str, ...] = ()

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())

    # ---- registration ----------------------------------------------------------------------
    def _registry(self, name: str):
        try:
            return self.__dict__["_parameters"], self.__dict__["_modules"]
        except KeyError:
            raise AttributeError(f"cannot assign {name!r} before Module.__init__() is called; "
                                 f"call super().__init__() first in {type(self).__name__}.__init__") from None

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, (Parameter, Module)):
            params, modules = self._registry(name)
            self.__dict__.pop(name, None)
            # drop it from the other registry; reassigning keeps its place (as PyTorch)
            (modules if isinstance(value, Parameter) else params).pop(name, None)
            (params if isinstance(value, Parameter) else modules)[name] = value
            return
        params = self.__dict__.get("_parameters", {})
        modules = self.__dict__.get("_modules", {})
        if name in params or name in modules:
            if value is not None:
                kind = "Parameter" if name in params else "Module"
                raise TypeError(f"cannot assign {type(value).__name__} to {type(self).__name__}.{name}, "
                                f"which holds a {kind}; assign a {kind} or None")
            (params if name in params else modules)[name] = None
            return
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        # only called when normal lookup fails: look in the registries
        d = self.__dict__
        for reg in ("_parameters", "_modules"):
            if reg in d and name in d[reg]:
                return d[reg][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for reg in ("_parameters", "_modules"):
            if name in self.__dict__.get(reg, {}):
                del self.__dict__[reg][name]
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._modules))

    def register_parameter(self, name: str, param: Optional[Parameter]) -> None:
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a Parameter or None, got {type(param).__name__}")
        self._registry(name)[0][name] = param

    def add_module(self, name: str, module: Optional["Module"]) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module or None, got {type(module).__name__}")
        self._registry(name)[1][name] = module

    register_module = add_module

    # ---- traversal ---------------------------------------------------------------------------
    def named_children(self) -> Iterator[Tuple[str, "Module"]]:
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def named_modules(self, prefix: str = "", memo: Optional[set] = None) -> Iterator[Tuple[str, "Module"]]:
        """This module and every submodule (each once), depth first, as (qualified name, module)."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self.named_children():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[Tuple[str, Parameter]]:
        """(qualified name, Parameter) in registration order; a parameter shared by two modules
        is listed once, under its first name (as PyTorch)."""
        seen = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mod_name, m in mods:
            for name, p in m._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mod_name}.{name}" if mod_name else name), p

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def apply(self, fn) -> "Module":
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def eval(self) -> "Module":
        """No-op (Kiln modules are always in inference mode); returns self, as PyTorch."""
        return self

    def train(self, mode: bool = True) -> "Module":
        if mode:
            raise NotImplementedError("Kiln compiles inference graphs; train mode is not supported")
        return self

    # ---- weights -----------------------------------------------------------------------------
    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Parameter name -> numpy array, in ``named_parameters`` order, which is the order of
        ``param_spec`` (so ``list(m.state_dict().values())`` are the weight arguments)."""
        out, missing = OrderedDict(), []
        for name, p in self.named_parameters():
            if p.data is None:
                missing.append(name)
            out[name] = p.data
        if missing:
            raise ValueError(f"state_dict: parameter(s) without data: {', '.join(missing)}; load "
                             "weights with load_state_dict(...), e.g. m.load_state_dict(m.init_params(seed=0))")
        return out

    def load_state_dict(self, state_dict, strict: bool = True):
        """Set parameter data from ``{name: array}`` (numpy arrays, or anything ``np.asarray``
        takes, such as the tensors of a PyTorch ``state_dict()``). With ``strict``, missing and
        unexpected names are errors. Returns ``(missing, unexpected)`` name lists."""
        params = OrderedDict(self.named_parameters())
        ignored = {f"{prefix}.{k}" if prefix else k
                   for prefix, m in self.named_modules() for k in m._ignored_state_keys}
        unexpected = [k for k in state_dict if k not in params and k not in ignored]
        missing = [k for k in params if k not in state_dict]
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append(f"missing: {', '.join(missing)}")
            if unexpected:
                parts.append(f"unexpected: {', '.join(unexpected)}")
            raise KeyError(f"load_state_dict for {type(self).__name__}: " + "; ".join(parts))
        for name, p in params.items():
            if name in state_dict:
                value = state_dict[name]
                if hasattr(value, "detach"):  # a torch tensor
                    value = value.detach().cpu().numpy()
                try:
                    p.data = value
                except ValueError as e:
                    raise ValueError(f"load_state_dict: {name}: {e}") from None
        return missing, unexpected

    def init_params(self, seed: int = 0) -> "OrderedDict[str, np.ndarray]":
        """Fresh values for every parameter from its initializer, deterministic in ``seed``,
        in ``param_spec`` order (does not change the module; ``load_state_dict`` them)."""
        rng = np.random.default_rng(seed)
        return OrderedDict((name, p.initial_value(rng)) for name, p in self.named_parameters())

    # ---- calling and export ------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        if not _TRACES:
            raise RuntimeError(f"{type(self).__name__} was called outside export: Kiln modules are "
                               "traced, not run eagerly; use .export(spec=...) and run the result "
                               "(kiln.compile + VirtualMachine, or kiln.ir.graph_interp.interpret)")
        trace = _TRACES[-1]
        trace.scopes.append((trace.module_names.get(id(self), ""), type(self).__name__))
        try:
            return self.forward(*args, **kwargs)
        finally:
            trace.scopes.pop()

    def export(self, spec: Dict[str, Dict[str, object]], bounds: Optional[Dict[str, int]] = None):
        """Trace methods into graph functions: ``spec`` maps a method name to its arguments'
        specs, e.g. ``{"forward": {"x": nn.spec.Tensor((1, 784), "float32")}}``. ``bounds``
        (``{"n": 64}``) bounds symbolic dims so memory is planned statically. Returns
        ``(IRModule, param_spec)``; see ``kiln.frontend.nn.export``."""
        from .export import export
        return export(self, spec, bounds)

    # ---- printing ----------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self.named_children()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"


def _check_index(n: int, idx: int, what: str) -> int:
    if not -n <= idx < n:
        raise IndexError(f"{what}: index {idx} is out of range for {n} modules")
    return idx % n


class Sequential(Module):
    """Modules called in order; children are named ``0, 1, ...`` (or by an OrderedDict)."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], (dict, OrderedDict)):
            for name, m in modules[0].items():
                self.add_module(str(name), m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        mods = list(self._modules.items())
        if isinstance(idx, slice):
            return Sequential(OrderedDict(mods[idx]))
        return mods[_check_index(len(mods), idx, "Sequential")][1]

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self

    def forward(self, x):
        for m in self:
            x = m(x)
        return x


class ModuleList(Module):
    """A list of modules, registered as ``0, 1, ...``; index and iterate it in ``forward``."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(mods[idx])
        return mods[_check_index(len(mods), idx, "ModuleList")]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(str(_check_index(len(self), idx, "ModuleList")), module)

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self


class ModuleDict(Module):
    """Modules by name, in insertion order."""

    def __init__(self, modules=None):
        super().__init__()
        for name, m in (modules or {}).items():
            self.add_module(name, m)

    def __getitem__(self, name: str) -> Module:
        return self._modules[name]

    def __setitem__(self, name: str, module: Module) -> None:
        self.add_module(name, module)

    def __contains__(self, name: str) -> bool:
        return name in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

