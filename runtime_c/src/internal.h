/*
 * internal.h — declarations shared by the runtime's source files; not installed, not API.
 *
 * Build switches:
 *   KILN_SINGLE_THREADED  no pthreads: parallel loops run on the caller, no thread-locals/atomics
 *   KILN_FAULT_INJECTION  kiln_testing_fail_allocations_after() for allocation-failure tests
 */
#ifndef KILN_INTERNAL_H_
#define KILN_INTERNAL_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln_runtime.h"

/* ---- portability ---------------------------------------------------------------------------- */

#if defined(KILN_SINGLE_THREADED)
#define KILN_THREAD_LOCAL
#define KILN_ATOMIC_INC(p) (++*(p))
#define KILN_ATOMIC_DEC(p) (--*(p))
#define KILN_ATOMIC_LOAD(p) (*(p))
#define KILN_ATOMIC_CAS(p, expected, desired) \
  (*(p) == *(expected) ? (*(p) = (desired), 1) : (*(expected) = *(p), 0))
static inline void* kiln_atomic_take(void** p) {
  void* v = *p;
  *p = NULL;
  return v;
}
#else
#define KILN_THREAD_LOCAL __thread
/* Retains need no ordering; the release that drops the count to zero must see every write made
 * through other references before the object is destroyed, hence acq_rel. */
