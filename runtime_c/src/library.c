/* library.c — the "library" module kind: a kernel library (kiln_kernel_abi.h), loaded with dlopen
 * or linked in, whose table is validated once at load, and whose kernels are called with every
 * argument checked against its parameter description. The check is the runtime's promise that
 * generated code never sees a wrong shape, dtype or layout; it allocates nothing. A library that
 * also carries an executable blob (a compiled model) has the function "load_executable". */
#include <string.h>

#include "internal.h"

#define LOAD_EXECUTABLE "load_executable"
#define BLOB_SYMBOL "kiln_executable_blob"
#define BLOB_SIZE_SYMBOL "kiln_executable_blob_size"

typedef struct {
  kiln_module_t base;
  const kiln_library_info_t* info;
  void* handle;         /* from kiln_platform_library_open, NULL for a linked library */
  const uint8_t* blob;  /* the executable blob, NULL if none */
  uint64_t blob_size;
  char path[];          /* for messages */
} library_module_t;

typedef struct {
  kiln_function_t base;
  const kiln_kernel_info_t* kernel;
} kernel_function_t;

/* ---- validation of the library table -------------------------------------------------------- */

/* The dtypes codegen emits (kiln_kernel_abi.h): scalar ints, floats, bools, and the narrow floats
 * bfloat16, float8 and float4 (held as bits; kernels convert them). */
int kiln_dtype_supported(uint8_t code, uint8_t bits, uint16_t lanes, int allow_vector) {
  if (lanes == 0 || (lanes != 1 && !allow_vector)) return 0;
  switch (code) {
    case kDLInt:
    case kDLUInt: /* 8-64 bits; packed int4/int2 (2, 4) scalar only */
      return (bits & (bits - 1)) == 0 && bits >= (lanes == 1 ? 2 : 8) && bits <= 64;
    case kDLFloat: return bits == 16 || bits == 32 || bits == 64;
    case kDLBfloat: return bits == 16;
    case kDLBool: return bits == 8;
    /* A string tensor (docs/strings.md: opaque 128-bit records), as a graph function's
     * parameter only (allow_vector 2): no kernel, constant or allocation has this dtype. */
    case kDLOpaqueHandle: return allow_vector == 2 && bits == 128 && lanes == 1;
    /* float8 e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0fnu: consecutive codes (one compare, no
     * table); float4_e2m1fn packed like int4, scalar only */
    default:
      return (code >= kDLFloat8_e4m3fn && code <= kDLFloat8_e8m0fnu && bits == 8) ||
             (code == kDLFloat4_e2m1fn && bits == 4 && lanes == 1);
  }
}

KILN_COLD
static kiln_status_t validate_param(const char* src, int32_t k, const kiln_kernel_info_t* kernel,
                                    int32_t index) {
  const kiln_kernel_param_t* p = &kernel->params[index];
  const kiln_status_t bad = KILN_ERR_INVALID_FORMAT;
  if (!p->name)
    return kiln_error(bad, "kernel library '%s': kernel %d '%s': parameter %d has no name", src,
                      (int)k, kernel->name, (int)index);
  if (!kiln_dtype_supported(p->dtype_code, p->dtype_bits, p->dtype_lanes, 0)) {
    char dtype[KILN_SMALL_STRING];
    DLDataType dt = {p->dtype_code, p->dtype_bits, p->dtype_lanes};
    kiln_format_dtype(dtype, sizeof dtype, dt);
    return kiln_error(bad, "kernel library '%s': kernel %d '%s': parameter %d '%s' has unsupported dtype %s",
                      src, (int)k, kernel->name, (int)index, p->name, dtype);
  }
  if (p->flags & ~KILN_PARAM_WRITTEN)
    return kiln_error(bad, "kernel library '%s': kernel %d '%s': parameter %d '%s' has unknown flags 0x%x",
                      src, (int)k, kernel->name, (int)index, p->name, (unsigned)p->flags);
  if (p->ndim < 0 || p->ndim > KILN_MAX_NDIM || (p->ndim > 0 && !p->shape))
    return kiln_error(bad, "kernel library '%s': kernel %d '%s': parameter %d '%s' has ndim %d%s",
                      src, (int)k, kernel->name, (int)index, p->name, (int)p->ndim,
                      p->ndim > 0 && p->ndim <= KILN_MAX_NDIM ? " and a NULL shape" : " (out of range)");
  for (int32_t d = 0; d < p->ndim; ++d) {
    if (p->shape[d] < 0 && -1 - p->shape[d] >= (int64_t)kernel->num_sym + kernel->num_derived)
      return kiln_error(bad, "kernel library '%s': kernel %d '%s': parameter %d '%s' dimension %d refers "
                        "to symbolic dimension %lld, but the kernel has %d (and %d derived)",
                        src, (int)k, kernel->name, (int)index, p->name, (int)d,
                        (long long)(-1 - p->shape[d]), (int)kernel->num_sym, (int)kernel->num_derived);
  }
  return KILN_OK;
}

