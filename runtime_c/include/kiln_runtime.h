/*
 * kiln_runtime.h — the public C API of the Kiln runtime.
 *
 * Object model: a *module* holds named *functions*; calling a function takes and returns
 * *values* (null, int, float, string, tensor, module, function, tuple, device). Tensors are
 * DLPack DLTensors, so they cross into and out of numpy, PyTorch and others without copies.
 * Every binding (Python, C++, Java) goes through kiln_function_call. A compiled model is a
 * library module whose function "load_executable" returns a VM module (see "Executables").
 *
 * Conventions
 *   - Every fallible call returns kiln_status_t: KILN_OK (0) or an error code, and on error sets
 *     a message for the calling thread, read with kiln_last_error().
 *   - Outputs are trailing out_* parameters, written on success only.
 *   - Tensors, tuples, modules and functions are reference counted. A function that returns one through
 *     an out_* parameter hands the caller one reference, which the caller gives back with
 *     *_release. Pointer parameters are borrowed for the duration of the call unless stated.
 *   - Thread safety: every function may be called from any thread. Objects may be shared between
 *     threads; retain/release are atomic. Tensor *contents* are not synchronised: two calls that
 *     write the same tensor at once race, as they would on any array. In detail:
 *
 * Thread safety
 *   May be shared by any number of threads at once, with no lock of the caller's:
 *   - a library module (kiln_module_load_library, _from_library_info, _from_static): looking up
 *     its functions, calling its kernels, calling load_executable (each call makes a new,
 *     independent VM);
 *   - a VM module once init has returned: calling its graph functions and profile, through one
 *     shared kiln_function_t or through each thread's own lookup. Each call has its own
 *     registers and arena; calls never wait for each other except for the thread pool (one
 *     parallel loop at a time; see "Thread pool"). init may run again while calls run;
 *   - a function object (kiln_function_t) of any kind: called from several threads at once;
 *   - tensors passed as inputs: read by several calls at once;
 *   - reference counts: retain and release of any object from any thread. The last release
 *     frees the object on the thread that makes it, so a thread that uses an object must hold a
 *     reference of its own for as long as it does (as with any reference-counted API);
 *   - the external-function registry (kiln_register_function, ...): internally locked;
 *   - kiln_last_error(): one message per thread.
 *   Must be ordered by the caller:
 *   - the contents of a tensor that a call writes (an output, or an argument a kernel writes in
 *     destination-passing style) while another thread reads or writes it;
 *   - dropping the last reference to an object while another thread still uses it;
 *   - kiln_set_num_threads from inside a parallel task (refused; from elsewhere it waits for
 *     the running loop).
 *   Bindings: the Python objects may be shared the same way (calls release the GIL). In Java,
 *   Function.call(...) may be used from several threads at once, but pushArg/invoke keep an
 *   argument list in the Function object: share it only through call(...), or give each thread
 *   its own (getFunction returns a new Function each time); close() must not race with a use.
 *   Tested by tests/reliability: 8 threads x 1,000 calls on one shared library, VM and function
 *   from C under ThreadSanitizer, from Python threads and from Java threads.
 */
#ifndef KILN_RUNTIME_H_
#define KILN_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#include "dlpack.h"
#include "kiln_kernel_abi.h"

/* The Kiln release this runtime belongs to (kiln.__version__; a test keeps the two equal). It is
 * named in the error for an artifact of a newer format, beside the Kiln that wrote the artifact. */
#define KILN_VERSION "0.1.0"

/* Marks the exported API; the runtime is built with -fvisibility=hidden. */
#if defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Status and errors
 * ------------------------------------------------------------------------------------------- */

/* A status code. Codes are grouped by their high nibble so callers can branch on the kind of
 * failure: 0x0_ runtime, 0x1_ bad argument, 0x2_ lookup, 0x3_ loading, 0x4_ resources. */
typedef int32_t kiln_status_t;

