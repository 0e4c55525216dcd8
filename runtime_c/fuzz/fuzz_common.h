/* fuzz_common.h — what the libFuzzer targets share: the kernel libraries whose tables the fuzzed
 * blobs are loaded against (dlopen'ed once), the argument pool, and the external function the
 * seed executables call. Built only into the fuzz targets (runtime_c/fuzz/Makefile). */
#ifndef KILN_FUZZ_COMMON_H_
#define KILN_FUZZ_COMMON_H_

#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

#define FUZZ_MAX_LIBS 16

/* The kernel tables of the libraries named in $KILN_FUZZ_LIBS (':'-separated .so paths: the
 * real models the seeds came from, and the fixture kernels). A blob's kernels are resolved by
 * name in the table it is loaded with, so each input is tried against every table. */
static const kiln_library_info_t* g_libs[FUZZ_MAX_LIBS];
static int g_num_libs;

/* Arguments the seed models take: MLP x[1, 64], CNN x[1, 3, 16, 16], If (flag, x[2, 4]),
 * symbolic x[5, 64], fixture x[8] and x[5], derived (a[3], b[9]). */
#define FUZZ_NUM_TENSORS 9
static kiln_tensor_t* g_tensors[FUZZ_NUM_TENSORS];

/* test.relu_shift(c, out): out = max(c - 3, 0), the fixture executable's external function;
 * checks everything it is given, since a mutated program passes it anything. */
static kiln_status_t fuzz_relu_shift(void* ctx, const kiln_value_t* args, int32_t num_args,
                                     kiln_value_t* out_result) {
  (void)ctx, (void)out_result;
  if (num_args != 2 || args[0].kind != KILN_VALUE_TENSOR || args[1].kind != KILN_VALUE_TENSOR)
    return kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT, "relu_shift: expected two tensors");
  const DLTensor* c = kiln_tensor_dltensor(args[0].u.tensor);
  const DLTensor* out = kiln_tensor_dltensor(args[1].u.tensor);
  if (kiln_tensor_nbytes(args[0].u.tensor) != kiln_tensor_nbytes(args[1].u.tensor) ||
      c->dtype.code != kDLFloat || c->dtype.bits != 32 || out->dtype.code != kDLFloat ||
      out->dtype.bits != 32 || c->dtype.lanes != 1 || out->dtype.lanes != 1 ||
      kiln_tensor_is_read_only(args[1].u.tensor))
    return kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT, "relu_shift: bad tensors");
  size_t n = kiln_tensor_nbytes(args[0].u.tensor) / 4;
  for (size_t i = 0; i < n; ++i) {
    float v = ((const float*)((const char*)c->data + c->byte_offset))[i] - 3.0f;
    ((float*)((char*)out->data + out->byte_offset))[i] = v > 0 ? v : 0;
  }
  return KILN_OK;
}

static kiln_tensor_t* fuzz_tensor(int32_t ndim, const int64_t* shape, DLDataType dtype) {
  kiln_tensor_t* t = NULL;
  DLDevice cpu = {kDLCPU, 0};
  if (kiln_tensor_create(shape, ndim, dtype, cpu, &t) != KILN_OK) abort();
  memset(kiln_tensor_dltensor(t)->data, 0, kiln_tensor_nbytes(t));
  return t;
}

