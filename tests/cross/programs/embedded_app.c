/*
 * embedded_app.c (tests/cross): the embedded configuration's promise, checked. A model exported
 * with Executable.export_static(dir, "m") is linked with the embedded runtime
 * (make -C runtime_c embedded: static, single-threaded, no dlopen, no file system). After init
 * the program gives the VM a static arena of KILN_MODEL_M_ARENA_BYTES (the generated header's
 * constant) and runs "main" three times with malloc, calloc, realloc, free, posix_memalign,
 * aligned_alloc and memalign interposed: it prints how many calls they got (0 is the promise)
 * and the outputs, x of shape (2, 16) with x[i] = ((i * 7) % 19 - 9) / 16.
 *
 *   embedded_app            the arena: prints "allocations after init: 0" and the values
 *   embedded_app --heap     no arena (the heap, as usual): the count is not 0, which shows
 *                           the interposition sees the runtime's allocations
 *
 * The interposers forward to glibc's __libc_* entry points (this test runs on glibc targets).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kiln_runtime.h"
#include "m.h"

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void __libc_free(void*);
extern void* __libc_memalign(size_t, size_t);

static int counting;
static long calls;

void* malloc(size_t n) { calls += counting; return __libc_malloc(n); }
void* calloc(size_t a, size_t b) { calls += counting; return __libc_calloc(a, b); }
void* realloc(void* p, size_t n) { calls += counting; return __libc_realloc(p, n); }
void free(void* p) { calls += counting && p; __libc_free(p); }
void* memalign(size_t a, size_t n) { calls += counting; return __libc_memalign(a, n); }
void* aligned_alloc(size_t a, size_t n) { calls += counting; return __libc_memalign(a, n); }
int posix_memalign(void** out, size_t a, size_t n) {
  calls += counting;
  void* p = __libc_memalign(a, n);
  if (!p) return 12; /* ENOMEM */
  *out = p;
  return 0;
}

static _Alignas(KILN_ALIGNMENT) uint8_t arena[KILN_MODEL_M_ARENA_BYTES];

static int fail(const char* what) {
  fprintf(stderr, "embedded_app: %s: %s\n", what, kiln_last_error());
  return 1;
}

int main(int argc, char** argv) {
  int heap = argc > 1 && strcmp(argv[1], "--heap") == 0;
  kiln_module_t* lib = NULL;
  kiln_function_t *load = NULL, *init = NULL, *fn = NULL;
  kiln_value_t vm = {KILN_VALUE_NULL, {0}}, out = {KILN_VALUE_NULL, {0}}, arg;
  kiln_tensor_t* x = NULL;
  const int64_t shape[2] = {2, 16};
  float y[3][20];
  size_t ny = 0;
  int rc = 1;
  if (kiln_model_m_create(&lib) != KILN_OK) return fail("create");
  if (kiln_module_get_function(lib, "load_executable", &load) != KILN_OK ||
      kiln_function_call(load, NULL, 0, &vm) != KILN_OK) { rc = fail("load_executable"); goto done; }
  if (kiln_module_get_function(vm.u.module, "init", &init) != KILN_OK ||
      kiln_function_call(init, NULL, 0, NULL) != KILN_OK) { rc = fail("init"); goto done; }
  if (kiln_module_get_function(vm.u.module, "main", &fn) != KILN_OK) { rc = fail("main"); goto done; }
  if (kiln_tensor_create(shape, 2, (DLDataType){kDLFloat, 32, 1}, (DLDevice){kDLCPU, 0}, &x) != KILN_OK) {
    rc = fail("tensor");
    goto done;
  }
  float* xd = (float*)kiln_tensor_dltensor(x)->data;
  for (int i = 0; i < 32; ++i) xd[i] = (float)((i * 7) % 19 - 9) / 16.0f;
  uint64_t need = 0;
  if (kiln_vm_arena_bytes(vm.u.module, &need) != KILN_OK) { rc = fail("arena_bytes"); goto done; }
  /* Refused: an arena one byte short, and a misaligned one. */
  if (kiln_vm_set_arena(vm.u.module, arena, (size_t)need - 1) == KILN_OK ||
      kiln_vm_set_arena(vm.u.module, arena + 1, sizeof arena - 1) == KILN_OK) {
    fprintf(stderr, "embedded_app: a short or misaligned arena was accepted\n");
    goto done;
  }
  printf("refused: %s\n", kiln_last_error());
  if (!heap && kiln_vm_set_arena(vm.u.module, arena, sizeof arena) != KILN_OK) {
    rc = fail("set_arena");
    goto done;
  }
  arg.kind = KILN_VALUE_TENSOR;
  arg.u.tensor = x;
  counting = 1; /* everything from here on must come from the arena */
  for (int r = 0; r < 3; ++r) {
    if (kiln_function_call(fn, &arg, 1, &out) != KILN_OK) { counting = 0; rc = fail("main"); goto done; }
    const float* yd = (const float*)kiln_tensor_dltensor(out.u.tensor)->data;
    ny = kiln_tensor_nbytes(out.u.tensor) / sizeof(float);
    for (size_t i = 0; i < ny && i < 20; ++i) y[r][i] = yd[i];
    kiln_value_release(&out);
  }
  counting = 0;
  printf("arena bytes: %llu needed, %llu in the header\n", (unsigned long long)need,
         (unsigned long long)KILN_MODEL_M_ARENA_BYTES);
  printf("allocations after init: %ld\n", calls);
  for (int r = 0; r < 3; ++r)
    for (size_t i = 0; i < ny && i < 20; ++i) printf("%.9g\n", y[r][i]);
  rc = 0;
done:
  kiln_value_release(&out);
  kiln_tensor_release(x);
  kiln_function_release(fn);
  kiln_function_release(init);
  kiln_value_release(&vm);
  kiln_function_release(load);
  kiln_module_release(lib);
  return rc;
}
