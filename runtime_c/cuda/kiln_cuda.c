/* kiln_cuda.c — the CUDA device (include/kiln_cuda.h): NVIDIA's driver API through dlopen.
 *
 * Built as its own library (build/libkiln_cuda.so, linked against libkiln_runtime.so) and into
 * the Python extension, never into libkiln_runtime itself: the shared runtime stays small and
 * free of any GPU code. The driver's functions are looked up per device (dlopen counts its
 * references), so there is no global state. The few driver types needed are declared here as
 * the driver's ABI defines them (cuda.h is not needed to build). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_cuda.h"
#include "../src/ext_error.h"

#define KILN_CUDA_DRIVER "libcuda.so.1"

typedef int CUresult;                 /* CUDA_SUCCESS is 0 */
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef unsigned long long CUdeviceptr;
enum { KILN_CU_JIT_ERROR_LOG_BUFFER = 5, KILN_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6 };

/* Driver entry points, by the names the driver exports (the _v2 ABI where there is one). */
typedef struct {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned, int*, void**);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, void*, void**, void**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
} kiln_cu_api_t;

static const struct {
  const char* name;
  size_t offset;
} kiln_cu_symbols[] = {
#define KILN_CU_SYM(field, symbol) {symbol, offsetof(kiln_cu_api_t, field)}
    KILN_CU_SYM(cuInit, "cuInit"),
    KILN_CU_SYM(cuDeviceGetCount, "cuDeviceGetCount"),
    KILN_CU_SYM(cuDeviceGet, "cuDeviceGet"),
    KILN_CU_SYM(cuDeviceGetName, "cuDeviceGetName"),
    KILN_CU_SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    KILN_CU_SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
    KILN_CU_SYM(cuCtxSetCurrent, "cuCtxSetCurrent"),
    KILN_CU_SYM(cuCtxSynchronize, "cuCtxSynchronize"),
    KILN_CU_SYM(cuMemAlloc, "cuMemAlloc_v2"),
    KILN_CU_SYM(cuMemFree, "cuMemFree_v2"),
    KILN_CU_SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
    KILN_CU_SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
    KILN_CU_SYM(cuModuleLoadDataEx, "cuModuleLoadDataEx"),
    KILN_CU_SYM(cuModuleUnload, "cuModuleUnload"),
    KILN_CU_SYM(cuModuleGetFunction, "cuModuleGetFunction"),
    KILN_CU_SYM(cuLaunchKernel, "cuLaunchKernel"),
    KILN_CU_SYM(cuGetErrorString, "cuGetErrorString"),
#undef KILN_CU_SYM
};

struct kiln_cuda_device {
  int refs; /* the opener's, one per live tensor and module; changed atomically */
  void* driver;
  kiln_cu_api_t cu;
  CUdevice dev;
  CUcontext ctx;
  int ordinal;
  char name[128];
};

struct kiln_cuda_module {
  kiln_cuda_device_t* device;
  CUmodule mod;
};

typedef struct {
  kiln_cuda_device_t* device;
  CUdeviceptr ptr;
} kiln_cuda_buffer_t;

/* A driver call's failure as "<what>: <driver's message> (CUDA error N)". */
static kiln_status_t kiln_cu_check(const kiln_cuda_device_t* d, CUresult r, const char* what) {
  const char* text = NULL;
  if (r == 0) return KILN_OK;
  if (d->cu.cuGetErrorString == NULL || d->cu.cuGetErrorString(r, &text) != 0 || text == NULL)
    text = "unknown error";
  /* 2: CUDA_ERROR_OUT_OF_MEMORY */
  return kiln_ext_fail(r == 2 ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_RUNTIME,
                        "cuda:%d: %s: %s (CUDA error %d)", d->ordinal, what, text, r);
}

static void kiln_cuda_retain(kiln_cuda_device_t* d) { __atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED); }

