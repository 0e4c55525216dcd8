/* A host application's thread pool under a VM (kiln_vm_set_thread_pool) and per-VM thread
 * counts (kiln_vm_set_num_threads), on a model with parallel loops.
 *
 *   host_pool_test <model.so> <x.bin> <n_in> <n_out>
 * The model's forward takes x (float32, n_in elements) and returns n_out floats. Prints:
 *   capped <launches> <max_tasks>     host pool (8 threads), VM capped at 3 threads
 *   uncapped <launches> <max_tasks>   host pool, no cap
 *   other_vm <launches>               a second VM on the runtime's pool: the host sees nothing
 *   errors <ok>                       bad arguments are refused with messages
 *   out v0 v1 ...                     the capped run's output */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

typedef struct {
  int launches;
  int64_t max_tasks;
} host_pool_t;

/* The host's "pool": runs the tasks one after the other on the calling thread, counting. */
static int32_t host_launch(void* pool, kiln_task_fn fn, void* closure, int64_t num_tasks) {
  host_pool_t* p = pool;
  p->launches++;
  if (num_tasks > p->max_tasks) p->max_tasks = num_tasks;
  for (int64_t t = 0; t < num_tasks; ++t) {
    int32_t rc = fn(t, num_tasks, closure);
    if (rc != 0) return rc;
  }
  return 0;
}

#define CHECK(call)                                                                     \
  do {                                                                                  \
    kiln_status_t st_ = (call);                                                         \
    if (st_ != KILN_OK) {                                                               \
      fprintf(stderr, "%s failed: %s\n", #call, kiln_last_error());                     \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

static kiln_module_t* make_vm(kiln_module_t* lib) {
  kiln_function_t *load = NULL, *init = NULL;
  kiln_value_t vm = {KILN_VALUE_NULL, {0}};
  CHECK(kiln_module_get_function(lib, "load_executable", &load));
  CHECK(kiln_function_call(load, NULL, 0, &vm));
  kiln_function_release(load);
  CHECK(kiln_module_get_function(vm.u.module, "init", &init));
  CHECK(kiln_function_call(init, NULL, 0, NULL));
  kiln_function_release(init);
  return vm.u.module;
}

static void forward(kiln_module_t* vm, kiln_tensor_t* x, float* out, int n_out) {
  kiln_function_t* f = NULL;
  kiln_value_t arg = {KILN_VALUE_TENSOR, {0}}, result = {KILN_VALUE_NULL, {0}};
  arg.u.tensor = x;
  CHECK(kiln_module_get_function(vm, "forward", &f));
  CHECK(kiln_function_call(f, &arg, 1, &result));
  memcpy(out, kiln_tensor_dltensor(result.u.tensor)->data, sizeof(float) * (size_t)n_out);
  kiln_value_release(&result);
  kiln_function_release(f);
}

int main(int argc, char** argv) {
  if (argc != 5) return 2;
  int n_in = atoi(argv[3]), n_out = atoi(argv[4]);
  kiln_module_t* lib = NULL;
  CHECK(kiln_module_load_library(argv[1], &lib));
  int64_t shape[1] = {n_in};
  DLDataType f32 = {kDLFloat, 32, 1};
  DLDevice cpu = {kDLCPU, 0};
  kiln_tensor_t* x = NULL;
  CHECK(kiln_tensor_create(shape, 1, f32, cpu, &x));
  FILE* f = fopen(argv[2], "rb");
  if (!f || fread(kiln_tensor_dltensor(x)->data, sizeof(float), (size_t)n_in, f) != (size_t)n_in) return 1;
  fclose(f);
  float* out = malloc(sizeof(float) * (size_t)n_out);

  host_pool_t host = {0, 0};
  kiln_thread_pool_t pool = {8, &host, host_launch};
  kiln_module_t* vm = make_vm(lib);
  CHECK(kiln_vm_set_thread_pool(vm, &pool));
  CHECK(kiln_vm_set_num_threads(vm, 3));
  forward(vm, x, out, n_out);
  printf("capped %d %lld\n", host.launches, (long long)host.max_tasks);

  host.launches = 0;
  host.max_tasks = 0;
  CHECK(kiln_vm_set_num_threads(vm, 0));
  float* again = malloc(sizeof(float) * (size_t)n_out);
  forward(vm, x, again, n_out);
  printf("uncapped %d %lld\n", host.launches, (long long)host.max_tasks);

  host.launches = 0;
  kiln_module_t* other = make_vm(lib);
  forward(other, x, again, n_out);
  printf("other_vm %d\n", host.launches);

  kiln_thread_pool_t bad = {0, &host, host_launch};
  int ok = kiln_vm_set_thread_pool(vm, &bad) == KILN_ERR_INVALID_ARGUMENT &&
           strstr(kiln_last_error(), "num_threads >= 1") != NULL &&
           kiln_vm_set_num_threads(lib, 2) == KILN_ERR_INVALID_ARGUMENT &&
           strstr(kiln_last_error(), "expected a VM module") != NULL &&
           kiln_vm_set_num_threads(vm, -1) == KILN_ERR_INVALID_ARGUMENT &&
           kiln_vm_set_thread_pool(vm, NULL) == KILN_OK;
  printf("errors %d\n", ok);
  printf("out");
  for (int i = 0; i < n_out; ++i) printf(" %.9g", out[i]);
  printf("\n");
  free(out);
  free(again);
  kiln_tensor_release(x);
  kiln_module_release(other);
  kiln_module_release(vm);
  kiln_module_release(lib);
  return 0;
}
