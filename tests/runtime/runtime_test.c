/* runtime_test.c — exercises the C API directly, built with -fsanitize=address,undefined against
 * the runtime's asan build (which has allocation-failure injection). Run by test_c_api.py:
 *   runtime_test FIXTURE.so BAD_ABI.so NO_INFO.so
 * Prints "ALL OK" and exits 0 when every check passes. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

void kiln_testing_fail_allocations_after(int64_t count); /* KILN_FAULT_INJECTION builds */

#include "check.h"

static const DLDevice kCPU = {kDLCPU, 0};
static const DLDataType kF32 = {kDLFloat, 32, 1};
static const DLDataType kF64 = {kDLFloat, 64, 1};
static const DLDataType kI32 = {kDLInt, 32, 1};
static const DLDataType kI64 = {kDLInt, 64, 1};

static kiln_tensor_t* tensor(DLDataType dtype, int32_t ndim, int64_t d0, int64_t d1) {
  int64_t shape[2] = {d0, d1};
  kiln_tensor_t* t = NULL;
  CHECK_OK(kiln_tensor_create(shape, ndim, dtype, kCPU, &t));
  return t;
}

static void* data(kiln_tensor_t* t) { return kiln_tensor_dltensor(t)->data; }

static kiln_value_t tv(kiln_tensor_t* t) {
  kiln_value_t v;
  v.kind = KILN_VALUE_TENSOR;
  v.u.tensor = t;
  return v;
}

static kiln_function_t* function(kiln_module_t* mod, const char* name) {
  kiln_function_t* fn = NULL;
  CHECK_OK(kiln_module_get_function(mod, name, &fn));
  return fn;
}

static void test_loading(const char* bad_abi, const char* no_info) {
  kiln_module_t* mod = NULL;
  CHECK_ERROR(kiln_module_load_library("/nonexistent/lib.so", &mod), KILN_ERR_IO,
              "cannot load library '/nonexistent/lib.so'");
  CHECK_ERROR(kiln_module_load_library(bad_abi, &mod), KILN_ERR_VERSION_MISMATCH,
              "has kernel ABI version 99, this runtime supports 3");
  CHECK_ERROR(kiln_module_load_library(no_info, &mod), KILN_ERR_INVALID_FORMAT,
              "has no 'kiln_library_info' symbol");
  CHECK_ERROR(kiln_module_load_library(NULL, &mod), KILN_ERR_INVALID_ARGUMENT, "NULL");
  CHECK(mod == NULL); /* outputs are written on success only */
}

