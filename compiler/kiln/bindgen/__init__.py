"""Typed bindings per model: for each graph function a C function, a C++ method and a Java
method whose parameter types carry the names, dtypes and shapes of its signature, so embedding
a model is one ``#include`` or one class.

>>> kiln.bindgen.write_bindings(ex.spec, "out", "mlp", langs=("c", "cpp", "java"))  # doctest: +SKIP
{'c': 'out/mlp_bindings.h', 'cpp': 'out/mlp.hpp', 'java': 'out/MlpModel.java'}

``Executable.export_static(dir, name)`` writes the C and C++ ones beside ``<name>.a``;
``kiln export-bindings model.so --lang c,cpp,java`` writes them for a shipped library. Files:
``signature.py`` (what the executable says about each function), ``c.py``, ``cpp.py``,
``java.py`` (one generator each).
"""
from __future__ import annotations

import os
import re
from typing import Dict, Iterable, Optional

from .c import generate_c
from .cpp import class_name, generate_cpp
from .java import generate_java
from .signature import BindgenError, FunctionSig, TensorSig, signatures

LANGS = ("c", "cpp", "java")


def write_bindings(spec, directory, name: str, langs: Iterable[str] = LANGS, static: bool = False,
                   java_package: Optional[str] = None) -> Dict[str, str]:
    """Write the bindings of ``spec`` (an ``ExecutableSpec``) for ``langs`` into ``directory``:
    ``<name>_bindings.h`` (C; the C++ header includes it, so "cpp" writes it too),
    ``<name>.hpp`` (C++), ``<Name>Model.java`` (Java). ``static``: the model is linked in
    (``export_static``), which adds the ``open_static`` entry points. Returns lang -> path.
    Raises ``BindgenError`` for what typed bindings cannot express (symbolic shapes, ...)."""
    langs = list(langs)
    unknown = [lang for lang in langs if lang not in LANGS]
    if unknown:
        raise BindgenError(f"unknown binding language(s) {unknown}; choose from {', '.join(LANGS)}")
    if not re.match(r"[A-Za-z_][A-Za-z0-9_]*\Z", name or ""):
        raise BindgenError(f"model name {name!r} is not a C identifier")
    sigs = signatures(spec)
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    texts = {}
    if "c" in langs or "cpp" in langs:
        texts["c"] = (f"{name}_bindings.h", generate_c(name, sigs, static))
    if "cpp" in langs:
        texts["cpp"] = (f"{name}.hpp", generate_cpp(name, sigs, static))
    if "java" in langs:
        texts["java"] = (f"{class_name(name)}Model.java", generate_java(name, sigs, java_package))
    written = {}
    for lang, (filename, text) in texts.items():
        path = os.path.join(directory, filename)
        with open(path, "w") as f:
            f.write(text)
        written[lang] = path
    return written


__all__ = ["BindgenError", "FunctionSig", "LANGS", "TensorSig", "signatures", "write_bindings"]
