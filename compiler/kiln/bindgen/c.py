"""Typed C bindings: ``<name>_bindings.h``, header-only (static inline), over kiln_runtime.h.

For a model ``mlp`` with ``forward(x: float32[1, 784]) -> float32[1, 10]``::

    kiln_model_mlp_t m;
    if (kiln_model_mlp_open(&m, "mlp.so") != KILN_OK) { puts(kiln_last_error()); ... }
    float x[1][784] = {...}, out[1][10];
    kiln_model_mlp_forward(&m, x, out);          /* checked types, no shapes to pass */
    kiln_model_mlp_close(&m);

Every dimension and the planned arena are constants (``KILN_MODEL_MLP_FORWARD_X_DIM1`` = 784,
``KILN_MODEL_MLP_FORWARD_ARENA_BYTES``). Inputs are wrapped without copying; outputs are copied
into the caller's arrays. A statically linked model (``export_static``) also gets
``kiln_model_mlp_open_static`` (no file, no dlopen).
"""
from __future__ import annotations

from typing import List

from .signature import FunctionSig, TensorSig

C_TYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t",
           "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t",
           "uint32": "uint32_t", "uint64": "uint64_t"}
_DL = {"float32": ("kDLFloat", 32), "float64": ("kDLFloat", 64), "int8": ("kDLInt", 8),
       "int16": ("kDLInt", 16), "int32": ("kDLInt", 32), "int64": ("kDLInt", 64),
       "uint8": ("kDLUInt", 8), "uint16": ("kDLUInt", 16), "uint32": ("kDLUInt", 32),
       "uint64": ("kDLUInt", 64)}


def c_type(t: TensorSig, fname: str) -> str:
    from .signature import BindgenError
    if t.dtype not in C_TYPES:
        raise BindgenError(f"function {fname!r}: {t.name!r} has dtype {t.dtype}, which typed bindings "
                           f"do not map (supported: {', '.join(C_TYPES)})")
    return C_TYPES[t.dtype]


def _dims(t: TensorSig) -> str:
    return "".join(f"[{d}]" for d in t.shape) if t.shape else "[1]"


def _macro(name: str, f: FunctionSig, rest: str) -> str:
    return f"KILN_MODEL_{name.upper()}_{f.name.upper()}_{rest}"


def _function(name: str, f: FunctionSig) -> List[str]:
    p = f"kiln_model_{name}"
    ins = [f"const {c_type(t, f.name)} {t.ident}{_dims(t)}" for t in f.inputs]
    outs = [f"{c_type(t, f.name)} {t.ident}{_dims(t)}" for t in f.outputs]
    sig = ", ".join(t.name + ": " + t.dtype + str(list(t.shape)) for t in f.inputs)
    res = ", ".join(t.dtype + str(list(t.shape)) for t in f.outputs)
    lines = [f"/* {f.name}({sig}) -> {res} */",
             f"#define {_macro(name, f, 'ARENA_BYTES')} {f.arena_bytes}"]
    for t in (*f.inputs, *f.outputs):
        for k, d in enumerate(t.shape):
            lines.append(f"#define {_macro(name, f, t.ident.upper() + f'_DIM{k}')} {d}")
    n_in = len(f.inputs)
    lines += [f"static inline kiln_status_t {p}_{f.name}({p}_t* m, {', '.join(ins + outs)}) {{",
              f"  kiln_value_t args[{max(n_in, 1)}];",
              "  kiln_value_t result = {KILN_VALUE_NULL, {0}};",
              "  kiln_status_t st = KILN_OK;",
              "  int32_t made = 0;"]
    for k, t in enumerate(f.inputs):
        code, bits = _DL[t.dtype]
        shape = ", ".join(str(d) for d in t.shape) or "1"
        lines += ["  if (st == KILN_OK) {",
                  f"    static const int64_t shape[] = {{{shape}}};",
                  f"    st = {p}__wrap((void*){t.ident}, shape, {len(t.shape)}, {code}, {bits}, &args[{k}]);",
                  "    made += st == KILN_OK;",
                  "  }"]
    lines += [f"  if (st == KILN_OK) st = kiln_function_call(m->{f.name}, args, {n_in}, &result);"]
    for k, t in enumerate(f.outputs):
        src = "&result" if not f.tuple_output else f"&item{k}"
        if f.tuple_output:
            lines += [f"  kiln_value_t item{k} = {{KILN_VALUE_NULL, {{0}}}};",
                      f"  if (st == KILN_OK) st = kiln_tuple_get_item(result.u.tuple, {k}, &item{k});"]
        lines += [f"  if (st == KILN_OK) st = {p}__copy_out({src}, {t.ident}, sizeof({c_type(t, f.name)}) * {t.size}, "
                  f"\"{f.name}: output {k}\");"]
        if f.tuple_output:
            lines += [f"  kiln_value_release(&item{k});"]
    lines += ["  kiln_value_release(&result);",
              "  for (int32_t i = 0; i < made; ++i) kiln_value_release(&args[i]);",
              "  return st;", "}", ""]
    return lines