enum {
  KILN_OK = 0,
  KILN_ERR_INTERNAL = 0x01,          /* a bug in the runtime */
  KILN_ERR_RUNTIME = 0x02,           /* a kernel or function reported failure while running */
  KILN_ERR_INVALID_ARGUMENT = 0x10,  /* NULL pointer, wrong count or kind, not contiguous, ... */
  KILN_ERR_SHAPE_MISMATCH = 0x11,    /* wrong ndim or extent, inconsistent symbolic dimension */
  KILN_ERR_DTYPE_MISMATCH = 0x12,
  KILN_ERR_DEVICE_MISMATCH = 0x13,
  KILN_ERR_UNSUPPORTED = 0x14,       /* a well-formed request this runtime cannot serve */
  KILN_ERR_INVALID_STATE = 0x15,     /* a call out of order, e.g. a VM function before init */
  KILN_ERR_NOT_FOUND = 0x20,         /* no function, kernel or registered function of that name */
  KILN_ERR_IO = 0x30,                /* file missing or unreadable, dynamic loading failed */
  KILN_ERR_INVALID_FORMAT = 0x31,    /* a loaded library or file is malformed */
  KILN_ERR_VERSION_MISMATCH = 0x32,  /* built for another ABI or format version */
  KILN_ERR_OUT_OF_MEMORY = 0x40
};

/* The message of the last failed call on the calling thread, e.g.
 * "main: argument 1 'B' expected shape (8,), got (9,)". Never NULL ("" before any error).
 * Successful calls leave it unchanged. The string is owned by the runtime and valid until the
 * next failing call on the same thread. */
KILN_API const char* kiln_last_error(void);

/* Sets the calling thread's last-error message and returns `status` unchanged. For code outside
 * the runtime that implements functions (callbacks, bindings) and reports errors through it.
 * `message` is copied (truncated to 1023 bytes); NULL means "". */
KILN_API kiln_status_t kiln_set_last_error(kiln_status_t status, const char* message);

/* A short static name for a status code, e.g. "shape mismatch"; "unknown status" if unknown. */
KILN_API const char* kiln_status_string(kiln_status_t status);

/* ---------------------------------------------------------------------------------------------
 * Memory
 * ------------------------------------------------------------------------------------------- */

#define KILN_ALIGNMENT 64  /* bytes; every runtime allocation, and every tensor's data */

/* Allocates `nbytes` (0 allowed) aligned to KILN_ALIGNMENT. *out_ptr is owned by the caller and
 * freed with kiln_memory_free. Errors: KILN_ERR_INVALID_ARGUMENT (NULL out_ptr),
 * KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_memory_alloc(size_t nbytes, void** out_ptr);

/* Frees memory from kiln_memory_alloc. NULL is ignored. */
KILN_API void kiln_memory_free(void* ptr);

/* ---------------------------------------------------------------------------------------------
 * Tensors
 * ------------------------------------------------------------------------------------------- */

#define KILN_MAX_NDIM 64

/* A reference-counted tensor: a DLTensor plus ownership of (or a reference to) its memory. */
typedef struct kiln_tensor_t kiln_tensor_t;

/* Called once when the last reference to a wrapping tensor is released. */
typedef void (*kiln_deleter_fn)(void* ctx);

/* Creates a tensor of the given shape and dtype with uninitialised, KILN_ALIGNMENT-aligned
 * memory owned by the tensor. shape: `ndim` entries >= 0 (borrowed; copied). Only CPU
 * devices are supported. Strides are stored explicitly (compact row-major).
 * Errors: KILN_ERR_INVALID_ARGUMENT (NULL out, ndim outside [0, KILN_MAX_NDIM], negative extent,
 * bits or lanes zero, size overflow), KILN_ERR_UNSUPPORTED (non-CPU device),
 * KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_tensor_create(const int64_t* shape, int32_t ndim, DLDataType dtype,
                                          DLDevice device, kiln_tensor_t** out_tensor);

/* Wraps memory owned by someone else, without copying. `dl` is borrowed: its shape and strides
 * are copied (strides NULL means compact), its data pointer is referenced. When the last
 * reference is released, deleter(deleter_ctx) is called (if deleter is not NULL) so the owner
 * can free the memory. On failure the deleter is NOT called; ownership stays with the caller.
 * Errors: KILN_ERR_INVALID_ARGUMENT (NULL dl or out, bad ndim/extent/dtype, NULL data with a
 * non-empty shape), KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_tensor_wrap(const DLTensor* dl, kiln_deleter_fn deleter,
                                        void* deleter_ctx, kiln_tensor_t** out_tensor);

/* Adds / drops one reference. Releasing the last frees the tensor (or calls its deleter).
 * NULL is ignored. */
