/* memory.c — the runtime's one allocator: KILN_ALIGNMENT-aligned blocks from the platform, with
 * an optional allocation-failure injection hook for tests. */
#include <string.h>

#include "internal.h"

#if defined(KILN_FAULT_INJECTION)
/* Allocations left before the next one fails; negative means never fail. Test builds only. */
static int64_t g_allocations_until_failure = -1;

KILN_API void kiln_testing_fail_allocations_after(int64_t count) {
  g_allocations_until_failure = count;
}

static int injected_failure(void) {
  if (g_allocations_until_failure < 0) return 0;
  if (g_allocations_until_failure == 0) return 1;
  --g_allocations_until_failure;
  return 0;
}
#else
#define injected_failure() 0
#endif

void* kiln_mem_alloc(size_t nbytes) {
  if (injected_failure()) return NULL;
  /* A zero-byte request still returns a unique pointer, so NULL always means failure. */
  return kiln_platform_aligned_alloc(KILN_ALIGNMENT, nbytes ? nbytes : 1);
}

void* kiln_mem_calloc(size_t nbytes) {
  void* p = kiln_mem_alloc(nbytes);
  if (p) memset(p, 0, nbytes);
  return p;
}

void kiln_mem_free(void* ptr) { kiln_platform_aligned_free(ptr); }

char* kiln_mem_strdup(const char* str) {
  size_t n = strlen(str) + 1;
  char* copy = kiln_mem_alloc(n);
  if (copy) memcpy(copy, str, n);
  return copy;
}

kiln_status_t kiln_memory_alloc(size_t nbytes, void** out_ptr) {
  if (!out_ptr) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_memory_alloc: out_ptr is NULL");
  void* p = kiln_mem_alloc(nbytes);
  if (!p) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes", nbytes);
  *out_ptr = p;
  return KILN_OK;
}

void kiln_memory_free(void* ptr) { kiln_mem_free(ptr); }
