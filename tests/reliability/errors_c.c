/* errors_c.c — the catalogue of bad inputs (error_catalogue.py, docs/errors.md) through the C
 * API: `errors_c DIR` provokes every case on the artifacts in DIR and prints one line per case,
 * NAME<TAB>STATUS<TAB>MESSAGE (kiln_status_string and kiln_last_error), or NAME<TAB>n/a<TAB>WHY. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

static char g_dir[4000];

static const char* path(const char* name) {
  static char buf[4200];
  snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
  return buf;
}

static void report(const char* name, kiln_status_t st) {
  if (st == KILN_OK) printf("%s\tok\t\n", name);
  else printf("%s\t%s\t%s\n", name, kiln_status_string(st), kiln_last_error());
}

static void na(const char* name, const char* why) { printf("%s\tn/a\t%s\n", name, why); }

static kiln_value_t tensor_value(kiln_tensor_t* t) {
  kiln_value_t v;
  v.kind = KILN_VALUE_TENSOR;
  v.u.tensor = t;
  return v;
}

static kiln_status_t load(const char* file) {
  kiln_module_t* m = NULL;
  kiln_status_t st = kiln_module_load_library(path(file), &m);
  kiln_module_release(m);
  return st;
}

/* load_executable of `file` (optionally with one int argument); the VM in *out_vm if wanted. */
static kiln_status_t load_vm(const char* file, int with_arg, kiln_module_t** out_vm) {
  kiln_module_t* lib = NULL;
  kiln_function_t* loader = NULL;
  kiln_value_t v = {KILN_VALUE_NULL, {0}};
  kiln_value_t arg = {KILN_VALUE_INT, {1}};
  kiln_status_t st = kiln_module_load_library(path(file), &lib);
  if (!st) st = kiln_module_get_function(lib, "load_executable", &loader);
  if (!st) st = kiln_function_call(loader, with_arg ? &arg : NULL, with_arg, &v);
  kiln_function_release(loader);
  kiln_module_release(lib);
  if (!st && out_vm) *out_vm = v.u.module;
  else kiln_value_release(&v);
  return st;
}

static kiln_status_t call(kiln_module_t* m, const char* fn_name, const kiln_value_t* args, int32_t n) {
  kiln_function_t* fn = NULL;
  kiln_value_t r = {KILN_VALUE_NULL, {0}};
  kiln_status_t st = kiln_module_get_function(m, fn_name, &fn);
  if (!st) st = kiln_function_call(fn, args, n, &r);
  kiln_value_release(&r);
  kiln_function_release(fn);
  return st;
}

static kiln_status_t init_with(kiln_module_t* vm, const kiln_value_t* arg) {
  return call(vm, "init", arg, arg ? 1 : 0);
}

static kiln_module_t* ready(const char* file) {
  kiln_module_t* vm = NULL;
  if (load_vm(file, 0, &vm) != KILN_OK || init_with(vm, NULL) != KILN_OK) {
    fprintf(stderr, "cannot load %s: %s\n", file, kiln_last_error());
    exit(2);
  }
  return vm;
}

static kiln_tensor_t* tensor(int32_t ndim, const int64_t* shape, DLDataType dtype) {
  kiln_tensor_t* t = NULL;
  DLDevice cpu = {kDLCPU, 0};
  if (kiln_tensor_create(shape, ndim, dtype, cpu, &t) != KILN_OK) exit(2);
  memset(kiln_tensor_dltensor(t)->data, 0, kiln_tensor_nbytes(t));
  return t;
}

static kiln_status_t noop(void* ctx, const kiln_value_t* args, int32_t n, kiln_value_t* out) {
  (void)ctx, (void)args, (void)n, (void)out;
  return KILN_OK;
}