KILN_API void kiln_tensor_retain(kiln_tensor_t* tensor);
KILN_API void kiln_tensor_release(kiln_tensor_t* tensor);

/* The tensor's DLTensor, owned by the tensor and valid while the caller holds a reference.
 * Read its fields and read/write the data it points to; do not change its fields. strides is
 * never NULL. NULL for a NULL tensor. */
KILN_API DLTensor* kiln_tensor_dltensor(kiln_tensor_t* tensor);

/* Number of bytes of the tensor's data (0 for NULL). */
KILN_API size_t kiln_tensor_nbytes(const kiln_tensor_t* tensor);

/* Non-zero when the memory must not be written (imported with DLPACK_FLAG_BITMASK_READ_ONLY, or
 * a constant of an executable, a view into its blob). 0 for NULL. */
KILN_API int32_t kiln_tensor_is_read_only(const kiln_tensor_t* tensor);

/* Imports a DLPack managed tensor without copying. On success the tensor takes ownership of
 * `managed` and calls its deleter when the last reference is released; on failure ownership
 * stays with the caller (who must call managed->deleter). A read-only flag is kept (see
 * kiln_tensor_is_read_only). Errors: KILN_ERR_INVALID_ARGUMENT (NULL, invalid DLTensor),
 * KILN_ERR_VERSION_MISMATCH (major version != DLPACK_MAJOR_VERSION), KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_tensor_from_dlpack(DLManagedTensorVersioned* managed,
                                               kiln_tensor_t** out_tensor);
KILN_API kiln_status_t kiln_tensor_from_dlpack_legacy(DLManagedTensor* managed,
                                                      kiln_tensor_t** out_tensor);

/* Exports the tensor for another framework without copying. *out_managed holds one reference
 * to the tensor and is owned by the caller (the consumer), who calls (*out_managed)->deleter
 * exactly once. Its DLTensor shares the tensor's shape, strides and data. Errors:
 * KILN_ERR_INVALID_ARGUMENT (NULL), KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_tensor_to_dlpack(kiln_tensor_t* tensor,
                                             DLManagedTensorVersioned** out_managed);
KILN_API kiln_status_t kiln_tensor_to_dlpack_legacy(kiln_tensor_t* tensor,
                                                    DLManagedTensor** out_managed);

/* ---------------------------------------------------------------------------------------------
 * Modules, functions, values
 * ------------------------------------------------------------------------------------------- */

typedef struct kiln_module_t kiln_module_t;
typedef struct kiln_function_t kiln_function_t;
typedef struct kiln_tuple_t kiln_tuple_t;

typedef enum {
  KILN_VALUE_NULL = 0,
  KILN_VALUE_INT = 1,       /* u.i */
  KILN_VALUE_FLOAT = 2,     /* u.f */
  KILN_VALUE_STRING = 3,    /* u.s, NUL-terminated UTF-8 */
  KILN_VALUE_TENSOR = 4,    /* u.tensor */
  KILN_VALUE_MODULE = 5,    /* u.module */
  KILN_VALUE_FUNCTION = 6,  /* u.function */
  KILN_VALUE_TUPLE = 7,     /* u.tuple: an immutable, reference-counted sequence of values */
  KILN_VALUE_DEVICE = 8     /* u.device: a DLDevice (plain data, nothing to release) */
} kiln_value_kind_t;

/* One value. Whether it owns its payload depends on where it is:
 *   - arguments passed to kiln_function_call are borrowed: the callee neither releases them nor
 *     keeps them past the call without retaining (tensors, tuples, modules, functions) or
 *     copying (strings);
 *   - a value the runtime writes to an out_* parameter is owned by the caller: it holds one
 *     reference to its tensor/tuple/module/function, or a string allocated by the runtime, and
 *     the caller frees it with kiln_value_release. */
typedef struct kiln_value_t {
  int32_t kind;  /* a kiln_value_kind_t */
  union {
    int64_t i;
    double f;
    const char* s;
    kiln_tensor_t* tensor;
    kiln_module_t* module;
    kiln_function_t* function;
    kiln_tuple_t* tuple;
    DLDevice device;
  } u;
} kiln_value_t;

/* Releases what an owned value holds (reference or string) and sets it to KILN_VALUE_NULL.
 * NULL and null values are ignored. Never call it on borrowed values. */