static void test_kernel_calls(kiln_module_t* mod) {
  CHECK(strcmp(kiln_module_kind(mod), "library") == 0);
  CHECK(kiln_module_num_functions(mod) == 5);
  CHECK(strcmp(kiln_module_function_name(mod, 0), "main") == 0);
  CHECK(kiln_module_function_name(mod, 5) == NULL);
  kiln_function_t* fn = NULL;
  CHECK_ERROR(kiln_module_get_function(mod, "nope", &fn), KILN_ERR_NOT_FOUND,
              "has no function 'nope'; its functions: main, scale, rowsum, threads, fail");

  kiln_function_t* main_fn = function(mod, "main");
  CHECK(strcmp(kiln_function_name(main_fn), "main") == 0);
  kiln_tensor_t* a = tensor(kF32, 1, 8, 0);
  kiln_tensor_t* b = tensor(kF32, 1, 8, 0);
  for (int i = 0; i < 8; ++i) ((float*)data(a))[i] = (float)i;
  kiln_value_t args[2] = {tv(a), tv(b)};
  kiln_value_t result;
  result.kind = -1;
  CHECK_OK(kiln_function_call(main_fn, args, 2, &result));
  CHECK(result.kind == KILN_VALUE_NULL);
  for (int i = 0; i < 8; ++i) CHECK(((float*)data(b))[i] == (float)i + 1.0f);

  /* every argument check, with its message */
  CHECK_ERROR(kiln_function_call(main_fn, args, 1, NULL), KILN_ERR_INVALID_ARGUMENT,
              "main: expected 2 arguments, got 1");
  kiln_value_t ints[2] = {{KILN_VALUE_INT, {3}}, tv(b)};
  CHECK_ERROR(kiln_function_call(main_fn, ints, 2, NULL), KILN_ERR_INVALID_ARGUMENT,
              "main: argument 0 'A' expected a tensor, got int");
  kiln_tensor_t* a_i32 = tensor(kI32, 1, 8, 0);
  kiln_value_t wrong_dtype[2] = {tv(a_i32), tv(b)};
  CHECK_ERROR(kiln_function_call(main_fn, wrong_dtype, 2, NULL), KILN_ERR_DTYPE_MISMATCH,
              "main: argument 0 'A' expected dtype float32, got int32");
  kiln_tensor_t* b9 = tensor(kF32, 1, 9, 0);
  kiln_value_t wrong_shape[2] = {tv(a), tv(b9)};
  CHECK_ERROR(kiln_function_call(main_fn, wrong_shape, 2, NULL), KILN_ERR_SHAPE_MISMATCH,
              "main: argument 1 'B' expected shape (8,), got (9,)");
  kiln_tensor_t* a2d = tensor(kF32, 2, 2, 4);
  kiln_value_t wrong_ndim[2] = {tv(a2d), tv(b)};
  CHECK_ERROR(kiln_function_call(main_fn, wrong_ndim, 2, NULL), KILN_ERR_SHAPE_MISMATCH,
              "main: argument 0 'A' expected shape (8,), got (2, 4)");
  /* a strided view: every other element of a 16-float buffer */
  float buffer[16];
  int64_t shape8[1] = {8}, stride2[1] = {2};
  DLTensor view = {buffer, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape8, stride2, 0};
  kiln_tensor_t* strided = NULL;
  CHECK_OK(kiln_tensor_wrap(&view, NULL, NULL, &strided));
  kiln_value_t not_contiguous[2] = {tv(strided), tv(b)};
  CHECK_ERROR(kiln_function_call(main_fn, not_contiguous, 2, NULL), KILN_ERR_INVALID_ARGUMENT,
              "main: argument 0 'A' is not contiguous (shape (8,), strides (2,))");
  DLTensor on_gpu = view;
  on_gpu.device.device_type = kDLCUDA;
  on_gpu.strides = NULL;
  kiln_tensor_t* gpu = NULL;
  CHECK_OK(kiln_tensor_wrap(&on_gpu, NULL, NULL, &gpu));
  kiln_value_t wrong_device[2] = {tv(gpu), tv(b)};
  CHECK_ERROR(kiln_function_call(main_fn, wrong_device, 2, NULL), KILN_ERR_DEVICE_MISMATCH,
              "main: argument 0 'A' expected device cpu, got cuda:0");

  /* symbolic dimensions */
  kiln_function_t* scale = function(mod, "scale");
  kiln_tensor_t* x = tensor(kF32, 1, 1000, 0);
  kiln_tensor_t* y = tensor(kF32, 1, 1000, 0);
  for (int i = 0; i < 1000; ++i) ((float*)data(x))[i] = (float)i;
  kiln_value_t scale_args[2] = {tv(x), tv(y)};
  CHECK_OK(kiln_function_call(scale, scale_args, 2, NULL));
  for (int i = 0; i < 1000; ++i) CHECK(((float*)data(y))[i] == 2.0f * (float)i);
  kiln_value_t scale_mismatch[2] = {tv(x), tv(b)};
  CHECK_ERROR(kiln_function_call(scale, scale_mismatch, 2, NULL), KILN_ERR_SHAPE_MISMATCH,
              "scale: argument 1 'B' expected shape (n,) with n = 1000 (from argument 0 'A'), got (8,)");
  kiln_function_t* rowsum = function(mod, "rowsum");
  kiln_tensor_t* m = tensor(kF64, 2, 3, 4);
  kiln_tensor_t* sums = tensor(kF64, 1, 3, 0);
  for (int i = 0; i < 12; ++i) ((double*)data(m))[i] = i;
  kiln_value_t rowsum_args[2] = {tv(m), tv(sums)};
  CHECK_OK(kiln_function_call(rowsum, rowsum_args, 2, NULL));
  CHECK(((double*)data(sums))[0] == 6 && ((double*)data(sums))[2] == 38);
  kiln_tensor_t* sums4 = tensor(kF64, 1, 4, 0);
  kiln_value_t rowsum_bad[2] = {tv(m), tv(sums4)};
  CHECK_ERROR(kiln_function_call(rowsum, rowsum_bad, 2, NULL), KILN_ERR_SHAPE_MISMATCH,
              "rowsum: argument 1 'B' expected shape (m,) with m = 3 (from argument 0 'A'), got (4,)");

  /* a kernel's failure, through a parallel loop */
  kiln_function_t* fail = function(mod, "fail");
  kiln_tensor_t* code = tensor(kI32, 1, 1, 0);
  *(int32_t*)data(code) = 7;
  kiln_value_t fail_args[1] = {tv(code)};
  CHECK_ERROR(kiln_function_call(fail, fail_args, 1, NULL), KILN_ERR_RUNTIME,
              "fail: kernel returned error code 7");

  kiln_function_release(fail);
  kiln_function_release(rowsum);
  kiln_function_release(scale);
  kiln_function_release(main_fn);
  kiln_tensor_t* all[] = {a, b, a_i32, b9, a2d, strided, gpu, x, y, m, sums, sums4, code};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) kiln_tensor_release(all[i]);
}