KILN_COLD
static kiln_status_t validate_kernel(const char* src, const kiln_library_info_t* info, int32_t k) {
  const kiln_kernel_info_t* kernel = &info->kernels[k];
  const kiln_status_t bad = KILN_ERR_INVALID_FORMAT;
  if (!kernel->name || !kernel->name[0])
    return kiln_error(bad, "kernel library '%s': kernel %d has no name", src, (int)k);
  if (!kernel->fn)
    return kiln_error(bad, "kernel library '%s': kernel %d '%s' has no function pointer", src, (int)k,
                      kernel->name);
  if (kernel->num_params < 0 || kernel->num_params > KILN_MAX_KERNEL_PARAMS ||
      (kernel->num_params > 0 && !kernel->params))
    return kiln_error(bad, "kernel library '%s': kernel %d '%s' has %d parameters at %s (limit %d)", src,
                      (int)k, kernel->name, (int)kernel->num_params,
                      kernel->params ? "a valid table" : "NULL", KILN_MAX_KERNEL_PARAMS);
  if (kernel->num_sym < 0 || kernel->num_sym > KILN_MAX_KERNEL_SYMS ||
      (kernel->num_sym > 0 && !kernel->sym_names))
    return kiln_error(bad, "kernel library '%s': kernel %d '%s' has %d symbolic dimensions at %s (limit %d)",
                      src, (int)k, kernel->name, (int)kernel->num_sym,
                      kernel->sym_names ? "a valid table" : "NULL", KILN_MAX_KERNEL_SYMS);
  for (int32_t s = 0; s < kernel->num_sym; ++s)
    if (!kernel->sym_names[s])
      return kiln_error(bad, "kernel library '%s': kernel %d '%s': symbolic dimension %d has no name",
                        src, (int)k, kernel->name, (int)s);
  if (kernel->num_derived < 0 || kernel->num_sym + kernel->num_derived > KILN_MAX_KERNEL_SYMS)
    return kiln_error(bad, "kernel library '%s': kernel %d '%s' has %d derived dimensions (limit %d "
                      "with the symbolic ones)", src, (int)k, kernel->name, (int)kernel->num_derived,
                      KILN_MAX_KERNEL_SYMS);
  for (int32_t p = 0; p < kernel->num_params; ++p) {
    kiln_status_t st = validate_param(src, k, kernel, p);
    if (st != KILN_OK) return st;
  }
  char why[KILN_SHAPE_STRING];
  if (kiln_derived_validate(kernel, why, sizeof why) != KILN_OK)
    return kiln_error(bad, "kernel library '%s': kernel %d '%s': %s", src, (int)k, kernel->name, why);
  for (int32_t j = 0; j < k; ++j)
    if (strcmp(info->kernels[j].name, kernel->name) == 0)
      return kiln_error(bad, "kernel library '%s': kernels %d and %d are both named '%s'", src, (int)j,
                        (int)k, kernel->name);
  return KILN_OK;
}

