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

Link: ``cc app.c mlp.a $(kiln config --cflags --libs --static)`` (the runtime's include path,
``libkiln_runtime.a``, ``-lm -lpthread -ldl``; ``kiln.libinfo`` gives the same from Python).

Everything is done in LLVM and Python (no binutils needed): the optimized kernel module is
renamed and internalized, the entry point is linked in as a second LLVM module, and one object
is emitted. For ELF targets the blob is a second archive member written directly, streaming the
constants from their arrays (``kiln.executable.blob_object``); elsewhere it is linked into the
LLVM module as an initializer. The archive is written in Python too.
"""
from __future__ import annotations

import os
import re
import struct
from typing import Dict, Optional, Union

import numpy as np

from .blob_object import elf_machine, write_elf_object
from .format import layout, serialize, write_pieces

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def symbol_names(name: str) -> Dict[str, str]:
    """The global symbols of a model exported as ``name``."""
    p = f"kiln_model_{name}_"
    return {"info": p + "library_info", "blob": p + "blob", "blob_size": p + "blob_size",
            "create": p + "create"}


# KILN_ERR_UNSUPPORTED of kiln_runtime.h: the status of a model whose CPU features are missing.
_ERR_UNSUPPORTED = 0x14


def _cpu_check_ir(target, name: str, syms: Dict[str, str]) -> str:
    """LLVM IR text of the internal CPU check ``create`` calls first (``kiln.codegen.cpu_features``;
    empty when the target gets none)."""
    from ..codegen.cpu_features import (can_check, check_function_ir, missing_message,
                                        required_features)
    feats = required_features(target)
    if not (feats and can_check(target)):
        return ""
    return check_function_ir(feats, syms["create"] + ".cpu_missing",
                             lambda f, os_disabled: missing_message(f, target.cpu, os_disabled,
                                                                    what=f"model '{name}'"))


def _glue_ir(blob: Optional[bytes], size: int, syms: Dict[str, str], triple: str,
             data_layout: str, cpu_check: str = "") -> str:
    """LLVM IR text: the entry point calling kiln_module_from_static and, when ``blob`` is
    given, the blob and its size (else they are declared: another object defines them). The
    blob initializer is written as text (every byte as \\XX) for speed, as
    ``blob_object.llvm_blob_object``. ``cpu_check`` (``_cpu_check_ir``): the entry point first
    refuses a machine without the model's CPU features (KILN_ERR_UNSUPPORTED, the message set
    with kiln_set_last_error)."""
    n = size
    check_decl = check_call = ""
    if cpu_check:
        check_decl = f"declare i32 @kiln_set_last_error(i32, ptr)\n{cpu_check}\n"
        check_call = (f"  %lacks = call ptr @{syms['create']}.cpu_missing()\n"
                      f"  %refused = icmp ne ptr %lacks, null\n"
                      f"  br i1 %refused, label %refuse, label %make\n"
                      f"refuse:\n"
                      f"  %st = call i32 @kiln_set_last_error(i32 {_ERR_UNSUPPORTED}, ptr %lacks)\n"
                      f"  ret i32 %st\n"
                      f"make:\n")
    if blob is None:
        data = f"""@{syms['blob']} = external constant i8
@{syms['blob_size']} = external constant i64"""
    else:
        raw = np.frombuffer(blob, dtype=np.uint8)
        hexd = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
        text = np.empty((raw.size, 3), dtype=np.uint8)
        text[:, 0], text[:, 1], text[:, 2] = ord("\\"), hexd[raw >> 4], hexd[raw & 15]
        init = text.tobytes().decode("ascii")
        data = f"""@{syms['blob']} = constant [{n} x i8] c"{init}", align 64
@{syms['blob_size']} = constant i64 {n}, align 8"""
    return f"""target triple = "{triple}"
target datalayout = "{data_layout}"

@{syms['info']} = external constant i8
{data}