static void probe_threads(kiln_function_t* threads, int64_t num_tasks, int64_t wait,
                          int64_t out[4]) {
  kiln_tensor_t* t = tensor(kI64, 1, 4, 0);
  int64_t* p = data(t);
  p[0] = num_tasks;
  p[1] = wait;
  kiln_value_t arg = tv(t);
  CHECK_OK(kiln_function_call(threads, &arg, 1, NULL));
  memcpy(out, p, 4 * sizeof(int64_t));
  kiln_tensor_release(t);
}

typedef struct {
  kiln_function_t* scale;
  int ok;
} hammer_t;

/* Several threads calling the same parallel kernel at once. */
static void* hammer(void* arg) {
  hammer_t* h = arg;
  kiln_tensor_t* x = tensor(kF32, 1, 257, 0);
  kiln_tensor_t* y = tensor(kF32, 1, 257, 0);
  for (int i = 0; i < 257; ++i) ((float*)data(x))[i] = (float)i;
  kiln_value_t args[2] = {tv(x), tv(y)};
  h->ok = 1;
  for (int round = 0; round < 50; ++round) {
    memset(data(y), 0, 257 * sizeof(float));
    h->ok &= kiln_function_call(h->scale, args, 2, NULL) == KILN_OK;
    for (int i = 0; i < 257; ++i) h->ok &= ((float*)data(y))[i] == 2.0f * (float)i;
  }
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  return NULL;
}

static void test_thread_pool(kiln_module_t* mod) {
  int64_t out[4];
  kiln_function_t* threads = function(mod, "threads");
  CHECK_OK(kiln_set_num_threads(2));
  CHECK(kiln_get_num_threads() == 2);
  probe_threads(threads, 2, 1, out);
  CHECK(out[0] == 2 && out[1] == 2 && out[2] == 1);
  probe_threads(threads, 16, 0, out); /* more tasks than threads */
  CHECK(out[0] >= 1 && out[0] <= 2 && out[2] == 1);
  CHECK_OK(kiln_set_num_threads(1));
  probe_threads(threads, 4, 0, out);
  CHECK(out[0] == 1 && out[1] == 1 && out[2] == 1);
  CHECK_OK(kiln_set_num_threads(3));
  probe_threads(threads, 3, 1, out);
  CHECK(out[0] == 3 && out[1] == 3);
  CHECK_ERROR(kiln_set_num_threads(-1), KILN_ERR_INVALID_ARGUMENT, "negative");
  CHECK_OK(kiln_set_num_threads(0));
  CHECK(kiln_get_num_threads() >= 1);

  CHECK_OK(kiln_set_num_threads(2));
  hammer_t h[4];
  pthread_t tids[4];
  for (int i = 0; i < 4; ++i) {
    h[i].scale = function(mod, "scale");
    pthread_create(&tids[i], NULL, hammer, &h[i]);
  }
  for (int i = 0; i < 4; ++i) {
    pthread_join(tids[i], NULL);
    CHECK(h[i].ok);
    kiln_function_release(h[i].scale);
  }
  kiln_function_release(threads);
}