KILN_API void kiln_value_release(kiln_value_t* value);

/* Makes *out_value an owned copy of `value` (borrowed): retains its object or duplicates its
 * string. Errors: KILN_ERR_INVALID_ARGUMENT (NULL, unknown kind), KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_value_copy(const kiln_value_t* value, kiln_value_t* out_value);

/* Makes *out_value an owned string value holding a copy of `str` (borrowed).
 * Errors: KILN_ERR_INVALID_ARGUMENT (NULL), KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_value_from_string(const char* str, kiln_value_t* out_value);

/* Makes a tuple holding owned copies of `items` (num_items values, borrowed; may be NULL when
 * num_items is 0): objects are retained, strings duplicated. *out_tuple is one reference owned
 * by the caller. Errors: KILN_ERR_INVALID_ARGUMENT (NULL, negative count, unknown kind),
 * KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_tuple_create(const kiln_value_t* items, int32_t num_items,
                                         kiln_tuple_t** out_tuple);

/* Adds / drops one reference; releasing the last releases the items. NULL is ignored. */
KILN_API void kiln_tuple_retain(kiln_tuple_t* tuple);
KILN_API void kiln_tuple_release(kiln_tuple_t* tuple);

/* The number of items (0 for NULL). */
KILN_API int32_t kiln_tuple_size(const kiln_tuple_t* tuple);

/* Makes *out_value an owned copy of item `index` (as kiln_value_copy). Errors:
 * KILN_ERR_INVALID_ARGUMENT (NULL, index out of range), KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_tuple_get_item(const kiln_tuple_t* tuple, int32_t index,
                                           kiln_value_t* out_value);

/* Loads a kernel library (a shared object built by Kiln's codegen) and exposes each of its
 * kernels as a function. When the library also exports an executable blob (the data symbols
 * kiln_executable_blob and kiln_executable_blob_size, docs/executable-format.md), the module
 * has one more function, "load_executable" (see "Executables" below). `path` is a file path (one without '/' is taken relative to the
 * working directory, not searched for). The library table is validated before use (ABI
 * version, counts, pointers, dtypes, ndim, symbolic dimension numbers, duplicate names); the
 * loader's limits are 65536 kernels, 256 parameters and 64 symbolic dimensions per kernel, and
 * KILN_MAX_NDIM dimensions per parameter. Kernels receive the caller's DLTensors unchanged: their
 * data is at data + byte_offset, and its alignment is whatever the caller's memory has (tensors
 * the runtime allocates are KILN_ALIGNMENT-aligned; wrapped numpy memory usually 16 bytes).
 * The library stays loaded while the module or any of its functions is alive.
 * Errors: KILN_ERR_INVALID_ARGUMENT (NULL), KILN_ERR_IO (cannot load the file),
 * KILN_ERR_INVALID_FORMAT (not an ELF file, truncated, no kiln_library_info symbol, malformed table, only one of the two
 * blob symbols, a kernel named "load_executable" next to a blob),
 * KILN_ERR_VERSION_MISMATCH (other kernel ABI version), KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_module_load_library(const char* path, kiln_module_t** out_module);

/* Makes a module over a kernel library that is linked into the program (no dlopen). `info` is
 * borrowed for the module's whole lifetime (it is normally a static table). Validated like
 * kiln_module_load_library. Errors: as kiln_module_load_library, minus KILN_ERR_IO. */
KILN_API kiln_status_t kiln_module_from_library_info(const kiln_library_info_t* info,
                                                     kiln_module_t** out_module);

/* kiln_module_from_library_info plus an executable blob linked into the program (a model
 * exported for static linking): the module then has "load_executable" as if loaded from a file.
 * Executable.export_static(dir, name) writes <name>.a and <name>.h, whose
 * kiln_model_<name>_create(&mod) makes this call with the model's own (prefixed) symbols
 * kiln_model_<name>_library_info, kiln_model_<name>_blob and kiln_model_<name>_blob_size.
 * `info` and `blob` (blob_size bytes, KILN_ALIGNMENT-aligned) are borrowed for the module's
 * whole lifetime and for every VM and tensor made from it (constants are views into the blob).
 * blob NULL with blob_size 0 means no executable. The blob is validated by load_executable.
 * Errors: as kiln_module_from_library_info; KILN_ERR_INVALID_ARGUMENT (NULL blob, non-zero
 * size). */