KILN_COLD
static kiln_status_t validate_library(const char* src, const kiln_library_info_t* info) {
  if (info->abi_version != KILN_KERNEL_ABI_VERSION)
    return kiln_error(KILN_ERR_VERSION_MISMATCH,
                      "kernel library '%s' has kernel ABI version %u, this runtime supports %u", src,
                      (unsigned)info->abi_version, (unsigned)KILN_KERNEL_ABI_VERSION);
  if (info->num_kernels < 0 || info->num_kernels > KILN_MAX_KERNELS ||
      (info->num_kernels > 0 && !info->kernels))
    return kiln_error(KILN_ERR_INVALID_FORMAT, "kernel library '%s' has %d kernels at %s (limit %d)", src,
                      (int)info->num_kernels, info->kernels ? "a valid table" : "NULL",
                      KILN_MAX_KERNELS);
  for (int32_t k = 0; k < info->num_kernels; ++k) {
    kiln_status_t st = validate_kernel(src, info, k);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

/* ---- kernel calls ---------------------------------------------------------------------------- */

static kiln_status_t shape_mismatch(const kiln_kernel_info_t* k, int32_t i, const DLTensor* t,
                                    int32_t sym, const int64_t* sym_values,
                                    const int32_t* sym_source) {
  const kiln_kernel_param_t* p = &k->params[i];
  char expected[KILN_SHAPE_STRING], got[KILN_SHAPE_STRING];
  kiln_format_param_shape(expected, sizeof expected, k, p->shape, p->ndim);
  kiln_format_shape(got, sizeof got, t->shape, t->ndim, NULL);
  if (sym >= 0 && sym_source[sym] != i) {
    int32_t from = sym_source[sym];
    return kiln_error(KILN_ERR_SHAPE_MISMATCH,
                      "%s: argument %d '%s' expected shape %s with %s = %lld (from argument %d '%s'), got %s",
                      k->name, (int)i, p->name, expected, k->sym_names[sym], (long long)sym_values[sym],
                      (int)from, k->params[from].name, got);
  }
  return kiln_error(KILN_ERR_SHAPE_MISMATCH, "%s: argument %d '%s' expected shape %s, got %s", k->name,
                    (int)i, p->name, expected, got);
}

/* Compact row-major, ignoring the strides of extent-1 dimensions (frameworks set those freely). */
static int is_compact(const DLTensor* t) {
  if (!t->strides) return 1;
  int64_t expected = 1;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] != 1 && t->strides[d] != expected) return 0;
    expected *= t->shape[d];
  }
  return 1;
}

static int is_empty(const DLTensor* t) {
  for (int32_t d = 0; d < t->ndim; ++d)
    if (t->shape[d] == 0) return 1;
  return 0;
}

/* Checks argument i against its parameter, binding symbolic dimensions on first sight. */
static kiln_status_t check_argument(const kiln_kernel_info_t* k, int32_t i, const kiln_value_t* v,
                                    int64_t* sym_values, int32_t* sym_source) {
  const kiln_kernel_param_t* p = &k->params[i];
  if (v->kind != KILN_VALUE_TENSOR || !v->u.tensor)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: argument %d '%s' expected a tensor, got %s",
                      k->name, (int)i, p->name, kiln_value_kind_name(v->kind));
  const DLTensor* t = kiln_tensor_dltensor(v->u.tensor);
  if (t->device.device_type != kDLCPU) {
    char dev[KILN_SMALL_STRING];
    kiln_format_device(dev, sizeof dev, t->device);
    return kiln_error(KILN_ERR_DEVICE_MISMATCH, "%s: argument %d '%s' expected device cpu, got %s",
                      k->name, (int)i, p->name, dev);
  }
  if (t->dtype.code != p->dtype_code || t->dtype.bits != p->dtype_bits ||
      t->dtype.lanes != p->dtype_lanes) {
    char expected[KILN_SMALL_STRING], got[KILN_SMALL_STRING];
    DLDataType want = {p->dtype_code, p->dtype_bits, p->dtype_lanes};
    kiln_format_dtype(expected, sizeof expected, want);
    kiln_format_dtype(got, sizeof got, t->dtype);
    return kiln_error(KILN_ERR_DTYPE_MISMATCH, "%s: argument %d '%s' expected dtype %s, got %s",
                      k->name, (int)i, p->name, expected, got);
  }
  if (t->ndim != p->ndim) return shape_mismatch(k, i, t, -1, sym_values, sym_source);
  for (int32_t d = 0; d < p->ndim; ++d) {
    int64_t want = p->shape[d], have = t->shape[d];
    if (want >= 0) {
      if (have != want) return shape_mismatch(k, i, t, -1, sym_values, sym_source);
      continue;
    }
    int32_t s = (int32_t)(-1 - want);
    if (s >= k->num_sym) continue; /* derived: checked once every plain one is bound */
    if (sym_source[s] < 0) {
      sym_values[s] = have;
      sym_source[s] = i;
    } else if (sym_values[s] != have) {
      return shape_mismatch(k, i, t, s, sym_values, sym_source);
    }
  }
  if (!is_compact(t) && !is_empty(t)) {
    char shape[KILN_SHAPE_STRING], strides[KILN_SHAPE_STRING];
    kiln_format_shape(shape, sizeof shape, t->shape, t->ndim, NULL);
    kiln_format_shape(strides, sizeof strides, t->strides, t->ndim, NULL);
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "%s: argument %d '%s' is not contiguous (shape %s, strides %s)", k->name,
                      (int)i, p->name, shape, strides);
  }
  if (!t->data && !is_empty(t))
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: argument %d '%s' has a NULL data pointer",
                      k->name, (int)i, p->name);
  if ((p->flags & KILN_PARAM_WRITTEN) && kiln_tensor_is_read_only(v->u.tensor))
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "%s: argument %d '%s' is written by the kernel but the tensor is read-only",
                      k->name, (int)i, p->name);
  return KILN_OK;
}