void kiln_cuda_device_release(kiln_cuda_device_t* d) {
  if (d == NULL || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (d->ctx != NULL) d->cu.cuDevicePrimaryCtxRelease(d->dev);
  if (d->driver != NULL) dlclose(d->driver);
  free(d);
}

kiln_status_t kiln_cuda_device_open(int32_t ordinal, kiln_cuda_device_t** out_device) {
  kiln_cuda_device_t* d;
  kiln_status_t st;
  int count = 0;
  size_t i;
  if (out_device == NULL || ordinal < 0)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_cuda_device_open: %s",
                          out_device == NULL ? "NULL out_device" : "negative device ordinal");
  *out_device = NULL;
  d = (kiln_cuda_device_t*)calloc(1, sizeof *d);
  if (d == NULL) return kiln_ext_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_cuda_device_open: out of memory");
  d->refs = 1;
  d->ordinal = ordinal;
  d->driver = dlopen(KILN_CUDA_DRIVER, RTLD_NOW | RTLD_LOCAL);
  if (d->driver == NULL) {
    const char* why = dlerror();
    kiln_ext_fail(KILN_ERR_UNSUPPORTED,
                   "no CUDA driver: " KILN_CUDA_DRIVER " not found (%s); cuda:%d needs an NVIDIA "
                   "GPU and its driver", why ? why : "dlopen failed", ordinal);
    free(d);
    return KILN_ERR_UNSUPPORTED;
  }
  for (i = 0; i < sizeof kiln_cu_symbols / sizeof kiln_cu_symbols[0]; ++i) {
    void* fn = dlsym(d->driver, kiln_cu_symbols[i].name);
    if (fn == NULL) {
      kiln_ext_fail(KILN_ERR_UNSUPPORTED, "CUDA driver " KILN_CUDA_DRIVER " lacks %s (too old?)",
                     kiln_cu_symbols[i].name);
      kiln_cuda_device_release(d);
      return KILN_ERR_UNSUPPORTED;
    }
    memcpy((char*)&d->cu + kiln_cu_symbols[i].offset, &fn, sizeof fn);
  }
  if ((st = kiln_cu_check(d, d->cu.cuInit(0), "cuInit")) != KILN_OK ||
      (st = kiln_cu_check(d, d->cu.cuDeviceGetCount(&count), "cuDeviceGetCount")) != KILN_OK) {
    kiln_cuda_device_release(d);
    return KILN_ERR_UNSUPPORTED;
  }
  if (ordinal >= count) {
    kiln_ext_fail(KILN_ERR_UNSUPPORTED, "cuda:%d: the CUDA driver reports %d GPU(s)", ordinal, count);
    kiln_cuda_device_release(d);
    return KILN_ERR_UNSUPPORTED;
  }
  if ((st = kiln_cu_check(d, d->cu.cuDeviceGet(&d->dev, ordinal), "cuDeviceGet")) != KILN_OK ||
      (st = kiln_cu_check(d, d->cu.cuDeviceGetName(d->name, (int)sizeof d->name - 1, d->dev),
                          "cuDeviceGetName")) != KILN_OK ||
      (st = kiln_cu_check(d, d->cu.cuDevicePrimaryCtxRetain(&d->ctx, d->dev),
                          "cuDevicePrimaryCtxRetain")) != KILN_OK) {
    d->ctx = NULL;
    kiln_cuda_device_release(d);
    return st;
  }
  *out_device = d;
  return KILN_OK;
}

const char* kiln_cuda_device_name(const kiln_cuda_device_t* device) {
  return device ? device->name : "";
}

/* Makes the device's context current on the calling thread (each API call may come from
 * another thread). */
static kiln_status_t kiln_cuda_enter(kiln_cuda_device_t* d, const char* what) {
  if (d == NULL) return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "%s: NULL device", what);
  return kiln_cu_check(d, d->cu.cuCtxSetCurrent(d->ctx), "cuCtxSetCurrent");
}

static void kiln_cuda_buffer_free(void* ctx) {
  kiln_cuda_buffer_t* b = (kiln_cuda_buffer_t*)ctx;
  if (kiln_cuda_enter(b->device, "free") == KILN_OK) b->device->cu.cuMemFree(b->ptr);
  kiln_cuda_device_release(b->device);
  free(b);
}

