"""Lazy attributes for a package: names that import their module on first use (PEP 562).

>>> __getattr__, __dir__ = lazy_attributes(__name__, {"te": ("kiln.te", None)}, globals())  # doctest: +SKIP
"""
from importlib import import_module


def lazy_attributes(package: str, table: dict, namespace: dict):
    """``table`` maps a public name to ``(module, attribute or None for the module itself)``.
    Returns the package's ``__getattr__`` and ``__dir__``; a resolved name is cached in
    ``namespace`` (the package's globals) so the hook runs once per name."""
    def __getattr__(name):
        try:
            module, attr = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = import_module(module)
        if attr is not None:
            value = getattr(value, attr)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(list(namespace) + list(table))
    return __getattr__, __dir__