declare i32 @kiln_module_from_static(ptr, ptr, i64, ptr)
{check_decl}
define i32 @{syms['create']}(ptr %out) {{
{check_call}  %r = call i32 @kiln_module_from_static(ptr @{syms['info']}, ptr @{syms['blob']}, i64 {n}, ptr %out)
  ret i32 %r
}}
"""


def _align(n: int, a: int = 64) -> int:
    return (n + a - 1) // a * a


def arena_bytes(spec) -> Optional[int]:
    """An upper bound, on every target, of ``kiln_vm_arena_bytes`` for the VM of ``spec``: the
    caller's arena that lets a call of any public function allocate nothing
    (``kiln_vm_set_arena``), or None when a function cannot run in one (an output of symbolic
    shape, or several outputs). It mirrors the runtime's ``arena_need`` (vm.c) and frame layout
    (vm_loader.c) with 64-bit sizes, the largest: the frame's header is 32 bytes, a value 16, a
    tensor header 72 plus 16 per dimension."""
    from .format import Op
    value, tensor_head = 16, 72
    frame_head = 32     # KILN_VM_FRAME_HEADER (vm.h)

    def head(ndim):
        return _align(tensor_head + 16 * ndim, 8)

    def need(f):
        ops = [(i.opcode, i.operands) for i in f.code]
        max_args = max([o[1] for op, o in ops if op in (Op.CALL_KERNEL, Op.CALL_EXTERN)] +
                       [o[2] for op, o in ops if op == Op.CALL_PACKED] +
                       [o[4] for op, o in ops if op == Op.IF] + [0])
        views = sum(head(o[5]) for op, o in ops if op == Op.ALLOC_ARENA)
        frame = _align(frame_head + value * (f.num_registers + max_args) + views) + f.arena_size
        n = _align(frame) + 64
        for op, o in ops:
            if op == Op.ALLOC_OUTPUT:
                ndim, dims = o[4], o[5:5 + o[4]]
                if any(d < 0 for d in dims):
                    return None
                nbytes = o[2] * o[3]    # bits; sub-byte elements are packed
                for d in dims:
                    nbytes *= d
                nbytes = (nbytes + 7) // 8
                n += _align(head(ndim)) + _align(nbytes) + 64
            elif op == Op.MAKE_TUPLE:  # kiln_tuple_init_borrowed: 8 bytes, then the items
                n += _align(8 + value * o[1]) + 64
            elif op == Op.IF:
                a, b = need(spec.functions[o[2]]), need(spec.functions[o[3]])
                if a is None or b is None:
                    return None
                n += max(a, b)
        return n

    needs = [need(f) for f in spec.functions if not f.private]
    return None if any(n is None for n in needs) else max(needs + [0])


def _header(ex, name: str, syms: Dict[str, str]) -> str:
    guard = f"KILN_MODEL_{name.upper()}_H_"
    arena = arena_bytes(ex.spec)
    if arena is None:
        arena_def = (f"/* No KILN_MODEL_{name.upper()}_ARENA_BYTES: a function returns an output of\n"
                     " * symbolic shape, which kiln_vm_set_arena cannot hold. */")
    else:
        arena_def = (f"/* Bytes of the arena to give kiln_vm_set_arena(vm, arena, n) so that calls allocate\n"
                     f" * nothing (embedded use; KILN_ALIGNMENT-aligned memory): an upper bound of\n"
                     f" * kiln_vm_arena_bytes on every target. */\n"
                     f"#define KILN_MODEL_{name.upper()}_ARENA_BYTES {arena}u")
    lines = []
    for f in (f for f in ex.spec.functions if not f.private):
        args = ", ".join(f"{p.name}: {p.dtype}[{', '.join(str(d) for d in p.shape)}]" for p in f.params)
        lines.append(f" *   {f.name}({args})")
    sigs = "\n".join(lines) or " *   (none)"
    from ..codegen.cpu_features import required_features
    import textwrap
    features = textwrap.fill(", ".join(required_features(ex._static_source[1]))
                             or "none beyond the architecture's baseline", 96,
                             initial_indent=" *   ", subsequent_indent=" *   ")
    return f"""/*
 * {name}.h: the Kiln model "{name}", exported by Executable.export_static for static linking.
 * Generated; do not edit. Target: {ex.spec.target}
 * CPU features the code needs (checked by {syms['create']}):
{features}
 *
 * Build with the Kiln runtime; `kiln config` prints its flags (the static runtime and the
 * system libraries it needs, and the include path of kiln_runtime.h):
 *   cc app.c {name}.a $(kiln config --cflags --libs --static)
 * CMake: find_package(Kiln) with -DKiln_DIR="$(kiln config --cmakedir)", then link
 * {name}.a and Kiln::runtime_static.
 *
 * Graph functions of the VM (arguments: name: dtype[shape]):
{sigs}
 */
