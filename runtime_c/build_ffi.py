"""Builds the Python extension `kiln._ffi` (cffi, out-of-line API mode) from the runtime's C
sources, and places it at compiler/kiln/_ffi*.so.

    .venv/bin/python runtime_c/build_ffi.py

The cdef is generated from the public headers (dlpack.h, kiln_kernel_abi.h, kiln_runtime.h), so
the binding can never drift from the C API. The only hand-written declarations are the few
Python-glue helpers defined below (DLPack capsules need the CPython C API).
"""

import os
import re
import shutil
import sys
import sysconfig
import tempfile

import cffi

ROOT = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(ROOT, "include")
SRC = os.path.join(ROOT, "src")
HEADERS = ["dlpack.h", "kiln_kernel_abi.h", "kiln_runtime.h", "kiln_cuda.h", "kiln_strings.h"]
# The optional CUDA device (dlopens the driver only when a device is opened); the Python binding
# links it in, the shared runtime does not (runtime_c/Makefile builds it as libkiln_cuda.so).
CUDA_SOURCES = [os.path.join(ROOT, "cuda", "kiln_cuda.c"), os.path.join(ROOT, "cuda", "kiln_cuda_executable.c")]
# The string tensors and the string operators' functions (docs/strings.md), likewise: the binding
# links them in and registers them when it loads (kiln_strings_register), so the functions share
# the binding's runtime (its registry and last error); C programs link libkiln_strings.so.
STRING_SOURCES = [os.path.join(ROOT, "strings", "kiln_strings.c"), os.path.join(ROOT, "strings", "kiln_strings_vm.c")]
PACKAGE_DIR = os.path.join(os.path.dirname(ROOT), "compiler", "kiln")
BUILD_ROOT = os.path.join(ROOT, "build")

# Python glue compiled into the extension. cffi calls release the GIL, so each helper takes it
# before touching Python objects. Capsules are passed as their address (CPython's id()).
# The two `extern "Python"` functions are defined in Python (kiln.runtime.registry) and back
# functions made with kiln_function_create: the callback of a registered Python function and
# the deleter of its context; cffi takes the GIL around them.
GLUE_CDEF = """
const char* kiln_py_capsule_name(int versioned);
void kiln_py_capsule_destructor(void* capsule);
kiln_status_t kiln_py_tensor_from_capsule(void* capsule, kiln_tensor_t** out_tensor);
extern "Python" kiln_status_t kiln_py_callback(void* ctx, const kiln_value_t* args,
                                               int32_t num_args, kiln_value_t* out_result);
extern "Python" void kiln_py_callback_delete(void* ctx);
"""

GLUE_SOURCE = r"""
#include "kiln_runtime.h"
#include "kiln_cuda.h"
#include "kiln_strings.h"

/* Static, so a capsule's name outlives any Python object. Index: versioned, used. */
static const char* const kiln_py_names[2][2] = {
    {"dltensor", "used_dltensor"}, {"dltensor_versioned", "used_dltensor_versioned"}};

const char* kiln_py_capsule_name(int versioned) { return kiln_py_names[versioned != 0][0]; }

/* A capsule still carrying its original name was never consumed: it owns the managed tensor.
 * A consumer renames it to "used_..." when it takes ownership. Called with the GIL held. */
void kiln_py_capsule_destructor(void* capsule) {
  PyObject* cap = (PyObject*)capsule;
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    DLManagedTensorVersioned* m = PyCapsule_GetPointer(cap, "dltensor_versioned");
    if (m && m->deleter) m->deleter(m);
  } else if (PyCapsule_IsValid(cap, "dltensor")) {
    DLManagedTensor* m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
  }
}

/* Consumes a DLPack capsule (either kind) into a kiln tensor that owns it. */
kiln_status_t kiln_py_tensor_from_capsule(void* capsule, kiln_tensor_t** out_tensor) {
  PyObject* cap = (PyObject*)capsule;
  kiln_status_t st;
  PyGILState_STATE gil = PyGILState_Ensure();
  int versioned = PyCapsule_IsValid(cap, "dltensor_versioned");
  if (!versioned && !PyCapsule_IsValid(cap, "dltensor")) {
    st = kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT,
        "from_dlpack: expected an unconsumed 'dltensor' or 'dltensor_versioned' capsule");
  } else {
    void* m = PyCapsule_GetPointer(cap, kiln_py_names[versioned][0]);
    st = versioned ? kiln_tensor_from_dlpack((DLManagedTensorVersioned*)m, out_tensor)
                   : kiln_tensor_from_dlpack_legacy((DLManagedTensor*)m, out_tensor);
    /* The tensor owns it now: rename so the capsule's destructor leaves it alone. */
    if (st == KILN_OK) PyCapsule_SetName(cap, kiln_py_names[versioned][1]);
  }
  PyErr_Clear();
  PyGILState_Release(gil);
  return st;
}
"""