static int g_deleted;
static void count_delete(void* ctx) { g_deleted += *(int*)ctx; }

static void test_tensors_and_dlpack(void) {
  kiln_tensor_t* t = NULL;
  int64_t bad_shape[2] = {2, -1};
  CHECK_ERROR(kiln_tensor_create(bad_shape, 2, kF32, kCPU, &t), KILN_ERR_INVALID_ARGUMENT,
              "negative extent in shape (2, -1)");
  DLDevice gpu = {kDLCUDA, 0};
  CHECK_ERROR(kiln_tensor_create(bad_shape, 1, kF32, gpu, &t), KILN_ERR_UNSUPPORTED,
              "cannot allocate on device cuda:0");
  int64_t huge[2] = {INT64_MAX, INT64_MAX};
  CHECK_ERROR(kiln_tensor_create(huge, 2, kF32, kCPU, &t), KILN_ERR_INVALID_ARGUMENT, "overflows");
  CHECK(t == NULL);

  t = tensor(kF32, 2, 3, 5);
  DLTensor* dl = kiln_tensor_dltensor(t);
  CHECK(((uintptr_t)dl->data % KILN_ALIGNMENT) == 0);
  CHECK(dl->strides[0] == 5 && dl->strides[1] == 1);
  CHECK(kiln_tensor_nbytes(t) == 60);
  kiln_tensor_t* empty = tensor(kF32, 2, 0, 5);
  CHECK(kiln_tensor_nbytes(empty) == 0);
  kiln_tensor_release(empty);

  /* export: the consumer's deleter drops the last reference */
  DLManagedTensorVersioned* mt = NULL;
  CHECK_OK(kiln_tensor_to_dlpack(t, &mt));
  CHECK(mt->version.major == 1 && mt->version.minor == 1 && mt->flags == 0);
  CHECK(mt->dl_tensor.data == dl->data && mt->dl_tensor.shape[1] == 5);
  DLManagedTensor* legacy = NULL;
  CHECK_OK(kiln_tensor_to_dlpack_legacy(t, &legacy));
  kiln_tensor_release(t);
  ((float*)mt->dl_tensor.data)[14] = 3.5f; /* still alive: the exports hold references */
  legacy->deleter(legacy);

  /* import: a round trip shares memory, and the producer's deleter runs exactly once */
  kiln_tensor_t* back = NULL;
  CHECK_OK(kiln_tensor_from_dlpack(mt, &back));
  CHECK(((float*)kiln_tensor_dltensor(back)->data)[14] == 3.5f);
  kiln_tensor_release(back); /* calls mt->deleter, which frees the original tensor */

  DLManagedTensorVersioned future = {{2, 0}, NULL, NULL, 0, {0}};
  CHECK_ERROR(kiln_tensor_from_dlpack(&future, &back), KILN_ERR_VERSION_MISMATCH,
              "DLPack version 2.0 is not supported");

  float external[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3};
  DLTensor ext = {external, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
  int weight = 1;
  kiln_tensor_t* wrapped = NULL;
  g_deleted = 0;
  CHECK_OK(kiln_tensor_wrap(&ext, count_delete, &weight, &wrapped));
  CHECK(kiln_tensor_dltensor(wrapped)->strides[0] == 3); /* NULL strides become compact ones */
  kiln_tensor_retain(wrapped);
  kiln_tensor_release(wrapped);
  CHECK(g_deleted == 0);
  kiln_tensor_release(wrapped);
  CHECK(g_deleted == 1);
  ext.data = NULL;
  CHECK_ERROR(kiln_tensor_wrap(&ext, count_delete, &weight, &wrapped), KILN_ERR_INVALID_ARGUMENT,
              "data is NULL");
  CHECK(g_deleted == 1); /* not called on failure */
}

/* A callback function: returns its first argument, or a string when given none. */
static kiln_status_t echo(void* ctx, const kiln_value_t* args, int32_t num_args,
                          kiln_value_t* out_result) {
  (void)ctx;
  if (num_args == 0) return kiln_value_from_string("hello", out_result);
  if (args[0].kind == KILN_VALUE_NULL) return kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT, "echo: null");
  return kiln_value_copy(&args[0], out_result);
}