#define KILN_ATOMIC_INC(p) __atomic_add_fetch((p), 1, __ATOMIC_RELAXED)
#define KILN_ATOMIC_DEC(p) __atomic_sub_fetch((p), 1, __ATOMIC_ACQ_REL)
/* Publishing a pointer to an initialised object: CAS releases, loads acquire. */
#define KILN_ATOMIC_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define KILN_ATOMIC_CAS(p, expected, desired) \
  __atomic_compare_exchange_n((p), (expected), (desired), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
/* The pointer at `p`, leaving NULL there. */
static inline void* kiln_atomic_take(void** p) { return __atomic_exchange_n(p, NULL, __ATOMIC_ACQ_REL); }
#endif

#if defined(__GNUC__)
#define KILN_PRINTF_FORMAT(fmt_index, first_arg) \
  __attribute__((format(printf, fmt_index, first_arg)))
#else
#define KILN_PRINTF_FORMAT(fmt_index, first_arg)
#endif
/* Load-time code in a file built for speed (library.c's table validation): optimised for size
 * instead, which keeps the shared runtime inside its 64 KB (runtime_c/Makefile, "Size"). */
#if defined(__GNUC__)
#define KILN_COLD __attribute__((cold))
#else
#define KILN_COLD
#endif

/* Limits the library loader enforces; they bound the per-call stack arrays of kernel calls. */
#define KILN_MAX_KERNEL_PARAMS 256
#define KILN_MAX_KERNEL_SYMS 64
#define KILN_MAX_KERNELS 65536

/* ---- errors (error.c) and formatting (format.c) --------------------------------------------- */

/* Formats the calling thread's last-error message and returns `status`. Supports the printf
 * subset of format.c. Usage: return kiln_error(KILN_ERR_..., "%s: ...", name); */
kiln_status_t kiln_error(kiln_status_t status, const char* fmt, ...) KILN_PRINTF_FORMAT(2, 3);

/* snprintf without stdio, for the subset the runtime uses: %s %c %d %u %ld %lu %lld %llu %zu
 * %x %%. Always NUL-terminates (when cap > 0); returns the length written (truncated). */
size_t kiln_vformat(char* buf, size_t cap, const char* fmt, va_list ap);
size_t kiln_format(char* buf, size_t cap, const char* fmt, ...) KILN_PRINTF_FORMAT(3, 4);

#define KILN_SMALL_STRING 48  /* room for any dtype or device name */
#define KILN_SHAPE_STRING 256 /* shapes longer than this are truncated in messages */

/* "float32", "int8", "bool", "bfloat16", "float32x4", or "dtype(code=9, bits=8, lanes=1)". */
void kiln_format_dtype(char* buf, size_t cap, DLDataType dtype);
/* "cpu", "cuda:1", "device(type=12):0". */
void kiln_format_device(char* buf, size_t cap, DLDevice device);
/* "(8,)", "(2, 3)", "()". With sym_names, negative entries are symbolic dimension numbers
 * named by sym_names[-1 - entry] (a kernel parameter's shape); without, they print as numbers. */
void kiln_format_shape(char* buf, size_t cap, const int64_t* shape, int32_t ndim,
                       const char* const* sym_names);
/* Arguments a VM function updates in place (inplace.c): a KILN_PARAM_WRITTEN parameter's tensor
 * must not share memory with any other argument. Call after kiln_kernel_check_args. */
kiln_status_t kiln_check_written_args(const kiln_kernel_info_t* k, const kiln_value_t* args,
                                      int32_t num_args);
/* The byte range [*lo, *hi) a compact tensor's elements occupy, sub-byte ones packed
 * (library.c; the overlap checks of kernel and in-place arguments). */
void kiln_byte_range(const DLTensor* t, uintptr_t* lo, uintptr_t* hi);

/* ---- derived dimensions (derived.c) --------------------------------------------------------- */

/* Checks k's derived-dimension table (ops, flags, operand references, limits) and that every
 * plain symbolic dimension is bound by some parameter; on failure writes why into msg. */
kiln_status_t kiln_derived_validate(const kiln_kernel_info_t* k, char* msg, size_t cap);
/* Computes sym_values[num_sym ..] from the bound ones; an overflow or a division by zero is a
 * KILN_ERR_SHAPE_MISMATCH naming the dimension. */
kiln_status_t kiln_derived_eval(const kiln_kernel_info_t* k, int64_t* sym_values);
/* One shape entry of k's parameters: "8", "n", "past + n". Returns the length written. */
size_t kiln_format_dim(char* buf, size_t cap, const kiln_kernel_info_t* k, int64_t entry);
/* A parameter shape of k: "(past + n, 64)". */
void kiln_format_param_shape(char* buf, size_t cap, const kiln_kernel_info_t* k,
                             const int64_t* shape, int32_t ndim);

/* "null", "int", "float", "string", "tensor", "module", "function", "tuple", "device",
 * "unknown kind". */
const char* kiln_value_kind_name(int32_t kind);

/* ---- memory (memory.c) ---------------------------------------------------------------------- */

/* KILN_ALIGNMENT-aligned allocation; NULL on failure, without setting an error (callers report
 * what they were doing). Every runtime allocation goes through here so allocation-failure
 * injection reaches all of them. */
void* kiln_mem_alloc(size_t nbytes);
void* kiln_mem_calloc(size_t nbytes);
void kiln_mem_free(void* ptr);
char* kiln_mem_strdup(const char* str);

/* ---- tensors (tensor.c) --------------------------------------------------------------------- */

#define KILN_TENSOR_FLAG_READ_ONLY 1u
#define KILN_TENSOR_FLAG_EMBEDDED 2u /* lives in memory it does not own; see below */

/* kiln_tensor_wrap with flags (KILN_TENSOR_FLAG_*). */
kiln_status_t kiln_tensor_wrap_with_flags(const DLTensor* dl, kiln_deleter_fn deleter,
                                          void* deleter_ctx, uint32_t flags,
                                          kiln_tensor_t** out_tensor);

/* A tensor built in caller-provided memory (the VM's per-call frame), so that making one costs
 * no allocation. `storage` is kiln_tensor_embedded_size(ndim) bytes, 8-byte aligned; shape is
 * copied and must be valid (non-negative; the caller checked the size); the device is cpu. The
 * tensor starts with one reference; when the last is released it calls deleter(deleter_ctx)
 * (not NULL) and frees nothing itself: the deleter owns `storage`. */
size_t kiln_tensor_embedded_size(int32_t ndim);
kiln_tensor_t* kiln_tensor_init_embedded(void* storage, const int64_t* shape, int32_t ndim,
                                         DLDataType dtype, void* data, kiln_deleter_fn deleter,
                                         void* deleter_ctx);

/* ---- values (value.c) ----------------------------------------------------------------------- */

/* A tuple of `size` null items (size >= 0) for the caller to fill through kiln_tuple_items with
 * owned values; NULL when out of memory (no message set). */
kiln_tuple_t* kiln_tuple_alloc(int32_t size);
kiln_value_t* kiln_tuple_items(kiln_tuple_t* tuple);
/* A tuple of `size` items in `storage` (kiln_tuple_embedded_size(size) bytes, 8-byte aligned),
 * for a caller's arena: it holds no references (its items are borrowed: plain copies) and
 * retaining or releasing it does nothing that matters (its count never drops to zero). */
size_t kiln_tuple_embedded_size(int32_t size);
kiln_tuple_t* kiln_tuple_init_borrowed(void* storage, int32_t size);

/* ---- modules and functions (module.c) ------------------------------------------------------- */

/* A module kind is a vtable. New kinds (the bytecode VM, ...) embed kiln_module_t as their
 * first member, fill a static vtable and call kiln_module_init. */
typedef struct kiln_module_vtable_t {
  const char* kind;
  /* Frees the module and everything it owns. Called once, when the last reference goes. */
  void (*destroy)(kiln_module_t* module);
  int32_t (*num_functions)(const kiln_module_t* module);
  const char* (*function_name)(const kiln_module_t* module, int32_t index);
  /* Returns KILN_ERR_NOT_FOUND without a message when there is no such function (the generic
   * layer writes one listing the names); other errors set their own message. */
  kiln_status_t (*get_function)(kiln_module_t* module, const char* name,
                                kiln_function_t** out_function);
} kiln_module_vtable_t;

struct kiln_module_t {
  const kiln_module_vtable_t* vtable;
  int32_t refcount;
  const char* name; /* for messages, e.g. the library path; owned by the implementation */
};

void kiln_module_init(kiln_module_t* module, const kiln_module_vtable_t* vtable,
                      const char* name);

typedef struct kiln_function_vtable_t {
  /* Same contract as kiln_function_call; out_result is never NULL and starts as null. */
  kiln_status_t (*call)(kiln_function_t* function, const kiln_value_t* args, int32_t num_args,
                        kiln_value_t* out_result);
  /* Frees the function's own memory; the generic layer then releases function->module. */
  void (*destroy)(kiln_function_t* function);
} kiln_function_vtable_t;

struct kiln_function_t {
  const kiln_function_vtable_t* vtable;
  int32_t refcount;
  const char* name;       /* owned by the implementation (or by its module) */
  kiln_module_t* module;  /* one reference, so the module outlives the function; may be NULL */
};

/* Sets refcount to 1 and takes a reference to `module` (may be NULL). */
void kiln_function_init(kiln_function_t* function, const kiln_function_vtable_t* vtable,
                        const char* name, kiln_module_t* module);

/* ---- kernel libraries (library.c) ---------------------------------------------------------- */

/* The dtypes codegen emits and the loaders accept: int/uint 8-64, float 16-64, bfloat16, float8,
 * float4, bool (8 bits); `lanes` must be 1 unless allow_vector. allow_vector 2 (a graph
 * function's parameter) also accepts the string dtype (opaque handle, 128 bits, 1 lane). */
int kiln_dtype_supported(uint8_t code, uint8_t bits, uint16_t lanes, int allow_vector);

/* Checks `args` against the parameters of `k` exactly as a kernel call does (count, kind,
 * device, dtype, shape, contiguity, data), binding its symbolic dimensions into sym_values
 * (k->num_sym entries). Messages are prefixed with k->name. k->fn is not used. */
kiln_status_t kiln_kernel_check_args(const kiln_kernel_info_t* k, const kiln_value_t* args,
                                     int32_t num_args, int64_t* sym_values);

/* A checked kernel call (what calling a kernel function does). `ctx`: the thread pool the kernel
 * gets (a VM's own), NULL for the runtime's pool. */
kiln_status_t kiln_kernel_call_checked(const kiln_kernel_info_t* k, const kiln_value_t* args,
                                       int32_t num_args, const kiln_kernel_ctx_t* ctx);

/* ---- the VM (vm_loader.c, vm.c) ------------------------------------------------------------- */

/* Validates `blob` against `info` and makes a VM module over it; the module keeps a reference to
 * `library` (which must keep info and blob alive). The implementation of load_executable. */
kiln_status_t kiln_vm_module_create(kiln_module_t* library, const kiln_library_info_t* info,
                                    const uint8_t* blob, uint64_t blob_size,
                                    kiln_module_t** out_module);

/* ---- thread pool (thread_pool.c) ------------------------------------------------------------ */

/* Fills the context a kernel call passes to the kernel. Cheap: starts no thread. */
void kiln_thread_pool_kernel_ctx(kiln_kernel_ctx_t* out_ctx);

/* Bracket a VM call: while one is in flight anywhere in the process, idle workers spin longer
 * before they block (the next parallel loop of the call is near), see KILN_SPIN_IN_CALL_NS. */
void kiln_thread_pool_call_begin(void);
void kiln_thread_pool_call_end(void);

/* How many workers are blocked (or about to block) for work, and how many times one stopped
 * blocking: what the thread pool's tests observe instead of timing the workers. */
void kiln_thread_pool_wait_counts(int32_t* out_sleepers, int64_t* out_wakeups);

/* ---- platform (platform.c): everything that touches the OS besides threads ------------------ */

/* dlopen(path) with RTLD_NOW | RTLD_LOCAL; a path without '/' is made relative to the working
 * directory. Sets a KILN_ERR_IO error naming the path and the loader's reason. */
kiln_status_t kiln_platform_library_open(const char* path, void** out_handle);
/* Refuses a library whose ELF headers or segments lie outside the file (a truncated file would
 * otherwise crash dlopen with SIGBUS). A file it cannot open is left for dlopen to report. */
kiln_status_t kiln_platform_elf_check(const char* path);
void* kiln_platform_library_symbol(void* handle, const char* name);
void kiln_platform_library_close(void* handle);

void* kiln_platform_aligned_alloc(size_t alignment, size_t nbytes);
void kiln_platform_aligned_free(void* ptr);

/* Number of online cores, at least 1. */
int32_t kiln_platform_num_cores(void);

/* A monotonic clock in nanoseconds (for profiling). */
uint64_t kiln_platform_now_ns(void);

#endif /* KILN_INTERNAL_H_ */