void kiln_byte_range(const DLTensor* t, uintptr_t* lo, uintptr_t* hi) {
  uint64_t n = (uint64_t)t->dtype.bits * t->dtype.lanes;
  for (int32_t d = 0; d < t->ndim; ++d) n *= (uint64_t)t->shape[d];
  *lo = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
  *hi = *lo + (uintptr_t)((n + 7) / 8);
}

/* Generated kernels treat their arguments as distinct memory (the data pointers are `noalias`),
 * so an argument the kernel writes must not overlap any other argument, or the result would be
 * silently wrong: refuse that. Read-only arguments may alias each other (add(x, x)). */
static kiln_status_t check_no_overlap(const kiln_kernel_info_t* k, DLTensor* const* tensors,
                                      int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    if (is_empty(tensors[i])) continue;
    uintptr_t lo_i, hi_i;
    kiln_byte_range(tensors[i], &lo_i, &hi_i);
    for (int32_t j = i + 1; j < n; ++j) {
      if (is_empty(tensors[j])) continue;
      if (!((k->params[i].flags | k->params[j].flags) & KILN_PARAM_WRITTEN)) continue;
      uintptr_t lo_j, hi_j;
      kiln_byte_range(tensors[j], &lo_j, &hi_j);
      if (lo_i < hi_j && lo_j < hi_i)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "%s: arguments %d '%s' and %d '%s' share memory, and the kernel writes "
                          "one of them; pass distinct buffers", k->name, (int)i, k->params[i].name, (int)j,
                          k->params[j].name);
    }
  }
  return KILN_OK;
}

kiln_status_t kiln_kernel_check_args(const kiln_kernel_info_t* k, const kiln_value_t* args,
                                     int32_t num_args, int64_t* sym_values) {
  if (num_args != k->num_params)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: expected %d argument%s, got %d", k->name,
                      (int)k->num_params, k->num_params == 1 ? "" : "s", (int)num_args);
  int32_t sym_source[KILN_MAX_KERNEL_SYMS]; /* the argument that bound it, -1 before */
  for (int32_t s = 0; s < k->num_sym; ++s) sym_source[s] = -1;
  for (int32_t i = 0; i < num_args; ++i) {
    kiln_status_t st = check_argument(k, i, &args[i], sym_values, sym_source);
    if (st != KILN_OK) return st;
  }
  if (k->num_derived == 0) return KILN_OK;
  kiln_status_t st = kiln_derived_eval(k, sym_values);
  if (st != KILN_OK) return st;
  for (int32_t i = 0; i < num_args; ++i) {
    const kiln_kernel_param_t* p = &k->params[i];
    const DLTensor* t = kiln_tensor_dltensor(args[i].u.tensor);
    for (int32_t d = 0; d < p->ndim; ++d) {
      int64_t s = -1 - p->shape[d];
      if (p->shape[d] >= 0 || s < k->num_sym || t->shape[d] == sym_values[s]) continue;
      char expr[KILN_SHAPE_STRING], expected[KILN_SHAPE_STRING], got[KILN_SHAPE_STRING];
      kiln_format_dim(expr, sizeof expr, k, p->shape[d]);
      kiln_format_param_shape(expected, sizeof expected, k, p->shape, p->ndim);
      kiln_format_shape(got, sizeof got, t->shape, t->ndim, NULL);
      return kiln_error(KILN_ERR_SHAPE_MISMATCH,
                        "%s: argument %d '%s' dimension %d expected %s = %lld, got %lld (expected "
                        "shape %s, got %s)", k->name, (int)i, p->name, (int)d, expr,
                        (long long)sym_values[s], (long long)t->shape[d], expected, got);
    }
  }
  return KILN_OK;
}