static void test_values_and_callbacks(kiln_module_t* mod) {
  int weight = 10;
  g_deleted = 0;
  kiln_function_t* fn = NULL;
  CHECK_OK(kiln_function_create("echo", echo, &weight, count_delete, &fn));
  kiln_value_t result;
  CHECK_OK(kiln_function_call(fn, NULL, 0, &result));
  CHECK(result.kind == KILN_VALUE_STRING && strcmp(result.u.s, "hello") == 0);
  kiln_value_release(&result);
  CHECK(result.kind == KILN_VALUE_NULL);
  kiln_value_t arg;
  arg.kind = KILN_VALUE_MODULE;
  arg.u.module = mod;
  CHECK_OK(kiln_function_call(fn, &arg, 1, &result));
  CHECK(result.kind == KILN_VALUE_MODULE && result.u.module == mod);
  kiln_value_release(&result);
  arg.kind = KILN_VALUE_FLOAT;
  arg.u.f = 2.5;
  CHECK_OK(kiln_function_call(fn, &arg, 1, &result));
  CHECK(result.kind == KILN_VALUE_FLOAT && result.u.f == 2.5);
  arg.kind = KILN_VALUE_NULL;
  CHECK_ERROR(kiln_function_call(fn, &arg, 1, &result), KILN_ERR_INVALID_ARGUMENT, "echo: null");
  CHECK_ERROR(kiln_function_call(fn, NULL, 2, &result), KILN_ERR_INVALID_ARGUMENT,
              "echo: invalid argument array");
  kiln_function_release(fn);
  CHECK(g_deleted == 10);
  CHECK(strcmp(kiln_status_string(KILN_ERR_SHAPE_MISMATCH), "shape mismatch") == 0);
  CHECK(kiln_set_last_error(KILN_ERR_RUNTIME, "custom") == KILN_ERR_RUNTIME);
  CHECK(strcmp(kiln_last_error(), "custom") == 0);
}

/* A kernel library linked into the program, and malformed tables. */
static int32_t linked_kernel(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)n;
  *(int64_t*)args[0]->data = ctx->num_threads;
  return 0;
}

static void test_linked_library(void) {
  static const int64_t shape[1] = {1};
  static const int64_t bad_sym[1] = {-3};
  static const char* const syms[1] = {"n"};
  kiln_kernel_param_t params[1] = {{"out", kDLInt, 64, 1, 1, KILN_PARAM_WRITTEN, shape}};
  kiln_kernel_info_t kernels[2] = {{"num_threads", linked_kernel, 1, params, 0, NULL, 0, NULL},
                                   {"other", linked_kernel, 1, params, 0, NULL, 0, NULL}};
  kiln_library_info_t info = {KILN_KERNEL_ABI_VERSION, 1, kernels};
  kiln_module_t* mod = NULL;
  CHECK_OK(kiln_module_from_library_info(&info, &mod));
  kiln_function_t* fn = function(mod, "num_threads");
  kiln_module_release(mod); /* the function keeps the module alive */
  mod = NULL;
  kiln_tensor_t* t = tensor(kI64, 1, 1, 0);
  kiln_value_t arg = tv(t);
  CHECK_OK(kiln_function_call(fn, &arg, 1, NULL));
  CHECK(*(int64_t*)data(t) == kiln_get_num_threads());
  kiln_tensor_release(t);
  kiln_function_release(fn);

  info.num_kernels = 2;
  kernels[1].name = "num_threads";
  CHECK_ERROR(kiln_module_from_library_info(&info, &mod), KILN_ERR_INVALID_FORMAT,
              "kernels 0 and 1 are both named 'num_threads'");
  kernels[1].name = "other";
  kernels[1].fn = NULL;
  CHECK_ERROR(kiln_module_from_library_info(&info, &mod), KILN_ERR_INVALID_FORMAT,
              "kernel 1 'other' has no function pointer");
  kernels[1].fn = linked_kernel;
  params[0].shape = bad_sym;
  kernels[0].num_sym = 1;
  kernels[0].sym_names = syms;
  CHECK_ERROR(kiln_module_from_library_info(&info, &mod), KILN_ERR_INVALID_FORMAT,
              "parameter 0 'out' dimension 0 refers to symbolic dimension 2, but the kernel has 1");
  params[0].shape = shape;
  params[0].ndim = 1000;
  CHECK_ERROR(kiln_module_from_library_info(&info, &mod), KILN_ERR_INVALID_FORMAT, "ndim 1000");
  params[0].ndim = 1;
  params[0].dtype_lanes = 4;
  CHECK_ERROR(kiln_module_from_library_info(&info, &mod), KILN_ERR_INVALID_FORMAT,
              "unsupported dtype int64x4");
  params[0].dtype_lanes = 1;
  info.num_kernels = -1;
  CHECK_ERROR(kiln_module_from_library_info(&info, &mod), KILN_ERR_INVALID_FORMAT, "-1 kernels");
  CHECK(mod == NULL);
}