static uint8_t* read_file(const char* file, size_t* out_size) {
  FILE* f = fopen(path(file), "rb");
  if (!f) exit(2);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* buf = NULL;
  if (n <= 0 || kiln_memory_alloc((size_t)n + 64, &buf) != KILN_OK ||
      fread((uint8_t*)buf + 1, 1, (size_t)n, f) != (size_t)n) /* at offset 1: misaligned */
    exit(2);
  fclose(f);
  *out_size = (size_t)n;
  return buf;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
  const DLDataType f32 = {kDLFloat, 32, 1}, i32 = {kDLInt, 32, 1};
  const int64_t s1x64[] = {1, 64}, s1x65[] = {1, 65}, s64[] = {64}, s17x64[] = {17, 64},
                s5x63[] = {5, 63}, s2x4[] = {2, 4}, s8[] = {8}, s1x128[] = {1, 128};

  report("missing_file", load("missing.so"));
  report("not_elf", load("not_elf.so"));
  report("truncated_library", load("truncated.so"));
  report("not_a_kiln_library", load("not_kiln.so"));
  report("foreign_isa", load("foreign_isa.so"));
  report("missing_cpu_feature", load("cpu_feature.so"));
  report("kernel_abi_version", load("bad_abi.so"));
  report("newer_format", load_vm("newer_format.so", 0, NULL));
  report("corrupt_blob", load_vm("corrupt_blob.so", 0, NULL));
  report("no_executable", load_vm("kernels.so", 0, NULL));
  report("load_executable_args", load_vm("mlp.so", 1, NULL));
  {
    /* mlp.so's blob, linked as a static bundle over the fixture kernels' table, one byte off
     * its 64-byte alignment */
    void* kernels = dlopen(path("kernels.so"), RTLD_NOW | RTLD_LOCAL);
    const kiln_library_info_t* info = kernels ? dlsym(kernels, "kiln_library_info") : NULL;
    size_t size = 0;
    uint8_t* buf = read_file("mlp_blob.bin", &size);
    kiln_module_t* m = NULL;
    kiln_status_t st = info ? kiln_module_from_static(info, buf + 1, size, &m) : KILN_ERR_INTERNAL;
    if (!st) st = call(m, "load_executable", NULL, 0);
    report("misaligned_static_blob", st);
    kiln_module_release(m);
    kiln_memory_free(buf);
    if (kernels) dlclose(kernels);
  }
  kiln_module_t* mlp = ready("mlp.so");
  {
    kiln_function_t* fn = NULL;
    report("unknown_function", kiln_module_get_function(mlp, "nope", &fn));
  }
  kiln_tensor_t* x = tensor(2, s1x64, f32);
  kiln_value_t xv = tensor_value(x);
  {
    kiln_module_t* vm = NULL;
    load_vm("mlp.so", 0, &vm);
    report("call_before_init", call(vm, "forward", &xv, 1));
    kiln_value_t gpu = {KILN_VALUE_DEVICE, {0}};
    gpu.u.device = (DLDevice){kDLCUDA, 0};
    report("init_on_gpu", init_with(vm, &gpu));
    kiln_value_t three = {KILN_VALUE_INT, {3}};
    report("init_bad_argument", init_with(vm, &three));
    kiln_module_release(vm);
    vm = NULL;
    load_vm("extern.so", 0, &vm);
    report("missing_external", init_with(vm, NULL));
    kiln_module_release(vm);
  }
  {
    kiln_value_t args[2] = {{KILN_VALUE_STRING, {0}}, xv};
    args[0].u.s = "nope";
    report("profile_unknown", call(mlp, "profile", args, 2));
    kiln_value_t three = {KILN_VALUE_INT, {3}};
    report("profile_not_a_name", call(mlp, "profile", &three, 1));
  }
  {
    kiln_tensor_t* t = tensor(2, s1x65, f32);
    kiln_value_t v = tensor_value(t);
    report("wrong_shape", call(mlp, "forward", &v, 1));
    kiln_tensor_release(t);
    t = tensor(1, s64, f32);
    v = tensor_value(t);
    report("wrong_ndim", call(mlp, "forward", &v, 1));
    kiln_tensor_release(t);
    t = tensor(2, s1x64, i32);
    v = tensor_value(t);
    report("wrong_dtype", call(mlp, "forward", &v, 1));
    kiln_tensor_release(t);
  }
  {
    kiln_value_t two[2] = {xv, xv};
    report("too_few_arguments", call(mlp, "forward", NULL, 0));
    report("too_many_arguments", call(mlp, "forward", two, 2));
    kiln_value_t v = {KILN_VALUE_NULL, {0}};
    report("null_argument", call(mlp, "forward", &v, 1));
    v.kind = KILN_VALUE_INT;
    v.u.i = 3;
    report("int_argument", call(mlp, "forward", &v, 1));
    v.kind = KILN_VALUE_STRING;
    v.u.s = "x";
    report("string_argument", call(mlp, "forward", &v, 1));
  }
  {
    /* every other element of a (1, 128) array, and the same memory said to be on cuda:0 */
    kiln_tensor_t* base = tensor(2, s1x128, f32);
    DLTensor dl = *kiln_tensor_dltensor(base);
    int64_t strides[2] = {128, 2};
    dl.shape = (int64_t*)s1x64;
    dl.strides = strides;
    kiln_tensor_t* view = NULL;
    kiln_status_t st = kiln_tensor_wrap(&dl, NULL, NULL, &view);
    kiln_value_t v = tensor_value(view);
    report("non_contiguous", st ? st : call(mlp, "forward", &v, 1));
    kiln_tensor_release(view);
    view = NULL;
    dl.strides = NULL;
    dl.device = (DLDevice){kDLCUDA, 0};
    st = kiln_tensor_wrap(&dl, NULL, NULL, &view);
    v = tensor_value(view);
    report("argument_on_gpu", st ? st : call(mlp, "forward", &v, 1));
    kiln_tensor_release(view);
    kiln_tensor_release(base);
  }
  {
    kiln_module_t* sym = ready("sym.so");
    kiln_tensor_t* t = tensor(2, s17x64, f32);
    kiln_value_t v = tensor_value(t);
    report("symbolic_over_bound", call(sym, "forward", &v, 1));
    kiln_tensor_release(t);
    t = tensor(2, s5x63, f32);
    v = tensor_value(t);
    report("symbolic_wrong_static_dim", call(sym, "forward", &v, 1));
    kiln_tensor_release(t);
    kiln_module_release(sym);
  }
  {
    kiln_module_t* cond = ready("if.so");
    kiln_tensor_t* flag = tensor(0, NULL, f32);
    kiln_tensor_t* t = tensor(2, s2x4, f32);
    kiln_value_t args[2] = {tensor_value(flag), tensor_value(t)};
    report("condition_dtype", call(cond, "main", args, 2));
    kiln_tensor_release(flag);
    kiln_tensor_release(t);
    kiln_module_release(cond);
  }
  {
    kiln_module_t* kernels = NULL;
    kiln_status_t st = kiln_module_load_library(path("kernels.so"), &kernels);
    kiln_tensor_t* a = tensor(1, s8, f32);
    kiln_value_t args[2] = {tensor_value(a), tensor_value(a)};
    report("aliased_output", st ? st : call(kernels, "main", args, 2));
    kiln_tensor_release(a);
    kiln_module_release(kernels);
  }
  {
    kiln_tensor_t* t = NULL;
    DLDevice cpu = {kDLCPU, 0}, gpu = {kDLCUDA, 0};
    const int64_t neg[] = {-1}, huge[] = {(int64_t)1 << 40, (int64_t)1 << 40}, four[] = {4};
    report("tensor_negative_extent", kiln_tensor_create(neg, 1, f32, cpu, &t));
    report("tensor_size_overflow", kiln_tensor_create(huge, 2, f32, cpu, &t));
    report("tensor_on_gpu", kiln_tensor_create(four, 1, f32, gpu, &t));
  }
  {
    kiln_function_t* fn = NULL;
    kiln_function_create("noop", noop, NULL, NULL, &fn);
    report("register_empty_name", kiln_register_function("", fn, 0));
    kiln_register_function("test.taken", fn, 1);
    report("register_taken_name", kiln_register_function("test.taken", fn, 0));
    kiln_unregister_function("test.taken");
    report("unregister_unknown", kiln_unregister_function("test.never"));
    kiln_function_release(fn);
  }
  na("use_after_close", "a released handle is a dangling pointer in C (undefined behaviour, as "
     "for free()); the bindings turn it into an error");
  na("malformed_onnx", "ONNX models are imported by the compiler, in Python");
  kiln_tensor_release(x);
  kiln_module_release(mlp);
  return 0;
}
