/* decode_alloc.c: counts the heap calls of a language model's decode steps (issue 12: "decode
 * allocates nothing per token"). Loads an artifact of examples/export_gpt.py, creates the KV
 * cache, gives the VM an arena of kiln_vm_arena_bytes (kiln_vm_set_arena), prefills the prompt
 * and decodes STEPS tokens greedily, one token[1, 1] per call, with malloc, calloc, realloc,
 * free, posix_memalign, aligned_alloc and memalign interposed (glibc: forwarded to __libc_*). The
 * calls are counted from the second decode on (the first one may start the thread pool).
 *
 *   decode_alloc MODEL.so STEPS MODE TOKEN...
 *
 * MODE "arena": prints the tokens on one line, then "heap calls in N decodes: X" (0 is the
 * promise). MODE "heap": the same without an arena (X > 0: the interposers do see the runtime).
 * MODE "misuse": creates the cache in the arena and passes it to prefill, which the VM refuses;
 * prints the error. Exit status 0, or 1 with the runtime's message on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void __libc_free(void*);
extern void* __libc_memalign(size_t, size_t);

static int counting;
static long calls; /* the thread pool's workers run kernels too: counted atomically */
#define COUNT() (counting ? (void)__atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED) : (void)0)

void* malloc(size_t n) { COUNT(); return __libc_malloc(n); }
void* calloc(size_t a, size_t b) { COUNT(); return __libc_calloc(a, b); }
void* realloc(void* p, size_t n) { COUNT(); return __libc_realloc(p, n); }
void free(void* p) { if (p) COUNT(); __libc_free(p); }
void* memalign(size_t a, size_t n) { COUNT(); return __libc_memalign(a, n); }
void* aligned_alloc(size_t a, size_t n) { COUNT(); return __libc_memalign(a, n); }
int posix_memalign(void** out, size_t a, size_t n) {
  COUNT();
  *out = __libc_memalign(a, n);
  return *out ? 0 : 12; /* ENOMEM */
}

static int fail(const char* what) {
  fprintf(stderr, "decode_alloc: %s: %s\n", what, kiln_last_error());
  return 1;
}

/* fn(x, kv) -> (logits, kv); *next = argmax(logits). Everything it was given back is released
 * before it returns, as the arena requires. */
static kiln_status_t step(kiln_function_t* fn, kiln_tensor_t* x, kiln_tensor_t* kv, int64_t* next) {
  kiln_value_t args[2] = {{KILN_VALUE_TENSOR, {0}}, {KILN_VALUE_TENSOR, {0}}};
  kiln_value_t result = {KILN_VALUE_NULL, {0}}, logits = {KILN_VALUE_NULL, {0}};
  args[0].u.tensor = x;
  args[1].u.tensor = kv;
  kiln_status_t st = kiln_function_call(fn, args, 2, &result);
  if (st == KILN_OK) st = kiln_tuple_get_item(result.u.tuple, 0, &logits);
  if (st == KILN_OK) {
    const DLTensor* l = kiln_tensor_dltensor(logits.u.tensor);
    const float* v = (const float*)((const char*)l->data + l->byte_offset);
    int64_t best = 0;
    for (int64_t i = 1; i < l->shape[1]; i++)
      if (v[i] > v[best]) best = i;
    *next = best;
  }
  kiln_value_release(&logits);
  kiln_value_release(&result);
  return st;
}

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  int steps = atoi(argv[2]), n = argc - 4;
  const char* mode = argv[3];
  kiln_module_t *lib = NULL, *vm = NULL;
  kiln_function_t *load = NULL, *init = NULL, *create = NULL, *prefill = NULL, *decode = NULL;
  kiln_value_t v = {KILN_VALUE_NULL, {0}}, kv = {KILN_VALUE_NULL, {0}};
  kiln_tensor_t *prompt = NULL, *token = NULL;
  void* arena = NULL;
  uint64_t nbytes = 0;
  int rc = 1;
  if (kiln_module_load_library(argv[1], &lib) != KILN_OK ||
      kiln_module_get_function(lib, "load_executable", &load) != KILN_OK ||
      kiln_function_call(load, NULL, 0, &v) != KILN_OK)
    return fail("loading");
  vm = v.u.module;
  int64_t pshape[2] = {1, n}, tshape[2] = {1, 1};
  if (kiln_module_get_function(vm, "init", &init) != KILN_OK ||
      kiln_function_call(init, NULL, 0, NULL) != KILN_OK ||
      kiln_module_get_function(vm, "create_cache", &create) != KILN_OK ||
      kiln_module_get_function(vm, "prefill", &prefill) != KILN_OK ||
      kiln_module_get_function(vm, "decode", &decode) != KILN_OK ||
      kiln_tensor_create(pshape, 2, (DLDataType){kDLInt, 64, 1}, (DLDevice){kDLCPU, 0}, &prompt) != KILN_OK ||
      kiln_tensor_create(tshape, 2, (DLDataType){kDLInt, 64, 1}, (DLDevice){kDLCPU, 0}, &token) != KILN_OK) {
    rc = fail("setting up");
    goto done;
  }
  int misuse = strcmp(mode, "misuse") == 0;
  if (!misuse && kiln_function_call(create, NULL, 0, &kv) != KILN_OK) { /* on the heap: it outlives calls */
    rc = fail("create_cache");
    goto done;
  }
  if (strcmp(mode, "heap") != 0) {
    if (kiln_vm_arena_bytes(vm, &nbytes) != KILN_OK || kiln_memory_alloc((size_t)nbytes, &arena) != KILN_OK ||
        kiln_vm_set_arena(vm, arena, (size_t)nbytes) != KILN_OK) {
      rc = fail("the arena");
      goto done;
    }
  }
  if (misuse && kiln_function_call(create, NULL, 0, &kv) != KILN_OK) { /* in the arena: a mistake */
    rc = fail("create_cache");
    goto done;
  }
  int64_t* p = (int64_t*)kiln_tensor_dltensor(prompt)->data;
  for (int i = 0; i < n; i++) p[i] = atoll(argv[4 + i]);
  int64_t next = 0;
  if (step(prefill, prompt, kv.u.tensor, &next) != KILN_OK) {
    rc = fail("prefill");
    goto done;
  }
  int64_t* t = (int64_t*)kiln_tensor_dltensor(token)->data;
  for (int k = 0; k < steps; k++) {
    printf(k ? " %lld" : "%lld", (long long)next);
    if (k + 1 == steps) break;
    *t = next;
    counting = k >= 1;
    kiln_status_t st = step(decode, token, kv.u.tensor, &next);
    counting = 0;
    if (st != KILN_OK) {
      rc = fail("decode");
      goto done;
    }
  }
  printf("\nheap calls in %d decodes: %ld\n", steps > 2 ? steps - 2 : 0, calls);
  rc = 0;
done:
  kiln_value_release(&kv);
  kiln_tensor_release(prompt);
  kiln_tensor_release(token);
  kiln_function_release(load);
  kiln_function_release(init);
  kiln_function_release(create);
  kiln_function_release(prefill);
  kiln_function_release(decode);
  kiln_module_release(vm);
  kiln_module_release(lib);
  kiln_memory_free(arena);
  return rc;
}
