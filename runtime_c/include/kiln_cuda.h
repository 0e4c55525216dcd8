/* kiln_cuda.h — the CUDA device of the Kiln runtime (optional; libkiln_cuda.so).
 *
 * NVIDIA's driver (libcuda.so.1) is found with dlopen when a device is opened, so nothing here
 * needs the CUDA toolkit to build, and a program that never opens a CUDA device never touches
 * the driver. Without a driver, kiln_cuda_device_open fails with KILN_ERR_UNSUPPORTED and the
 * message "no CUDA driver: libcuda.so.1 not found (...)".
 *
 *   kiln_cuda_device_t* gpu;  kiln_cuda_module_t* mod;  void* kernel;
 *   kiln_cuda_device_open(0, &gpu);
 *   kiln_cuda_tensor_create(gpu, shape, 1, dtype, &a);           // device memory, a kiln tensor
 *   kiln_cuda_copy_to_device(gpu, a, host, nbytes);
 *   kiln_cuda_module_load(gpu, ptx_text, &mod);                   // PTX from kiln's CUDA codegen
 *   kiln_cuda_module_kernel(mod, "main_kernel", &kernel);
 *   kiln_cuda_launch(gpu, kernel, grid, block, 0, params);        // then kiln_cuda_synchronize
 *
 * Errors are reported as everywhere in the runtime: a status code, and the calling thread's
 * message in kiln_last_error() (the driver's own words from cuGetErrorString included).
 * Tensors made here hold a reference to their device; it lives until the last is released. */
#ifndef KILN_CUDA_H_
#define KILN_CUDA_H_

#include "kiln_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_cuda_device kiln_cuda_device_t;
typedef struct kiln_cuda_module kiln_cuda_module_t;

/* Opens GPU `ordinal` (its primary context). Errors: KILN_ERR_UNSUPPORTED (no driver, or the
 * driver reports no such GPU), KILN_ERR_INVALID_ARGUMENT (NULL out, negative ordinal). */
KILN_API kiln_status_t kiln_cuda_device_open(int32_t ordinal, kiln_cuda_device_t** out_device);
/* Drops the caller's reference; the device closes when tensors and modules have dropped theirs. */
KILN_API void kiln_cuda_device_release(kiln_cuda_device_t* device);
/* The GPU's name as the driver reports it ("NVIDIA H100 80GB HBM3"). */
KILN_API const char* kiln_cuda_device_name(const kiln_cuda_device_t* device);

/* A new compact tensor in the GPU's memory (device type kDLCUDA); it frees that memory when
 * released. Errors: as kiln_tensor_create, and KILN_ERR_OUT_OF_MEMORY from the driver. */
KILN_API kiln_status_t kiln_cuda_tensor_create(kiln_cuda_device_t* device, const int64_t* shape,
                                               int32_t ndim, DLDataType dtype,
                                               kiln_tensor_t** out_tensor);
/* Copies nbytes (exactly the tensor's size) between host memory and a CUDA tensor of this device. */
KILN_API kiln_status_t kiln_cuda_copy_to_device(kiln_cuda_device_t* device, kiln_tensor_t* dst,
                                                const void* src, size_t nbytes);
KILN_API kiln_status_t kiln_cuda_copy_to_host(kiln_cuda_device_t* device, void* dst,
                                              kiln_tensor_t* src, size_t nbytes);

/* Loads PTX text (the driver compiles it for the GPU); ptxas's log is in the error message. */
KILN_API kiln_status_t kiln_cuda_module_load(kiln_cuda_device_t* device, const char* ptx,
                                             kiln_cuda_module_t** out_module);
KILN_API void kiln_cuda_module_free(kiln_cuda_module_t* module);
/* The kernel entry `name` of a module (valid while the module is). KILN_ERR_NOT_FOUND if absent. */
KILN_API kiln_status_t kiln_cuda_module_kernel(kiln_cuda_module_t* module, const char* name,
                                               void** out_kernel);
/* Launches `kernel` on grid x block threads; params[k] points at the k-th parameter's value
 * (a device pointer or an int64), as cuLaunchKernel takes them. Asynchronous. */
KILN_API kiln_status_t kiln_cuda_launch(kiln_cuda_device_t* device, void* kernel,
                                        const uint32_t grid[3], const uint32_t block[3],
                                        uint32_t shared_bytes, void** params);
/* Waits for every launch and copy of the device; reports a kernel's failure. */
KILN_API kiln_status_t kiln_cuda_synchronize(kiln_cuda_device_t* device);

/* ---- a model's GPU code, from its executable (kiln.compile(mod, target="cuda")) ----
 * The blob carries the PTX and launch description in its optional CUDA section (0x101,
 * docs/executable-format.md). Loading checks every byte of that section first (errors:
 * KILN_ERR_INVALID_FORMAT naming the byte, KILN_ERR_VERSION_MISMATCH, KILN_ERR_NOT_FOUND for a
 * blob without one), then opens GPU `ordinal` (KILN_ERR_UNSUPPORTED "no CUDA driver: ..."), loads
 * the PTX and resolves every kernel entry. */
typedef struct kiln_cuda_executable kiln_cuda_executable_t;
KILN_API kiln_status_t kiln_cuda_executable_load(int32_t ordinal, const void* blob, size_t size,
                                                 kiln_cuda_executable_t** out);
/* The same from a model library (.so from Executable.export_library): its kiln_executable_blob. */
KILN_API kiln_status_t kiln_cuda_executable_open(const char* library_path, int32_t ordinal,
                                                 kiln_cuda_executable_t** out);
KILN_API void kiln_cuda_executable_free(kiln_cuda_executable_t* executable);
/* The kernel entries in launch order: count, names and handles (for kiln_cuda_launch). */
KILN_API int32_t kiln_cuda_executable_num_kernels(const kiln_cuda_executable_t* executable);
KILN_API const char* kiln_cuda_executable_kernel_name(const kiln_cuda_executable_t* executable,
                                                      int32_t index);
KILN_API void* kiln_cuda_executable_kernel(const kiln_cuda_executable_t* executable, int32_t index);
/* The launch description (JSON: per tensor program its parameters, dimensions, scratch buffers,
 * kernels with grid and block), as kiln.codegen.cuda.CudaModule writes it. */
KILN_API const char* kiln_cuda_executable_description(const kiln_cuda_executable_t* executable);

#ifdef __cplusplus
}
#endif
#endif /* KILN_CUDA_H_ */