def generate_c(name: str, sigs: List[FunctionSig], static: bool = False) -> str:
    """The text of ``<name>_bindings.h``; ``static``: the model is linked in (``<name>.h``)."""
    p, guard = f"kiln_model_{name}", f"KILN_MODEL_{name.upper()}_BINDINGS_H_"
    fields = "".join(f"  kiln_function_t* {f.name};\n" for f in sigs)
    lookups = "".join(f"  if (st == KILN_OK) st = kiln_module_get_function(m->vm, \"{f.name}\", &m->{f.name});\n"
                      for f in sigs)
    releases = "".join(f"  kiln_function_release(m->{f.name});\n" for f in sigs)
    body = [line for f in sigs for line in _function(name, f)]
    static_open = f"""
/* The statically linked model ({name}.a, {name}.h): no file, no dlopen. */
static inline kiln_status_t {p}_open_static({p}_t* m) {{
  kiln_module_t* lib = NULL;
  kiln_status_t st = kiln_model_{name}_create(&lib);
  if (st == KILN_OK) st = {p}_init(m, lib);
  kiln_module_release(lib);
  return st;
}}
""" if static else ""
    return f"""/*
 * {name}_bindings.h: typed C bindings of the Kiln model "{name}" (kiln.bindgen). Generated; do
 * not edit. Header-only over kiln_runtime.h: include it in one or more C files and link the
 * runtime{f" and {name}.a" if static else ""}.
 *
 *   {p}_t m;
 *   {p}_open(&m, "{name}.so");{"       (or " + p + "_open_static(&m))" if static else ""}
 *   {p}_<function>(&m, inputs..., outputs...);   returns KILN_OK or a status, message in
 *                                                 kiln_last_error()
 *   {p}_close(&m);
 *
 * Inputs are borrowed for the call (wrapped, not copied); outputs are copied into the arrays
 * given. A {p}_t may be used from several threads at once once opened.
 */
#ifndef {guard}
#define {guard}

#include <stdint.h>
#include <string.h>
#include "kiln_runtime.h"
{f'#include "{name}.h"' if static else ""}

#ifdef __cplusplus
extern "C" {{
#endif

typedef struct {p}_t {{
  kiln_module_t* vm;
{fields}}} {p}_t;

/* Releases what open/init made; safe on a zeroed or partly opened struct. */
static inline void {p}_close({p}_t* m) {{
{releases}  kiln_module_release(m->vm);
  memset(m, 0, sizeof *m);
}}

/* Makes the VM of library module `lib` (borrowed), initialises it for the CPU and looks up
 * every function. On failure *m is left closed. */
static inline kiln_status_t {p}_init({p}_t* m, kiln_module_t* lib) {{
  memset(m, 0, sizeof *m);
  kiln_function_t* load = NULL;
  kiln_value_t vm = {{KILN_VALUE_NULL, {{0}}}};
  kiln_status_t st = kiln_module_get_function(lib, "load_executable", &load);
  if (st == KILN_OK) st = kiln_function_call(load, NULL, 0, &vm);
  kiln_function_release(load);
  if (st == KILN_OK) {{
    m->vm = vm.u.module;  /* takes the reference */
    kiln_function_t* init = NULL;
    kiln_value_t cpu = {{KILN_VALUE_DEVICE, {{0}}}};
    cpu.u.device.device_type = kDLCPU;
    cpu.u.device.device_id = 0;
    st = kiln_module_get_function(m->vm, "init", &init);
    if (st == KILN_OK) st = kiln_function_call(init, &cpu, 1, NULL);
    kiln_function_release(init);
  }}
{lookups}  if (st != KILN_OK) {p}_close(m);
  return st;
}}

/* Loads {name}.so (kiln_module_load_library) and initialises it. */
static inline kiln_status_t {p}_open({p}_t* m, const char* path) {{
  kiln_module_t* lib = NULL;
  kiln_status_t st = kiln_module_load_library(path, &lib);
  if (st == KILN_OK) st = {p}_init(m, lib);
  else memset(m, 0, sizeof *m);
  kiln_module_release(lib);
  return st;
}}
{static_open}
/* Internal: a tensor value over caller memory (contiguous, CPU), and copying a result out. */
static inline kiln_status_t {p}__wrap(void* data, const int64_t* shape, int32_t ndim, uint8_t code,
                                       uint8_t bits, kiln_value_t* out) {{
  DLTensor dl;
  memset(&dl, 0, sizeof dl);
  dl.data = data;
  dl.device.device_type = kDLCPU;
  dl.ndim = ndim;
  dl.dtype.code = code;
  dl.dtype.bits = bits;
  dl.dtype.lanes = 1;
  dl.shape = (int64_t*)shape;
  out->kind = KILN_VALUE_TENSOR;
  return kiln_tensor_wrap(&dl, NULL, NULL, &out->u.tensor);
}}

static inline kiln_status_t {p}__copy_out(const kiln_value_t* v, void* dst, size_t nbytes, const char* what) {{
  if (v->kind != KILN_VALUE_TENSOR || kiln_tensor_nbytes(v->u.tensor) != nbytes)
    return kiln_set_last_error(KILN_ERR_SHAPE_MISMATCH, what);
  const DLTensor* dl = kiln_tensor_dltensor(v->u.tensor);
  memcpy(dst, (const char*)dl->data + dl->byte_offset, nbytes);
  return KILN_OK;
}}

{chr(10).join(body)}
#ifdef __cplusplus
}}
#endif
#endif /* {guard} */
"""