def header_cdef(text):
    """Turns a C header into cffi cdef text: drops comments, includes, C++-only blocks and
    non-integer macros; turns integer macros into `#define NAME ...` (resolved by the compiler
    in API mode); strips the export macro."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    out, active = [], [True]  # stack: is the current conditional branch kept?
    for line in text.splitlines():
        directive = line.strip()
        if directive.startswith("#"):
            words = directive[1:].split()
            keyword, args = (words[0], words[1:]) if words else ("", [])
            if keyword in ("if", "ifdef", "ifndef"):
                # Branches for C++ are dropped; every other condition (include guards, compiler
                # checks) is taken as true: cffi parses C as the C compiler sees it.
                cplusplus = any("__cplusplus" in a for a in args)
                active.append(active[-1] and not (cplusplus and keyword != "ifndef"))
            elif keyword in ("elif", "else"):
                # The headers use two-way conditionals only: switch to the other branch.
                active[-1] = active[-2] and not active[-1]
            elif keyword == "endif":
                active.pop()
            elif keyword == "define" and active[-1] and len(args) >= 2:
                value = " ".join(args[1:])
                if "(" not in args[0] and re.fullmatch(r"[\dxXa-fA-FuUlL ()<|+-]+", value):
                    out.append("#define %s ..." % args[0])
            continue
        if active[-1]:
            out.append(re.sub(r"\bKILN_API\b", "", line))
    return "\n".join(l for l in out if l.strip())


def make_ffibuilder():
    cdef = "\n".join(header_cdef(open(os.path.join(INCLUDE, h)).read()) for h in HEADERS)
    ffibuilder = cffi.FFI()
    ffibuilder.cdef(cdef + GLUE_CDEF)
    sources = sorted(os.path.join(SRC, f) for f in os.listdir(SRC) if f.endswith(".c")) + CUDA_SOURCES + STRING_SOURCES
    ffibuilder.set_source(
        "kiln._ffi",
        GLUE_SOURCE,
        sources=sources,
        include_dirs=[INCLUDE],
        extra_compile_args=["-O2", "-std=gnu99", "-fvisibility=hidden", "-Wall"],
        libraries=["dl", "pthread", "m"],
    )
    return ffibuilder


def main():
    # A private build directory, so concurrent builds (parallel test sessions) never share
    # intermediate files; the result replaces the installed module atomically.
    os.makedirs(BUILD_ROOT, exist_ok=True)
    build_dir = tempfile.mkdtemp(prefix="ffi-", dir=BUILD_ROOT)
    try:
        built = make_ffibuilder().compile(tmpdir=build_dir, verbose=False)
        target = os.path.join(PACKAGE_DIR, "_ffi" + sysconfig.get_config_var("EXT_SUFFIX"))
        staged = "%s.%d.tmp" % (target, os.getpid())
        shutil.copyfile(built, staged)
        os.replace(staged, target)  # a running interpreter keeps its mapped copy
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
    print(target)


if __name__ == "__main__":
    sys.exit(main())