static void fuzz_setup(void) {
  const DLDataType f32 = {kDLFloat, 32, 1}, b8 = {kDLBool, 8, 1};
  const int64_t s1x64[] = {1, 64}, cnn[] = {1, 3, 16, 16}, s2x4[] = {2, 4}, s5x64[] = {5, 64},
                s8[] = {8}, s5[] = {5}, s3[] = {3}, s9[] = {9};
  g_tensors[0] = fuzz_tensor(2, s1x64, f32);
  g_tensors[1] = fuzz_tensor(4, cnn, f32);
  g_tensors[2] = fuzz_tensor(0, NULL, b8);
  g_tensors[3] = fuzz_tensor(2, s2x4, f32);
  g_tensors[4] = fuzz_tensor(2, s5x64, f32);
  g_tensors[5] = fuzz_tensor(1, s8, f32);
  g_tensors[6] = fuzz_tensor(1, s5, f32);
  g_tensors[7] = fuzz_tensor(1, s3, f32);
  g_tensors[8] = fuzz_tensor(1, s9, f32);
  kiln_function_t* relu = NULL;
  if (kiln_function_create("relu_shift", fuzz_relu_shift, NULL, NULL, &relu) != KILN_OK ||
      kiln_register_function("test.relu_shift", relu, 1) != KILN_OK)
    abort();
  kiln_function_release(relu);
  const char* libs = getenv("KILN_FUZZ_LIBS");
  char* copy = strdup(libs ? libs : "");
  for (char* save = NULL, *p = strtok_r(copy, ":", &save); p && g_num_libs < FUZZ_MAX_LIBS;
       p = strtok_r(NULL, ":", &save)) {
    void* h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    const kiln_library_info_t* info = h ? dlsym(h, "kiln_library_info") : NULL;
    if (!info) {
      fprintf(stderr, "KILN_FUZZ_LIBS: cannot load the kernel table of %s\n", p);
      abort();
    }
    g_libs[g_num_libs++] = info; /* kept loaded for the whole run */
  }
  free(copy);
}

static kiln_value_t fuzz_tv(kiln_tensor_t* t) {
  kiln_value_t v;
  v.kind = KILN_VALUE_TENSOR;
  v.u.tensor = t;
  return v;
}

/* Calls every function of a VM with each argument list of the pool: the seeds' own signatures
 * run their whole program, mutated signatures mostly fail the argument checks. */
static void fuzz_run_vm(kiln_module_t* vm) {
  kiln_function_t* init = NULL;
  if (kiln_module_get_function(vm, "init", &init) != KILN_OK) return;
  kiln_status_t st = kiln_function_call(init, NULL, 0, NULL);
  kiln_function_release(init);
  if (st != KILN_OK) return;
  kiln_value_t lists[][2] = {
      {fuzz_tv(g_tensors[0])}, {fuzz_tv(g_tensors[1])}, {fuzz_tv(g_tensors[2]), fuzz_tv(g_tensors[3])},
      {fuzz_tv(g_tensors[4])}, {fuzz_tv(g_tensors[5])}, {fuzz_tv(g_tensors[6])},
      {fuzz_tv(g_tensors[7]), fuzz_tv(g_tensors[8])}};
  const int32_t counts[] = {1, 1, 2, 1, 1, 1, 2};
  int32_t n = kiln_module_num_functions(vm);
  for (int32_t f = 0; f < n; ++f) {
    const char* name = kiln_module_function_name(vm, f);
    if (!name || strcmp(name, "init") == 0) continue;
    kiln_function_t* fn = NULL;
    if (kiln_module_get_function(vm, name, &fn) != KILN_OK) continue;
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k) {
      kiln_value_t r = {KILN_VALUE_NULL, {0}};
      if (strcmp(name, "profile") == 0) {
        /* profile(name, args...) of every other function: the first argument is a string */
        for (int32_t g = 0; g < n; ++g) {
          kiln_value_t args[3];
          args[0].kind = KILN_VALUE_STRING;
          args[0].u.s = kiln_module_function_name(vm, g);
          memcpy(args + 1, lists[k], sizeof lists[k]);
          if (kiln_function_call(fn, args, counts[k] + 1, &r) == KILN_OK) kiln_value_release(&r);
        }
      } else if (kiln_function_call(fn, lists[k], counts[k], &r) == KILN_OK) {
        kiln_value_release(&r);
      } else if (kiln_last_error()[0] == '\0') {
        abort(); /* every failure must come with a message */
      }
    }
    kiln_function_release(fn);
  }
}

/* The blob from the library module `lib` (already holding it): load_executable and run. */
static void fuzz_load_and_run(kiln_module_t* lib) {
  kiln_function_t* loader = NULL;
  if (kiln_module_get_function(lib, "load_executable", &loader) != KILN_OK) return;
  kiln_value_t v = {KILN_VALUE_NULL, {0}};
  if (kiln_function_call(loader, NULL, 0, &v) == KILN_OK) {
    fuzz_run_vm(v.u.module);
    kiln_value_release(&v);
  } else if (kiln_last_error()[0] == '\0') {
    abort();
  }
  kiln_function_release(loader);
}

#endif /* KILN_FUZZ_COMMON_H_ */