kiln_status_t kiln_cuda_tensor_create(kiln_cuda_device_t* device, const int64_t* shape,
                                      int32_t ndim, DLDataType dtype, kiln_tensor_t** out_tensor) {
  kiln_tensor_t* probe = NULL;
  kiln_cuda_buffer_t* buf;
  DLTensor dl;
  size_t nbytes;
  kiln_status_t st;
  int64_t empty_shape[KILN_MAX_NDIM];
  DLDevice cpu = {kDLCPU, 0};
  if ((st = kiln_cuda_enter(device, "kiln_cuda_tensor_create")) != KILN_OK) return st;
  if (out_tensor == NULL || ndim < 0 || ndim > KILN_MAX_NDIM || (ndim > 0 && shape == NULL))
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_cuda_tensor_create: NULL out_tensor, "
                          "NULL shape or ndim %d outside [0, %d]", (int)ndim, KILN_MAX_NDIM);
  /* An empty host tensor of this ndim and dtype checks the dtype as the runtime does. */
  memset(empty_shape, 0, sizeof empty_shape);
  if ((st = kiln_tensor_create(empty_shape, ndim, dtype, cpu, &probe)) != KILN_OK) return st;
  kiln_tensor_release(probe);
  memset(&dl, 0, sizeof dl);
  dl.ndim = ndim;
  dl.dtype = dtype;
  dl.shape = (int64_t*)shape;
  dl.device.device_type = kDLCUDA;
  dl.device.device_id = device->ordinal;
  nbytes = (size_t)(dtype.bits * dtype.lanes + 7) / 8;
  for (int32_t i = 0; i < ndim; ++i) {
    if (shape[i] < 0)
      return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT,
                            "kiln_cuda_tensor_create: negative extent in shape (axis %d: %lld)",
                            (int)i, (long long)shape[i]);
    if (shape[i] != 0 && nbytes > (size_t)-1 / (size_t)shape[i])
      return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_cuda_tensor_create: size overflow");
    nbytes *= (size_t)shape[i];
  }
  buf = (kiln_cuda_buffer_t*)calloc(1, sizeof *buf);
  if (buf == NULL) return kiln_ext_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_cuda_tensor_create: out of memory");
  /* At least one byte: an empty tensor still has a (non-NULL) address. */
  st = kiln_cu_check(device, device->cu.cuMemAlloc(&buf->ptr, nbytes ? nbytes : 1), "cuMemAlloc");
  if (st != KILN_OK) {
    free(buf);
    return st;
  }
  buf->device = device;
  dl.data = (void*)(uintptr_t)buf->ptr;
  st = kiln_tensor_wrap(&dl, kiln_cuda_buffer_free, buf, out_tensor);
  if (st != KILN_OK) {
    device->cu.cuMemFree(buf->ptr);
    free(buf);
    return st;
  }
  kiln_cuda_retain(device);
  return KILN_OK;
}

/* The device pointer of a CUDA tensor of `d` holding exactly nbytes. */
static kiln_status_t kiln_cuda_tensor_ptr(kiln_cuda_device_t* d, kiln_tensor_t* t, size_t nbytes,
                                          const char* what, CUdeviceptr* out) {
  DLTensor* dl;
  if (t == NULL) return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "%s: NULL tensor", what);
  dl = kiln_tensor_dltensor(t);
  if (dl->device.device_type != kDLCUDA || dl->device.device_id != d->ordinal)
    return kiln_ext_fail(KILN_ERR_DEVICE_MISMATCH, "%s: the tensor is not on cuda:%d", what,
                          d->ordinal);
  if (kiln_tensor_nbytes(t) != nbytes)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "%s: %zu bytes given, the tensor has %zu",
                          what, nbytes, kiln_tensor_nbytes(t));
  *out = (CUdeviceptr)(uintptr_t)dl->data + dl->byte_offset;
  return KILN_OK;
}

kiln_status_t kiln_cuda_copy_to_device(kiln_cuda_device_t* device, kiln_tensor_t* dst,
                                       const void* src, size_t nbytes) {
  CUdeviceptr p;
  kiln_status_t st;
  if ((st = kiln_cuda_enter(device, "kiln_cuda_copy_to_device")) != KILN_OK ||
      (st = kiln_cuda_tensor_ptr(device, dst, nbytes, "kiln_cuda_copy_to_device", &p)) != KILN_OK)
    return st;
  if (nbytes == 0) return KILN_OK;
  if (src == NULL) return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_cuda_copy_to_device: NULL src");
  return kiln_cu_check(device, device->cu.cuMemcpyHtoD(p, src, nbytes), "cuMemcpyHtoD");
}