kiln_status_t kiln_kernel_call_checked(const kiln_kernel_info_t* k, const kiln_value_t* args,
                                       int32_t num_args, const kiln_kernel_ctx_t* ctx) {
  /* Bounded by the load-time limits, so no allocation per call. */
  DLTensor* tensors[KILN_MAX_KERNEL_PARAMS];
  int64_t sym_values[KILN_MAX_KERNEL_SYMS];
  kiln_status_t st = kiln_kernel_check_args(k, args, num_args, sym_values);
  if (st != KILN_OK) return st;
  for (int32_t i = 0; i < num_args; ++i) tensors[i] = kiln_tensor_dltensor(args[i].u.tensor);
  st = check_no_overlap(k, tensors, num_args);
  if (st != KILN_OK) return st;
  kiln_kernel_ctx_t runtime_pool;
  if (ctx == NULL) {
    kiln_thread_pool_kernel_ctx(&runtime_pool);
    ctx = &runtime_pool;
  }
  int32_t rc = k->fn(ctx, tensors, num_args);
  if (rc != 0)
    return kiln_error(KILN_ERR_RUNTIME, "%s: kernel returned error code %d", k->name, (int)rc);
  return KILN_OK;
}

static kiln_status_t kernel_call(kiln_function_t* function, const kiln_value_t* args,
                                 int32_t num_args, kiln_value_t* out_result) {
  (void)out_result; /* kernels return nothing: outputs are arguments */
  return kiln_kernel_call_checked(((kernel_function_t*)function)->kernel, args, num_args, NULL);
}

static void kernel_destroy(kiln_function_t* function) { kiln_mem_free(function); }

static const kiln_function_vtable_t kKernelVtable = {kernel_call, kernel_destroy};

/* ---- the module ------------------------------------------------------------------------------ */

static void library_destroy(kiln_module_t* module) {
  library_module_t* lib = (library_module_t*)module;
  if (lib->handle) kiln_platform_library_close(lib->handle);
  kiln_mem_free(lib);
}

/* load_executable(): a new VM module over the blob (validated there). */
static kiln_status_t load_executable_call(kiln_function_t* function, const kiln_value_t* args,
                                          int32_t num_args, kiln_value_t* out_result) {
  (void)args;
  library_module_t* lib = (library_module_t*)function->module;
  if (num_args != 0)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, LOAD_EXECUTABLE ": expected 0 arguments, got %d",
                      (int)num_args);
  kiln_module_t* vm = NULL;
  kiln_status_t st = kiln_vm_module_create(&lib->base, lib->info, lib->blob, lib->blob_size, &vm);
  if (st != KILN_OK) return st;
  out_result->kind = KILN_VALUE_MODULE;
  out_result->u.module = vm;
  return KILN_OK;
}

static const kiln_function_vtable_t kLoadExecutableVtable = {load_executable_call, kernel_destroy};

static int32_t library_num_functions(const kiln_module_t* module) {
  const library_module_t* lib = (const library_module_t*)module;
  return lib->info->num_kernels + (lib->blob ? 1 : 0);
}

static const char* library_function_name(const kiln_module_t* module, int32_t index) {
  const library_module_t* lib = (const library_module_t*)module;
  return index < lib->info->num_kernels ? lib->info->kernels[index].name : LOAD_EXECUTABLE;
}

