/* platform.c — the runtime's only contact with the operating system besides threads: dynamic
 * loading, aligned memory and the core count. A port (or a static, bare-metal build) replaces
 * this file. KILN_EMBEDDED (`make embedded`) leaves dynamic loading and the file system out:
 * models are linked in (export_static), and kiln_module_load_library says so. */
#define _POSIX_C_SOURCE 200809L
#if !defined(KILN_EMBEDDED)
#include <dlfcn.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#if defined(KILN_EMBEDDED)
kiln_status_t kiln_platform_library_open(const char* path, void** out_handle) {
  (void)out_handle;
  return kiln_error(KILN_ERR_UNSUPPORTED, "cannot load library '%s': this runtime is the embedded "
                    "build (no dynamic loading, no file system); link the model with "
                    "export_static and kiln_model_<name>_create", path);
}

void* kiln_platform_library_symbol(void* handle, const char* name) {
  (void)handle;
  (void)name;
  return NULL;
}

void kiln_platform_library_close(void* handle) { (void)handle; }
#else
kiln_status_t kiln_platform_library_open(const char* path, void** out_handle) {
  /* dlopen searches the library path for a bare file name; Kiln users mean a file, so anchor a
   * name without '/' to the working directory. */
  const char* open_path = path;
  char* anchored = NULL;
  if (!strchr(path, '/')) {
    size_t n = strlen(path);
    anchored = kiln_mem_alloc(n + 3);
    if (!anchored) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading '%s'", path);
    memcpy(anchored, "./", 2);
    memcpy(anchored + 2, path, n + 1);
    open_path = anchored;
  }
  kiln_status_t checked = kiln_platform_elf_check(open_path);
  if (checked != KILN_OK) {
    kiln_mem_free(anchored);
    return checked;
  }
  void* handle = dlopen(open_path, RTLD_NOW | RTLD_LOCAL);
  kiln_mem_free(anchored);
  if (!handle) {
    const char* reason = dlerror();
    return kiln_error(KILN_ERR_IO, "cannot load library '%s': %s", path,
                      reason ? reason : "unknown reason");
  }
  /* Code built for CPU features this machine lacks would die of SIGILL at its first call: the
   * library's own check (kiln_kernel_abi.h; codegen emits it for x86-64) says which is missing. */
  const kiln_cpu_check_fn* check = dlsym(handle, KILN_CPU_CHECK_SYMBOL);
  const char* lacks = check ? (*check)() : NULL;
  if (lacks) {
    kiln_status_t st = kiln_error(KILN_ERR_UNSUPPORTED, "%s", lacks); /* before `lacks` goes */
    dlclose(handle);
    return st;
  }
  *out_handle = handle;
  return KILN_OK;
}

void* kiln_platform_library_symbol(void* handle, const char* name) { return dlsym(handle, name); }

void kiln_platform_library_close(void* handle) { dlclose(handle); }
#endif

void* kiln_platform_aligned_alloc(size_t alignment, size_t nbytes) {
  void* p = NULL;
  return posix_memalign(&p, alignment, nbytes) == 0 ? p : NULL;
}

void kiln_platform_aligned_free(void* ptr) { free(ptr); }

int32_t kiln_platform_num_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n >= 1 ? (int32_t)n : 1;
}

uint64_t kiln_platform_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
