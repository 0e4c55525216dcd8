"""``Executable.export_static``: a compiled model as a static archive plus a C header.

``ex.export_static(dir, name="mlp")`` writes

- ``mlp.a``: one object holding the kernels, the kernel table and the executable blob. Only four
  symbols are global, all prefixed with the model's name so several models link into one
  program: ``kiln_model_mlp_library_info`` (the ``kiln_library_info_t``),
  ``kiln_model_mlp_blob`` / ``kiln_model_mlp_blob_size``, and the entry point
  ``kiln_model_mlp_create``; the kernels themselves are internal.
- ``mlp.h``: declares them. ``kiln_model_mlp_create(&lib)`` is
  ``kiln_module_from_static(&kiln_model_mlp_library_info, kiln_model_mlp_blob,
  kiln_model_mlp_blob_size, &lib)``: the same library module ``kiln_module_load_library`` gives
  for ``mlp.so`` (call ``load_executable``, then ``init`` and ``forward``), with no dlopen and no
  file system.

Link: ``cc app.c mlp.a libkiln_runtime.a -lm -lpthread`` (plus ``-ldl`` on glibc < 2.34).

Everything is done in LLVM: the optimized kernel module is renamed and internalized, the blob
and the entry point are linked in as a second LLVM module, and one object is emitted, archived
in Python (no binutils needed).
"""
from __future__ import annotations

import os
import re
import struct
from typing import Dict, Union

import numpy as np

from .executable import BLOB_SIZE_SYMBOL, BLOB_SYMBOL

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def symbol_names(name: str) -> Dict[str, str]:
    """The global symbols of a model exported as ``name``."""
    p = f"kiln_model_{name}_"
    return {"info": p + "library_info", "blob": p + "blob", "blob_size": p + "blob_size",
            "create": p + "create"}


def _glue_ir(blob: bytes, syms: Dict[str, str], triple: str, data_layout: str) -> str:
    """LLVM IR text: the blob, its size and the entry point calling kiln_module_from_static.
    The blob initializer is written as text (every byte as \\XX) for speed, as blob_object."""
    raw = np.frombuffer(blob, dtype=np.uint8)
    hexd = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
    text = np.empty((raw.size, 3), dtype=np.uint8)
    text[:, 0], text[:, 1], text[:, 2] = ord("\\"), hexd[raw >> 4], hexd[raw & 15]
    init = text.tobytes().decode("ascii")
    n = len(blob)
    return f"""target triple = "{triple}"
target datalayout = "{data_layout}"

@{syms['info']} = external constant i8
@{syms['blob']} = constant [{n} x i8] c"{init}", align 64
@{syms['blob_size']} = constant i64 {n}, align 8

declare i32 @kiln_module_from_static(ptr, ptr, i64, ptr)

define i32 @{syms['create']}(ptr %out) {{
  %r = call i32 @kiln_module_from_static(ptr @{syms['info']}, ptr @{syms['blob']}, i64 {n}, ptr %out)
  ret i32 %r
}}
"""


def _header(ex, name: str, syms: Dict[str, str]) -> str:
    guard = f"KILN_MODEL_{name.upper()}_H_"
    lines = []
    for f in (f for f in ex.spec.functions if not f.private):
        args = ", ".join(f"{p.name}: {p.dtype}[{', '.join(str(d) for d in p.shape)}]" for p in f.params)
        lines.append(f" *   {f.name}({args})")
    sigs = "\n".join(lines) or " *   (none)"
    return f"""/*
 * {name}.h: the Kiln model "{name}", exported by Executable.export_static for static linking.
 * Generated; do not edit. Target: {ex.spec.target}
 *
 * Link {name}.a with the runtime (runtime_c/build/libkiln_runtime.a) and -lm -lpthread
 * (-ldl on glibc < 2.34). Needs runtime_c/include on the include path.
 *
 * Graph functions of the VM (arguments: name: dtype[shape]):
{sigs}
 */
#ifndef {guard}
#define {guard}

#include <stdint.h>
#include "kiln_runtime.h"

#ifdef __cplusplus
extern "C" {{
#endif

/* The kernel table and the executable blob (docs/executable-format.md), linked in. */
extern const kiln_library_info_t {syms['info']};
extern const uint8_t {syms['blob']}[];
extern const uint64_t {syms['blob_size']};

/* Makes the model's library module, as kiln_module_load_library("{name}.so") would, without
 * dlopen or any file: kiln_module_from_static(&{syms['info']}, {syms['blob']},
 * {syms['blob_size']}, out_module). Call its "load_executable" for the VM, then "init" and the
 * graph functions. *out_module is one reference owned by the caller (kiln_module_release); it
 * is written on success only. Errors: as kiln_module_from_static (KILN_ERR_VERSION_MISMATCH when
 * linked with a runtime of another kernel ABI), message in kiln_last_error(). Thread-safe. */
kiln_status_t {syms['create']}(kiln_module_t** out_module);

#ifdef __cplusplus
}}
#endif
#endif /* {guard} */
"""