kiln_status_t kiln_cuda_copy_to_host(kiln_cuda_device_t* device, void* dst, kiln_tensor_t* src,
                                     size_t nbytes) {
  CUdeviceptr p;
  kiln_status_t st;
  if ((st = kiln_cuda_enter(device, "kiln_cuda_copy_to_host")) != KILN_OK ||
      (st = kiln_cuda_tensor_ptr(device, src, nbytes, "kiln_cuda_copy_to_host", &p)) != KILN_OK)
    return st;
  if (nbytes == 0) return KILN_OK;
  if (dst == NULL) return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_cuda_copy_to_host: NULL dst");
  return kiln_cu_check(device, device->cu.cuMemcpyDtoH(dst, p, nbytes), "cuMemcpyDtoH");
}

kiln_status_t kiln_cuda_module_load(kiln_cuda_device_t* device, const char* ptx,
                                    kiln_cuda_module_t** out_module) {
  char log[4096];
  int options[2] = {KILN_CU_JIT_ERROR_LOG_BUFFER, KILN_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[2];
  kiln_cuda_module_t* m;
  CUresult r;
  kiln_status_t st;
  if (ptx == NULL || out_module == NULL)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_cuda_module_load: NULL %s",
                          ptx == NULL ? "ptx" : "out_module");
  *out_module = NULL;
  if ((st = kiln_cuda_enter(device, "kiln_cuda_module_load")) != KILN_OK) return st;
  m = (kiln_cuda_module_t*)calloc(1, sizeof *m);
  if (m == NULL) return kiln_ext_fail(KILN_ERR_OUT_OF_MEMORY, "kiln_cuda_module_load: out of memory");
  log[0] = '\0';
  values[0] = log;
  values[1] = (void*)(uintptr_t)sizeof log;
  r = device->cu.cuModuleLoadDataEx(&m->mod, ptx, 2, options, values);
  if (r != 0) {
    const char* text = NULL;
    if (device->cu.cuGetErrorString(r, &text) != 0 || text == NULL) text = "unknown error";
    log[sizeof log - 1] = '\0';
    free(m);
    return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "cuda:%d: loading the PTX failed: %s (CUDA error "
                          "%d)%s%s", device->ordinal, text, r, log[0] ? ": " : "", log);
  }
  m->device = device;
  kiln_cuda_retain(device);
  *out_module = m;
  return KILN_OK;
}

void kiln_cuda_module_free(kiln_cuda_module_t* module) {
  if (module == NULL) return;
  if (kiln_cuda_enter(module->device, "kiln_cuda_module_free") == KILN_OK)
    module->device->cu.cuModuleUnload(module->mod);
  kiln_cuda_device_release(module->device);
  free(module);
}

kiln_status_t kiln_cuda_module_kernel(kiln_cuda_module_t* module, const char* name,
                                      void** out_kernel) {
  CUfunction fn = NULL;
  kiln_status_t st;
  if (module == NULL || name == NULL || out_kernel == NULL)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_cuda_module_kernel: NULL argument");
  if ((st = kiln_cuda_enter(module->device, "kiln_cuda_module_kernel")) != KILN_OK) return st;
  if (module->device->cu.cuModuleGetFunction(&fn, module->mod, name) != 0 || fn == NULL)
    return kiln_ext_fail(KILN_ERR_NOT_FOUND, "cuda:%d: the module has no kernel '%s'",
                          module->device->ordinal, name);
  *out_kernel = fn;
  return KILN_OK;
}

kiln_status_t kiln_cuda_launch(kiln_cuda_device_t* device, void* kernel, const uint32_t grid[3],
                               const uint32_t block[3], uint32_t shared_bytes, void** params) {
  kiln_status_t st;
  if (kernel == NULL || grid == NULL || block == NULL)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_cuda_launch: NULL argument");
  if ((st = kiln_cuda_enter(device, "kiln_cuda_launch")) != KILN_OK) return st;
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return KILN_OK; /* nothing to run */
  return kiln_cu_check(device, device->cu.cuLaunchKernel((CUfunction)kernel, grid[0], grid[1],
                                                         grid[2], block[0], block[1], block[2],
                                                         shared_bytes, NULL, params, NULL),
                       "cuLaunchKernel");
}

kiln_status_t kiln_cuda_synchronize(kiln_cuda_device_t* device) {
  kiln_status_t st;
  if ((st = kiln_cuda_enter(device, "kiln_cuda_synchronize")) != KILN_OK) return st;
  return kiln_cu_check(device, device->cu.cuCtxSynchronize(), "cuCtxSynchronize");
}
