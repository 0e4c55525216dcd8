"""Imports every operator family so that each registers its operators (one file per family)."""
import importlib
import pkgutil

from . import __path__ as _ops_path

for _info in pkgutil.iter_modules(_ops_path):
    if not _info.name.startswith("_") and _info.name not in ("registry", "common"):
        importlib.import_module(f"{__package__}.{_info.name}")