KILN_API kiln_status_t kiln_module_from_static(const kiln_library_info_t* info,
                                               const uint8_t* blob, uint64_t blob_size,
                                               kiln_module_t** out_module);

/* Adds / drops one reference. NULL is ignored. */
KILN_API void kiln_module_retain(kiln_module_t* module);
KILN_API void kiln_module_release(kiln_module_t* module);

/* What kind of module this is: "library" or "vm" ("" for NULL). Static string. */
KILN_API const char* kiln_module_kind(const kiln_module_t* module);

/* The number of functions (0 for NULL) and the name of function `index` (owned by the module,
 * valid while it is alive; NULL when the module is NULL or index is out of range), for listing. */
KILN_API int32_t kiln_module_num_functions(const kiln_module_t* module);
KILN_API const char* kiln_module_function_name(const kiln_module_t* module, int32_t index);

/* Looks up a function by name. *out_function is a new reference; it keeps the module alive.
 * Look up once and call many times: lookup may allocate, calling a kernel function does not.
 * Errors: KILN_ERR_INVALID_ARGUMENT (NULL), KILN_ERR_NOT_FOUND (message lists the names
 * available), KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_module_get_function(kiln_module_t* module, const char* name,
                                                kiln_function_t** out_function);

/* Signature of a function implemented outside the runtime (see kiln_function_create). Same
 * contract as kiln_function_call: args borrowed, *out_result written on success with an owned
 * value (it starts as KILN_VALUE_NULL), errors reported with kiln_set_last_error. */
typedef kiln_status_t (*kiln_callback_fn)(void* ctx, const kiln_value_t* args, int32_t num_args,
                                          kiln_value_t* out_result);

/* Makes a function that calls `callback(ctx, ...)`. `name` is copied. When the last reference is
 * released, ctx_deleter(ctx) is called if not NULL; on failure it is not called.
 * Errors: KILN_ERR_INVALID_ARGUMENT (NULL name or callback), KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_function_create(const char* name, kiln_callback_fn callback,
                                            void* ctx, kiln_deleter_fn ctx_deleter,
                                            kiln_function_t** out_function);

/* Adds / drops one reference. NULL is ignored. */
KILN_API void kiln_function_retain(kiln_function_t* function);
KILN_API void kiln_function_release(kiln_function_t* function);

/* The function's name, owned by the function ("" for NULL). */
KILN_API const char* kiln_function_name(const kiln_function_t* function);

/* Calls a function. `args` (num_args values, borrowed; may be NULL when num_args is 0). On
 * success *out_result (if out_result is not NULL) receives an owned value, KILN_VALUE_NULL for
 * functions that return nothing (kernels write their outputs into argument tensors); with
 * out_result NULL the result is released. On failure *out_result is not touched. NULL function,
 * negative num_args or NULL args with num_args > 0: KILN_ERR_INVALID_ARGUMENT. A kernel
 * function checks every argument against the kernel's parameter table before running and
 * fails with a message naming the kernel, the argument index and name, expected and given:
 *   "main: expected 2 arguments, got 1"                           KILN_ERR_INVALID_ARGUMENT
 *   "main: argument 0 'A' expected a tensor, got int"             KILN_ERR_INVALID_ARGUMENT
 *   "main: argument 0 'A' is not contiguous"                      KILN_ERR_INVALID_ARGUMENT
 *   "main: argument 0 'A' expected dtype float32, got int32"      KILN_ERR_DTYPE_MISMATCH
 *   "main: argument 1 'B' expected shape (8,), got (9,)"          KILN_ERR_SHAPE_MISMATCH
 *   "main: argument 0 'A' expected device cpu, got cuda:0"        KILN_ERR_DEVICE_MISMATCH
 *   "main: kernel returned error code 3"                          KILN_ERR_RUNTIME
 * Kernel functions run their parallel loops on the runtime's thread pool. Thread safety: a
 * function may be called from several threads at once. */
KILN_API kiln_status_t kiln_function_call(kiln_function_t* function, const kiln_value_t* args,
                                          int32_t num_args, kiln_value_t* out_result);

