/* kiln_cuda_executable.c — a CUDA model's GPU code from its executable (include/kiln_cuda.h).
 *
 * `kiln.compile(mod, target="cuda")` puts the PTX of every tensor program and its launch
 * description into the executable blob, as the optional section 0x101 (CUDA) that the shared
 * runtime's loader skips (docs/executable-format.md). This file finds that section, checks every
 * byte of it (sizes, offsets, NUL-terminated strings), and only then opens the GPU, loads the PTX
 * with the driver and resolves each kernel entry: a corrupt section is reported as such on any
 * machine, a good one without a driver gets the driver's error. Part of libkiln_cuda.so, never
 * of the shared runtime. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_cuda.h"
#include "../src/ext_error.h"

#define KILN_CUDA_SECTION 0x101u
#define KILN_CUDA_SECTION_VERSION 1u
#define KILN_CUDA_MAX_ENTRY_NAME 1024u
#define KILN_EXE_HEADER_SIZE 64u
#define KILN_EXE_SECTION_ENTRY 24u

struct kiln_cuda_executable {
  kiln_cuda_module_t* module;
  int32_t num_kernels;
  char** names;       /* num_kernels entry names, each in `strings` */
  void** kernels;     /* their CUfunction handles */
  char* strings;      /* a copy of the entries and the description */
  const char* description;
};

static uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  while (n-- > 0) v = (v << 8) | p[n];
  return v;
}

/* The CUDA section of `blob`: [*start, *end). The header and the section table are checked as
 * far as finding it needs (the shared runtime's loader checks the rest of the blob). */
static kiln_status_t find_section(const uint8_t* b, size_t size, uint64_t* start, uint64_t* end) {
  uint64_t table, count, i, found = 0;
  if (size < KILN_EXE_HEADER_SIZE || memcmp(b, "KILNEXE", 8) != 0)
    return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "executable: not a Kiln executable (no KILNEXE magic "
                    "at byte 0, or shorter than the %u-byte header)", KILN_EXE_HEADER_SIZE);
  if (le(b + 16, 8) != size)
    return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "executable: blob_size %llu at byte 16, but the blob "
                    "has %zu bytes", (unsigned long long)le(b + 16, 8), size);
  count = le(b + 24, 4);
  table = le(b + 32, 8);
  if (table < KILN_EXE_HEADER_SIZE || table > size || count > (size - table) / KILN_EXE_SECTION_ENTRY)
    return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "executable: section table (%llu entries at byte "
                    "%llu) does not fit in the blob (%zu bytes)", (unsigned long long)count,
                    (unsigned long long)table, size);
  for (i = 0; i < count; ++i) {
    const uint8_t* e = b + table + i * KILN_EXE_SECTION_ENTRY;
    uint64_t off = le(e + 8, 8), len = le(e + 16, 8);
    if (le(e, 4) != KILN_CUDA_SECTION) continue;
    if (found++)
      return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "executable: section table entry %llu: a second "
                      "CUDA section", (unsigned long long)i);
    if (off > size || len > size - off)
      return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "executable: section table entry %llu: the CUDA "
                      "section [%llu, +%llu) lies outside the blob (%zu bytes)", (unsigned long long)i,
                      (unsigned long long)off, (unsigned long long)len, size);
    *start = off;
    *end = off + len;
  }
  if (!found)
    return kiln_ext_fail(KILN_ERR_NOT_FOUND, "executable: no CUDA section (0x101): the model was not "
                    "compiled for target 'cuda'");
  return KILN_OK;
}

/* Whether b[at, at + n) is one string: its last byte the only NUL. */
static int one_string(const uint8_t* b, uint64_t at, uint64_t n) {
  return n > 0 && b[at + n - 1] == 0 && memchr(b + at, 0, (size_t)(n - 1)) == NULL;
}

