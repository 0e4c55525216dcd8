/*
 * static_app.c (tests/cross): one program holding a model exported with
 * Executable.export_static(dir, "m") and the static runtime: no dlopen, no model file. Runs
 * graph function "main" on x of shape (2, 16), x[i] = ((i * 7) % 19 - 9) / 16 (exact in
 * float32), and prints the output's values, one per line (%.9g).
 */
#include <stdio.h>

#include "kiln_runtime.h"
#include "m.h"

static int fail(const char* what) {
  fprintf(stderr, "static_app: %s: %s\n", what, kiln_last_error());
  return 1;
}

int main(void) {
  kiln_module_t* lib = NULL;
  kiln_function_t *load = NULL, *init = NULL, *fn = NULL;
  kiln_value_t vm = {KILN_VALUE_NULL, {0}}, out = {KILN_VALUE_NULL, {0}}, arg;
  kiln_tensor_t* x = NULL;
  int rc = 1;
  const int64_t shape[2] = {2, 16};
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
  arg.kind = KILN_VALUE_TENSOR;
  arg.u.tensor = x;
  if (kiln_function_call(fn, &arg, 1, &out) != KILN_OK) { rc = fail("main"); goto done; }
  const DLTensor* y = kiln_tensor_dltensor(out.u.tensor);
  const float* yd = (const float*)y->data;
  for (size_t i = 0; i < kiln_tensor_nbytes(out.u.tensor) / sizeof(float); ++i) printf("%.9g\n", yd[i]);
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