/* ---------------------------------------------------------------------------------------------
 * External functions
 *
 * A process-wide registry of named functions that executables call (call_dps_packed, e.g.
 * "env.relu"): a VM's init looks up every external function its executable names. The
 * registry is the runtime's only mutable global besides the thread pool; it is thread-safe.
 * ------------------------------------------------------------------------------------------- */

/* Registers `function` (borrowed; the registry takes its own reference) under `name` (copied).
 * With `override` non-zero an existing entry is replaced (and released); otherwise a name that
 * is taken is an error. VMs initialised before keep the function they looked up.
 * Errors: KILN_ERR_INVALID_ARGUMENT (NULL or empty name, NULL function, name taken without
 * override), KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_register_function(const char* name, kiln_function_t* function,
                                              int32_t override);

/* Looks up a registered function; *out_function is a new reference owned by the caller.
 * Errors: KILN_ERR_INVALID_ARGUMENT (NULL), KILN_ERR_NOT_FOUND. */
KILN_API kiln_status_t kiln_get_registered_function(const char* name,
                                                    kiln_function_t** out_function);

/* Removes a registered function and drops the registry's reference.
 * Errors: KILN_ERR_INVALID_ARGUMENT (NULL), KILN_ERR_NOT_FOUND. */
KILN_API kiln_status_t kiln_unregister_function(const char* name);

/* ---------------------------------------------------------------------------------------------
 * Executables (docs/executable-format.md)
 *
 * A library module with a blob has the function
 *   load_executable()   validates the whole blob (every offset, count, index and instruction)
 *                       and resolves its kernels in the library; returns a new VM module (a
 *                       value of kind module, owned by the caller). It keeps the library alive.
 *                       Errors name what and where, e.g. "executable: section 4 (CONSTANTS)
 *                       entry 3: data_offset 0x1240 + nbytes 400 exceeds blob size 4096";
 *                       KILN_ERR_INVALID_FORMAT, KILN_ERR_VERSION_MISMATCH (a newer format),
 *                       KILN_ERR_NOT_FOUND (a kernel the library lacks).
 * A VM module (kind "vm") has the functions
 *   init(device)        device: a device value (only cpu), or no argument for cpu. Looks up
 *                       the executable's external functions in the registry (KILN_ERR_NOT_FOUND
 *                       "init: external function 'env.relu' is not registered"). May be called
 *                       again (it looks the functions up again).
 *   <graph function>    one per graph function ("forward", ...): checks its arguments like a
 *                       kernel call ("forward: argument 0 'x' expected shape (1, 784), got
 *                       (1, 785)"), runs the bytecode, returns a tensor or tuple owned by the
 *                       caller. KILN_ERR_INVALID_STATE before init.
 *   profile(name, ...)  runs graph function `name` on the remaining arguments and returns a
 *                       tuple of rows (name: string, kind: string, calls: int, total_us: float),
 *                       kind "kernel", "extern", "vm" (other instructions, by opcode) or "total".
 * Graph functions may be called from several threads at once after init: each call has its own
 * registers and arena (one allocation per call).
 * ------------------------------------------------------------------------------------------- */

/* ---------------------------------------------------------------------------------------------
 * Thread pool
 *
 * A kernel's parallel loop runs on the calling thread plus kiln_get_num_threads() - 1 worker
 * threads of one process-wide pool. One loop at a time uses the pool (concurrent callers
 * queue); a loop launched from inside a task runs serially on that task's thread. After a loop,
 * idle workers spin for up to 50 us, so that the next loop of the same inference starts without
 * a wake-up, then block: an idle process uses no CPU. A VM call wakes blocked workers as it
 * begins, and they spin up to 2 ms between its loops. They do not spin at all when the pool has
 * more threads than the machine has cores.
 * ------------------------------------------------------------------------------------------- */

/* Sets how many threads (the caller included) run a kernel's parallel loops; 0 restores the
 * default, the number of online cores. Waits for a running parallel loop to finish; idle worker
 * threads are stopped and new ones start at the next parallel loop. Errors:
 * KILN_ERR_INVALID_ARGUMENT (negative, or called from inside a parallel task). */
KILN_API kiln_status_t kiln_set_num_threads(int32_t num_threads);

/* The number of threads parallel loops use (>= 1). */
KILN_API int32_t kiln_get_num_threads(void);