/* Checks the section (layout: compiler/kiln/executable/cuda_section.py) and fills `x` with a
 * copy of its entry names and description; *ptx points at the PTX inside the blob. */
static kiln_status_t read_section(const uint8_t* b, uint64_t start, uint64_t end,
                                  kiln_cuda_executable_t* x, const char** ptx) {
  uint64_t pos = start + 24, num, ptx_size, desc_size, k, names_start;
  if (end - start < 24)
    return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "CUDA section: %llu bytes, shorter than its 24-byte "
                    "header (byte %llu)", (unsigned long long)(end - start), (unsigned long long)start);
  if (le(b + start, 4) != KILN_CUDA_SECTION_VERSION)
    return kiln_ext_fail(KILN_ERR_VERSION_MISMATCH, "CUDA section: version %u, this runtime reads %u "
                    "(byte %llu)", (unsigned)le(b + start, 4), KILN_CUDA_SECTION_VERSION,
                    (unsigned long long)start);
  num = le(b + start + 4, 4);
  ptx_size = le(b + start + 8, 8);
  desc_size = le(b + start + 16, 8);
  if (num > (end - pos) / 6) /* an entry takes at least 6 bytes */
    return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "CUDA section: %llu kernel entries cannot fit in the "
                    "section (byte %llu)", (unsigned long long)num, (unsigned long long)start + 4);
  names_start = pos;
  for (k = 0; k < num; ++k) {
    uint64_t n = end - pos >= 4 ? le(b + pos, 4) : 0;
    if (n == 0 || n > KILN_CUDA_MAX_ENTRY_NAME || n + 1 > end - pos - 4)
      return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "CUDA section: kernel entry %llu: name length %llu "
                      "is 0, over %u or runs past the section end (byte %llu)",
                      (unsigned long long)k, (unsigned long long)n, KILN_CUDA_MAX_ENTRY_NAME,
                      (unsigned long long)pos);
    if (!one_string(b, pos + 4, n + 1))
      return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "CUDA section: kernel entry %llu: name is not one "
                      "NUL-terminated string (byte %llu)", (unsigned long long)k,
                      (unsigned long long)pos + 4);
    pos += 5 + n;
  }
  if (ptx_size == 0 || desc_size == 0 || ptx_size > end - pos || desc_size != end - pos - ptx_size)
    return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "CUDA section: ptx_size %llu + desc_size %llu must be "
                    "nonzero and fill the %llu bytes left of the section (byte %llu)",
                    (unsigned long long)ptx_size, (unsigned long long)desc_size,
                    (unsigned long long)(end - pos), (unsigned long long)start + 8);
  if (!one_string(b, pos, ptx_size))
    return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "CUDA section: the PTX is not one NUL-terminated "
                    "text (byte %llu)", (unsigned long long)pos);
  if (!one_string(b, pos + ptx_size, desc_size))
    return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "CUDA section: the description is not one "
                    "NUL-terminated text (byte %llu)", (unsigned long long)(pos + ptx_size));
  *ptx = (const char*)b + pos;
  /* Copies: the names (with their length words, skipped below) and the description. */
  x->strings = (char*)malloc((size_t)(pos - names_start + desc_size));
  x->names = (char**)calloc(num ? (size_t)num : 1, sizeof *x->names);
  x->kernels = (void**)calloc(num ? (size_t)num : 1, sizeof *x->kernels);
  if (!x->strings || !x->names || !x->kernels)
    return kiln_ext_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_cuda_executable_load: out of memory");
  memcpy(x->strings, b + names_start, (size_t)(pos - names_start));
  memcpy(x->strings + (pos - names_start), b + pos + ptx_size, (size_t)desc_size);
  x->description = x->strings + (pos - names_start);
  for (k = 0, pos = 0; k < num; ++k) {
    x->names[k] = x->strings + pos + 4;
    pos += 5 + strlen(x->names[k]);
  }
  x->num_kernels = (int32_t)num;
  return KILN_OK;
}