static kiln_status_t library_get_function(kiln_module_t* module, const char* name,
                                          kiln_function_t** out_function) {
  library_module_t* lib = (library_module_t*)module;
  const kiln_library_info_t* info = lib->info;
  const kiln_kernel_info_t* kernel = NULL;
  for (int32_t k = 0; k < info->num_kernels && !kernel; ++k)
    if (strcmp(info->kernels[k].name, name) == 0) kernel = &info->kernels[k];
  int is_loader = !kernel && lib->blob && strcmp(name, LOAD_EXECUTABLE) == 0;
  if (!kernel && !is_loader) return KILN_ERR_NOT_FOUND;
  kernel_function_t* fn = kiln_mem_alloc(sizeof *fn);
  if (!fn) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory looking up '%s'", name);
  kiln_function_init(&fn->base, kernel ? &kKernelVtable : &kLoadExecutableVtable,
                     kernel ? kernel->name : LOAD_EXECUTABLE, module);
  fn->kernel = kernel;
  *out_function = &fn->base;
  return KILN_OK;
}

static const kiln_module_vtable_t kLibraryVtable = {
    "library", library_destroy, library_num_functions, library_function_name,
    library_get_function};

/* Validates `info` and wraps it; on success the module owns `handle`. */
static kiln_status_t make_module(const kiln_library_info_t* info, void* handle, const char* path,
                                 const uint8_t* blob, uint64_t blob_size,
                                 kiln_module_t** out_module) {
  kiln_status_t st = validate_library(path, info);
  if (st != KILN_OK) return st;
  for (int32_t k = 0; blob && k < info->num_kernels; ++k)
    if (strcmp(info->kernels[k].name, LOAD_EXECUTABLE) == 0)
      return kiln_error(KILN_ERR_INVALID_FORMAT,
                        "kernel library '%s': kernel %d is named '" LOAD_EXECUTABLE "', which is "
                        "reserved in a library with an executable", path, (int)k);
  size_t n = strlen(path) + 1;
  library_module_t* lib = kiln_mem_alloc(sizeof *lib + n);
  if (!lib) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading '%s'", path);
  memcpy(lib->path, path, n);
  kiln_module_init(&lib->base, &kLibraryVtable, lib->path);
  lib->info = info;
  lib->handle = handle;
  lib->blob = blob;
  lib->blob_size = blob_size;
  *out_module = &lib->base;
  return KILN_OK;
}

kiln_status_t kiln_module_load_library(const char* path, kiln_module_t** out_module) {
  if (!path || !out_module)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "kiln_module_load_library: path and out_module must not be NULL");
  void* handle = NULL;
  kiln_status_t st = kiln_platform_library_open(path, &handle);
  if (st != KILN_OK) return st;
  const kiln_library_info_t* info = kiln_platform_library_symbol(handle, KILN_LIBRARY_INFO_SYMBOL);
  const uint8_t* blob = kiln_platform_library_symbol(handle, BLOB_SYMBOL);
  const uint64_t* blob_size = kiln_platform_library_symbol(handle, BLOB_SIZE_SYMBOL);
  if (!info)
    st = kiln_error(KILN_ERR_INVALID_FORMAT,
                    "'%s' is not a kiln kernel library: it has no '%s' symbol", path,
                    KILN_LIBRARY_INFO_SYMBOL);
  else if (!blob != !blob_size)
    st = kiln_error(KILN_ERR_INVALID_FORMAT, "'%s' has the symbol '%s' but not '%s'", path,
                    blob ? BLOB_SYMBOL : BLOB_SIZE_SYMBOL, blob ? BLOB_SIZE_SYMBOL : BLOB_SYMBOL);
  else
    st = make_module(info, handle, path, blob, blob ? *blob_size : 0, out_module);
  if (st != KILN_OK) kiln_platform_library_close(handle);
  return st;
}

kiln_status_t kiln_module_from_static(const kiln_library_info_t* info, const uint8_t* blob,
                                      uint64_t blob_size, kiln_module_t** out_module) {
  if (!info || !out_module)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "kiln_module_from_static: info and out_module must not be NULL");
  if (!blob && blob_size != 0)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "kiln_module_from_static: blob is NULL but blob_size is %llu",
                      (unsigned long long)blob_size);
  return make_module(info, NULL, "<linked>", blob, blob_size, out_module);
}

kiln_status_t kiln_module_from_library_info(const kiln_library_info_t* info,
                                            kiln_module_t** out_module) {
  if (!info || !out_module)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "kiln_module_from_library_info: info and out_module must not be NULL");
  return make_module(info, NULL, "<linked>", NULL, 0, out_module);
}