def _ar_archive(obj: bytes, symbols) -> bytes:
    """A System V / GNU ``ar`` archive of one member, ``kiln_model.o``, with the symbol index
    ("/" member: big-endian count, member offsets, NUL-terminated names) that linkers need.
    Written here rather than by running ``ar`` so the export needs no binutils and is
    byte-for-byte reproducible (dates 0)."""
    def member(name: str, data: bytes) -> bytes:
        hdr = f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
        assert len(hdr) == 60
        return hdr + data + (b"\n" if len(data) % 2 else b"")

    names = b"".join(s.encode() + b"\0" for s in symbols)
    index_size = 4 + 4 * len(symbols) + len(names)
    obj_offset = 8 + 60 + index_size + index_size % 2
    index = struct.pack(f">{1 + len(symbols)}I", len(symbols), *[obj_offset] * len(symbols)) + names
    return b"!<arch>\n" + member("/", index) + member("kiln_model.o/", obj)


def export_static(ex, directory: Union[str, os.PathLike], name: str = "model",
                  options=None) -> Dict[str, str]:
    """Write ``<name>.a`` and ``<name>.h`` into ``directory`` (created if needed); see the module
    docstring. ``name`` must be a C identifier. Returns ``{"archive": path, "header": path}``."""
    import llvmlite.binding as llvm
    from ..codegen.emit import BuildOptions, _compile_ir, lower_to_llvm

    if not isinstance(name, str) or not _IDENT.match(name):
        raise ValueError(f"export_static: name {name!r} is not a C identifier")
    source = getattr(ex, "_static_source", None)
    if source is None:
        raise ValueError("export_static: this Executable does not hold its lowered module "
                         "(only executables made by kiln.compile can be exported statically)")
    from ..driver import lower
    lowered, target, options = lower(source[0]), source[1], options or source[2] or BuildOptions()
    syms = symbol_names(name)

    module, kernels, notes = lower_to_llvm(lowered, target, allow_empty=True)
    compiled = _compile_ir(str(module), target, kernels, notes, options)
    llmod, tm = compiled._mod, compiled._tm
    from ..codegen.abi import LIBRARY_SYMBOL
    llmod.get_global_variable(LIBRARY_SYMBOL).name = syms["info"]
    # Internalize every other definition: the kernels are reached through the table only.
    for v in [*llmod.functions, *llmod.global_variables]:
        if (not v.is_declaration and v.name != syms["info"] and not v.name.startswith("llvm.")
                and v.linkage not in (llvm.Linkage.internal, llvm.Linkage.private)):
            v.linkage = "internal"
    glue = llvm.parse_assembly(_glue_ir(ex.blob, syms, llmod.triple, str(llmod.data_layout)))
    glue.verify()
    llmod.link_in(glue)
    llmod.verify()
    obj = bytes(tm.emit_object(llmod))

    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    archive, header = os.path.join(directory, f"{name}.a"), os.path.join(directory, f"{name}.h")
    with open(archive, "wb") as f:
        f.write(_ar_archive(obj, sorted(syms.values())))
    with open(header, "w") as f:
        f.write(_header(ex, name, syms))
    return {"archive": archive, "header": header}


__all__ = ["export_static", "symbol_names"]