void kiln_cuda_executable_free(kiln_cuda_executable_t* x) {
  if (x == NULL) return;
  kiln_cuda_module_free(x->module);
  free(x->names);
  free(x->kernels);
  free(x->strings);
  free(x);
}

kiln_status_t kiln_cuda_executable_load(int32_t ordinal, const void* blob, size_t size,
                                        kiln_cuda_executable_t** out) {
  uint64_t start = 0, end = 0;
  const char* ptx = NULL;
  kiln_cuda_device_t* gpu = NULL;
  kiln_cuda_executable_t* x;
  kiln_status_t st;
  int32_t k;
  if (out == NULL || (blob == NULL && size > 0))
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_cuda_executable_load: NULL %s",
                    out == NULL ? "out" : "blob");
  *out = NULL;
  if ((st = find_section((const uint8_t*)blob, blob ? size : 0, &start, &end)) != KILN_OK) return st;
  x = (kiln_cuda_executable_t*)calloc(1, sizeof *x);
  if (x == NULL) return kiln_ext_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_cuda_executable_load: out of memory");
  /* Every byte is checked before the driver is touched. */
  if ((st = read_section((const uint8_t*)blob, start, end, x, &ptx)) != KILN_OK ||
      (st = kiln_cuda_device_open(ordinal, &gpu)) != KILN_OK) {
    kiln_cuda_executable_free(x);
    return st;
  }
  st = kiln_cuda_module_load(gpu, ptx, &x->module);
  kiln_cuda_device_release(gpu); /* the module holds the device */
  for (k = 0; st == KILN_OK && k < x->num_kernels; ++k)
    st = kiln_cuda_module_kernel(x->module, x->names[k], &x->kernels[k]);
  if (st != KILN_OK) {
    kiln_cuda_executable_free(x);
    return st;
  }
  *out = x;
  return KILN_OK;
}

kiln_status_t kiln_cuda_executable_open(const char* library_path, int32_t ordinal,
                                        kiln_cuda_executable_t** out) {
  void* lib;
  const void* blob;
  const uint64_t* size;
  kiln_status_t st;
  if (library_path == NULL || out == NULL)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_cuda_executable_open: NULL argument");
  *out = NULL;
  lib = dlopen(library_path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char* why = dlerror();
    return kiln_ext_fail(KILN_ERR_NOT_FOUND, "kiln_cuda_executable_open: cannot load '%s': %s",
                    library_path, why ? why : "dlopen failed");
  }
  blob = dlsym(lib, "kiln_executable_blob");
  size = (const uint64_t*)dlsym(lib, "kiln_executable_blob_size");
  if (blob == NULL || size == NULL)
    st = kiln_ext_fail(KILN_ERR_NOT_FOUND, "kiln_cuda_executable_open: '%s' has no executable blob "
                  "(kiln_executable_blob): it is not a compiled model", library_path);
  else if (*size > (uint64_t)(size_t)-1)
    st = kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "kiln_cuda_executable_open: blob size %llu",
                  (unsigned long long)*size);
  else
    st = kiln_cuda_executable_load(ordinal, blob, (size_t)*size, out);
  dlclose(lib); /* everything kept is copied or in the driver */
  return st;
}

int32_t kiln_cuda_executable_num_kernels(const kiln_cuda_executable_t* x) {
  return x ? x->num_kernels : 0;
}

const char* kiln_cuda_executable_kernel_name(const kiln_cuda_executable_t* x, int32_t index) {
  return x && index >= 0 && index < x->num_kernels ? x->names[index] : NULL;
}

void* kiln_cuda_executable_kernel(const kiln_cuda_executable_t* x, int32_t index) {
  return x && index >= 0 && index < x->num_kernels ? x->kernels[index] : NULL;
}

const char* kiln_cuda_executable_description(const kiln_cuda_executable_t* x) {
  return x ? x->description : NULL;
}