/* The whole load-call-export sequence; returns the first failure status, cleaning up. */
static kiln_status_t scenario(const char* path) {
  kiln_module_t* mod = NULL;
  kiln_function_t* fn = NULL;
  kiln_function_t* cb = NULL;
  kiln_tensor_t* a = NULL;
  kiln_tensor_t* b = NULL;
  DLManagedTensorVersioned* mt = NULL;
  kiln_tensor_t* back = NULL;
  kiln_value_t result = {KILN_VALUE_NULL, {0}};
  int64_t shape[1] = {8};
  kiln_status_t st = kiln_module_load_library(path, &mod);
  if (!st) st = kiln_module_get_function(mod, "main", &fn);
  if (!st) st = kiln_tensor_create(shape, 1, kF32, kCPU, &a);
  if (!st) st = kiln_tensor_create(shape, 1, kF32, kCPU, &b);
  if (!st) {
    kiln_value_t args[2] = {tv(a), tv(b)};
    st = kiln_function_call(fn, args, 2, NULL);
  }
  if (!st) st = kiln_module_get_function(mod, "nope", &fn) == KILN_ERR_NOT_FOUND ? KILN_OK : KILN_ERR_INTERNAL;
  if (!st) st = kiln_tensor_to_dlpack(b, &mt);
  if (!st) {
    st = kiln_tensor_from_dlpack(mt, &back);
    if (st) mt->deleter(mt); /* ownership stays with us on failure */
  }
  if (!st) st = kiln_function_create("echo", echo, NULL, NULL, &cb);
  if (!st) st = kiln_function_call(cb, NULL, 0, &result);
  kiln_value_release(&result);
  kiln_function_release(cb);
  kiln_tensor_release(back);
  kiln_tensor_release(a);
  kiln_tensor_release(b);
  kiln_function_release(fn);
  kiln_module_release(mod);
  return st;
}

static void test_allocation_failures(const char* path) {
  int failures = 0;
  for (int64_t k = 0; k < 100; ++k) {
    kiln_testing_fail_allocations_after(k);
    kiln_status_t st = scenario(path);
    kiln_testing_fail_allocations_after(-1);
    if (st == KILN_OK) break;
    if (st != KILN_ERR_OUT_OF_MEMORY || !strstr(kiln_last_error(), "out of memory")) {
      fprintf(stderr, "allocation failure %d gave status 0x%x '%s'\n", (int)k, (unsigned)st,
              kiln_last_error());
      ++g_failures;
    }
    ++failures;
  }
  CHECK(failures >= 8); /* every allocation of the scenario was made to fail once */
  CHECK(scenario(path) == KILN_OK);
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s FIXTURE.so BAD_ABI.so NO_INFO.so\n", argv[0]);
    return 2;
  }
  CHECK(strcmp(kiln_last_error(), "") == 0);
  test_loading(argv[2], argv[3]);
  kiln_module_t* mod = NULL;
  CHECK_OK(kiln_module_load_library(argv[1], &mod));
  if (!mod) return 1;
  test_kernel_calls(mod);
  test_thread_pool(mod);
  test_tensors_and_dlpack();
  test_values_and_callbacks(mod);
  test_linked_library();
  kiln_module_release(mod);
  test_allocation_failures(argv[1]);
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("ALL OK\n");
  return 0;
}