#ifndef {guard}
#define {guard}

#include <stdint.h>
#include "kiln_runtime.h"

{arena_def}

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
 * linked with a runtime of another kernel ABI); on x86-64, KILN_ERR_UNSUPPORTED when this CPU
 * lacks one of the features above (checked first, with CPUID); message in kiln_last_error().
 * Thread-safe. */
kiln_status_t {syms['create']}(kiln_module_t** out_module);

#ifdef __cplusplus
}}
#endif
#endif /* {guard} */
"""


def _write_ar(f, members) -> None:
    """Write a System V / GNU ``ar`` archive into file ``f``: ``members`` are ``(name, size,
    write_data, symbols)`` (``write_data(write)`` writes the member's ``size`` bytes), and the
    symbol index ("/" member: big-endian count, member offsets, NUL-terminated names) that
    linkers need maps each symbol to its member. Written here rather than by running ``ar`` so
    the export needs no binutils and is byte-for-byte reproducible (dates 0)."""
    def header(name: str, size: int) -> bytes:
        hdr = f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{size:<10}`\n".encode()
        assert len(hdr) == 60
        return hdr

    symbols = [(sym, k) for k, m in enumerate(members) for sym in m[3]]
    names = b"".join(sym.encode() + b"\0" for sym, _ in symbols)
    index_size = 4 + 4 * len(symbols) + len(names)
    offsets, pos = [], 8 + 60 + index_size + index_size % 2
    for _, size, _, _ in members:
        offsets.append(pos)
        pos += 60 + size + size % 2
    f.write(b"!<arch>\n" + header("/", index_size))
    f.write(struct.pack(f">{1 + len(symbols)}I", len(symbols), *[offsets[k] for _, k in symbols]) + names)
    f.write(b"\n" if index_size % 2 else b"")
    for name, size, write_data, _ in members:
        f.write(header(name, size))
        written = write_data(f.write)
        assert written == size, (name, written, size)
        f.write(b"\n" if size % 2 else b"")


def _counted(write_data) -> int:
    """How many bytes ``write_data(write)`` writes (nothing is kept)."""
    n = [0]

    def count(data):
        n[0] += len(data) if not isinstance(data, memoryview) else data.nbytes
    write_data(count)
    return n[0]


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
    machine = elf_machine(target.triple)
    size, pieces = layout(ex.spec)   # the blob in pieces, constants as views
    glue = llvm.parse_assembly(_glue_ir(serialize(ex.spec) if machine is None else None, size, syms,
                                        llmod.triple, str(llmod.data_layout),
                                        _cpu_check_ir(target, name, syms)))
    glue.verify()
    llmod.link_in(glue)
    llmod.verify()
    obj = bytes(tm.emit_object(llmod))

    def write_obj(write):
        write(obj)
        return len(obj)
    members = [("kiln_model.o/", len(obj), write_obj, sorted([syms["info"], syms["create"]]))]
    if machine is not None:
        def write_blob(write):
            return write_elf_object(write, machine, size, lambda w: write_pieces(size, pieces, w),
                                    syms["blob"], syms["blob_size"])
        members.append(("kiln_blob.o/", _counted(write_blob), write_blob,
                        sorted([syms["blob"], syms["blob_size"]])))
    else:
        members[0][3].extend([syms["blob"], syms["blob_size"]])
        members[0][3].sort()

    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    archive, header = os.path.join(directory, f"{name}.a"), os.path.join(directory, f"{name}.h")
    with open(archive, "wb") as f:
        _write_ar(f, members)
    with open(header, "w") as f:
        f.write(_header(ex, name, syms))
    return {"archive": archive, "header": header}


__all__ = ["export_static", "symbol_names"]
