/*
 * static_app.c: one self-contained executable that runs the MLP of examples/mlp.py, linked
 * statically: the model (mlp.a + mlp.h, from Executable.export_static(dir, name="mlp")) and the
 * runtime (libkiln_runtime.a). No dlopen and no file: the kernels and the executable blob are in
 * the program, and the inputs are computed here.
 *
 *   cc -std=c99 -I<model dir> -Iruntime_c/include static_app.c <model dir>/mlp.a \
 *      runtime_c/build/libkiln_runtime.a -lm -lpthread -o static_app
 *
 * Built-in data (all values exact in float32, so any other implementation can rebuild them):
 *   argument k, element i (C order) = ((i * (7 + 2k) + k) % 17 - 8) / 128, except the input
 *   x (k = 0): (i % 13) / 16.
 * Output: as run_model ("output 0: float32 (1, 10)", then the values).
 */
#include <stdio.h>

#include "kiln_runtime.h"
#include "mlp.h"

#define NUM_ARGS 5

static const int64_t kShapes[NUM_ARGS][2] = {{1, 784}, {256, 784}, {1, 256}, {10, 256}, {1, 10}};
static const int32_t kNdim[NUM_ARGS] = {2, 2, 1, 2, 1};  /* biases are 1-D: their extent is [k][1] */

static int fail(const char* what, kiln_status_t status) {
  fprintf(stderr, "static_app: %s: %s [%s]\n", what, kiln_last_error(), kiln_status_string(status));
  return 1;
}

static kiln_status_t call(kiln_module_t* module, const char* name, const kiln_value_t* args,
                          int32_t num_args, kiln_value_t* out_result) {
  kiln_function_t* fn = NULL;
  kiln_status_t st = kiln_module_get_function(module, name, &fn);
  if (st == KILN_OK) st = kiln_function_call(fn, args, num_args, out_result);
  kiln_function_release(fn);
  return st;
}

int main(void) {
  kiln_module_t* lib = NULL;
  kiln_value_t vm = {KILN_VALUE_NULL, {0}}, result = {KILN_VALUE_NULL, {0}};
  kiln_value_t args[NUM_ARGS];
  int num_args = 0, rc = 1;
  kiln_status_t st;

  if ((st = kiln_model_mlp_create(&lib)) != KILN_OK) return fail("kiln_model_mlp_create", st);
  if ((st = call(lib, "load_executable", NULL, 0, &vm)) != KILN_OK) {
    rc = fail("load_executable", st);
    goto done;
  }
  if ((st = call(vm.u.module, "init", NULL, 0, NULL)) != KILN_OK) {  /* no argument: cpu */
    rc = fail("init", st);
    goto done;
  }
  for (int k = 0; k < NUM_ARGS; k++) {
    const int64_t* shape = kNdim[k] == 2 ? kShapes[k] : &kShapes[k][1];
    kiln_tensor_t* t = NULL;
    float* data;
    size_t n;
    st = kiln_tensor_create(shape, kNdim[k], (DLDataType){kDLFloat, 32, 1}, (DLDevice){kDLCPU, 0}, &t);
    if (st != KILN_OK) {
      rc = fail("kiln_tensor_create", st);
      goto done;
    }
    args[num_args].kind = KILN_VALUE_TENSOR;
    args[num_args++].u.tensor = t;
    data = (float*)kiln_tensor_dltensor(t)->data;
    n = kiln_tensor_nbytes(t) / sizeof(float);
    for (size_t i = 0; i < n; i++)
      data[i] = k == 0 ? (float)(i % 13) / 16.0f
                       : (float)((long)((i * (size_t)(7 + 2 * k) + (size_t)k) % 17) - 8) / 128.0f;
  }
  if ((st = call(vm.u.module, "forward", args, num_args, &result)) != KILN_OK) {
    rc = fail("forward", st);
    goto done;
  }
  if (result.kind != KILN_VALUE_TENSOR) {
    fprintf(stderr, "static_app: forward did not return a tensor\n");
    goto done;
  }
  {
    const DLTensor* y = kiln_tensor_dltensor(result.u.tensor);
    const float* v = (const float*)((const char*)y->data + y->byte_offset);
    printf("output 0: float32 (%lld, %lld)\n", (long long)y->shape[0], (long long)y->shape[1]);
    for (int64_t i = 0; i < y->shape[0] * y->shape[1]; i++) printf(i ? " %.9g" : "%.9g", (double)v[i]);
    printf("\n");
  }
  rc = 0;

done:
  kiln_value_release(&result);
  for (int i = 0; i < num_args; i++) kiln_tensor_release(args[i].u.tensor);
  kiln_value_release(&vm);
  kiln_module_release(lib);
  return rc;
}