/* A host application's thread pool, for a VM's kernels to run their parallel loops on instead of
 * the runtime's pool (kiln_vm_set_thread_pool). parallel_launch(pool, fn, closure, num_tasks)
 * must run fn(t, num_tasks, closure) for every t in [0, num_tasks), possibly concurrently, return
 * when all are done, and return 0 or the first non-zero value a task returned; num_tasks is at
 * most num_threads. A launch from inside a task should run its tasks serially on that thread.
 * This is the kernel ABI's own contract (kiln_kernel_ctx_t in kiln_kernel_abi.h). */
typedef struct kiln_thread_pool_t {
  int32_t num_threads; /* how many tasks it runs at once (>= 1) */
  void* pool;          /* passed back to parallel_launch; owned by the host */
  int32_t (*parallel_launch)(void* pool, kiln_task_fn fn, void* closure, int64_t num_tasks);
} kiln_thread_pool_t;

/* Per VM (a module of kind "vm", from load_executable): how many threads its kernels' parallel
 * loops use, at most; 0 (the default) follows kiln_get_num_threads(). With the runtime's pool a
 * count above kiln_get_num_threads() runs on that many workers only. Set it before calling the
 * VM's functions, not while another thread calls them. Errors: KILN_ERR_INVALID_ARGUMENT (NULL,
 * negative, not a VM module). */
KILN_API kiln_status_t kiln_vm_set_num_threads(kiln_module_t* vm, int32_t num_threads);

/* Makes the VM's kernels run their parallel loops on `pool` (copied; pool->pool is borrowed and
 * must stay valid while the VM runs), NULL to return to the runtime's pool. A count set with
 * kiln_vm_set_num_threads still caps the tasks per loop. Same threading rule as above. Errors:
 * KILN_ERR_INVALID_ARGUMENT (NULL or non-VM module, num_threads < 1, NULL parallel_launch). */
KILN_API kiln_status_t kiln_vm_set_thread_pool(kiln_module_t* vm, const kiln_thread_pool_t* pool);

/* ---------------------------------------------------------------------------------------------
 * A caller-provided arena (embedded use: no allocation after init)
 *
 * After kiln_vm_set_arena(vm, arena, nbytes), every call of the VM's graph functions takes its
 * frame (registers and the planned intermediate tensors) and its output tensors from `arena`
 * instead of the heap, so a call allocates nothing (with the function objects looked up before:
 * kiln_module_get_function allocates). The outputs live in the arena: they stay valid until the
 * next call of any function of this VM, and releasing them frees nothing; so is a tuple that a
 * function returns (a language model's (logits, kv_cache)), whose items are borrowed: valid as
 * long as the outputs, and as the arguments that are returned. Release what a call returned
 * before the next call, and pass no output of one call to the next (KILN_ERR_INVALID_ARGUMENT:
 * the call would overwrite it). One call at a time (a second concurrent call fails with
 * KILN_ERR_INVALID_STATE); external functions must not keep tensors they are given past their
 * call. Functions with outputs of symbolic shape cannot run in an arena (KILN_ERR_UNSUPPORTED).
 * The model's kernels allocate scratch buffers of more than 32 KB on the heap (smaller ones are
 * on the stack). export_static's header gives the size as KILN_MODEL_<NAME>_ARENA_BYTES, an upper
 * bound of kiln_vm_arena_bytes on every target.
 * ------------------------------------------------------------------------------------------- */

/* The bytes a call of any of the VM's functions takes from an arena. Errors:
 * KILN_ERR_INVALID_ARGUMENT (NULL, not a VM), KILN_ERR_UNSUPPORTED (see above). */
KILN_API kiln_status_t kiln_vm_arena_bytes(kiln_module_t* vm, uint64_t* out_nbytes);

/* Runs the VM's calls in `arena` (nbytes, KILN_ALIGNMENT-aligned, borrowed until replaced or
 * removed with NULL). Set it before calling the VM's functions, not while another thread calls
 * them. Errors: KILN_ERR_INVALID_ARGUMENT (NULL or non-VM module, misaligned, smaller than
 * kiln_vm_arena_bytes), KILN_ERR_UNSUPPORTED (see above). */
KILN_API kiln_status_t kiln_vm_set_arena(kiln_module_t* vm, void* arena, size_t nbytes);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_H_ */
