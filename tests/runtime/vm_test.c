/* vm_test.c — the VM, tuples and the external-function registry through the C API, built with
 * -fsanitize=address,undefined (and thread) against the runtime's sanitizer builds, which have
 * allocation-failure injection. Run by test_vm_c.py:
 *   vm_test FIXTURE.so BLOB MODEL.so IF_BLOB
 * FIXTURE.so: the fixture kernel library; BLOB: an executable over it (conftest.py's
 * fixture_spec: forward, quad, escape, ident; extern "test.relu_shift"); MODEL.so: the kernels
 * and that blob linked into one library; IF_BLOB: an executable with control flow and FREE
 * (if_spec: pick(c, x) = IF(c, twice_plus1, same, x), the branches private). Prints "ALL OK"
 * and exits 0 when every check passes. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

void kiln_testing_fail_allocations_after(int64_t count); /* KILN_FAULT_INJECTION builds */

#include "check.h"

static const DLDevice kCPU = {kDLCPU, 0};
static const DLDataType kF32 = {kDLFloat, 32, 1};

static const kiln_library_info_t* g_info;
static uint8_t* g_blob;
static uint64_t g_blob_size;
static uint8_t* g_if_blob;
static uint64_t g_if_blob_size;

static kiln_value_t tv(kiln_tensor_t* t) {
  kiln_value_t v;
  v.kind = KILN_VALUE_TENSOR;
  v.u.tensor = t;
  return v;
}

static float* fdata(kiln_tensor_t* t) { return (float*)kiln_tensor_dltensor(t)->data; }

static kiln_tensor_t* vec(int64_t n, float start) {
  kiln_tensor_t* t = NULL;
  if (kiln_tensor_create(&n, 1, kF32, kCPU, &t) != KILN_OK) return NULL;
  for (int64_t i = 0; i < n; ++i) fdata(t)[i] = start + (float)i;
  return t;
}

static int64_t numel(const DLTensor* t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}

/* The external function test.relu_shift(c, out): out = max(c - 3, 0). Checks everything it is
 * given: the fuzzing below hands it whatever a corrupted program passes. */
static kiln_status_t relu_shift(void* ctx, const kiln_value_t* args, int32_t num_args,
                                kiln_value_t* out_result) {
  (void)ctx, (void)out_result;
  if (num_args != 2 || args[0].kind != KILN_VALUE_TENSOR || args[1].kind != KILN_VALUE_TENSOR)
    return kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT, "relu_shift: expected two tensors");
  const DLTensor* c = kiln_tensor_dltensor(args[0].u.tensor);
  const DLTensor* out = kiln_tensor_dltensor(args[1].u.tensor);
  if (c->dtype.code != kDLFloat || c->dtype.bits != 32 || out->dtype.code != kDLFloat ||
      out->dtype.bits != 32 || c->dtype.lanes != 1 || out->dtype.lanes != 1 ||
      numel(c) != numel(out) || kiln_tensor_is_read_only(args[1].u.tensor))
    return kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT, "relu_shift: bad tensors");
  for (int64_t i = 0; i < numel(c); ++i) {
    float v = ((const float*)c->data)[i] - 3.0f;
    ((float*)out->data)[i] = v > 0 ? v : 0;
  }
  return KILN_OK;
}

static kiln_status_t echo(void* ctx, const kiln_value_t* args, int32_t num_args,
                          kiln_value_t* out_result) {
  (void)ctx;
  return kiln_tuple_create(args, num_args, &out_result->u.tuple) == KILN_OK
             ? (out_result->kind = KILN_VALUE_TUPLE, KILN_OK)
             : KILN_ERR_OUT_OF_MEMORY;
}

static void test_tuples(void) {
  kiln_tensor_t* t = vec(3, 0);
  kiln_tuple_t* inner = NULL;
  kiln_value_t items[4];
  items[0].kind = KILN_VALUE_STRING;
  items[0].u.s = "hello";
  items[1] = tv(t);
  CHECK_OK(kiln_tuple_create(items, 2, &inner));
  items[0].kind = KILN_VALUE_TUPLE;
  items[0].u.tuple = inner;
  items[1].kind = KILN_VALUE_DEVICE;
  items[1].u.device = (DLDevice){kDLCUDA, 2};
  items[2].kind = KILN_VALUE_INT;
  items[2].u.i = 7;
  kiln_tuple_t* outer = NULL;
  CHECK_OK(kiln_tuple_create(items, 3, &outer));
  kiln_tuple_release(inner); /* the outer tuple holds its own reference */
  kiln_tensor_release(t);
  CHECK(kiln_tuple_size(outer) == 3 && kiln_tuple_size(NULL) == 0);
  kiln_value_t v;
  CHECK_OK(kiln_tuple_get_item(outer, 0, &v));
  CHECK(v.kind == KILN_VALUE_TUPLE && kiln_tuple_size(v.u.tuple) == 2);
  kiln_value_t s;
  CHECK_OK(kiln_tuple_get_item(v.u.tuple, 0, &s));
  CHECK(s.kind == KILN_VALUE_STRING && strcmp(s.u.s, "hello") == 0);
  kiln_value_release(&s);
  kiln_value_release(&v);
  CHECK_OK(kiln_tuple_get_item(outer, 1, &v));
  CHECK(v.kind == KILN_VALUE_DEVICE && v.u.device.device_type == kDLCUDA && v.u.device.device_id == 2);
  CHECK_ERROR(kiln_tuple_get_item(outer, 3, &v), KILN_ERR_INVALID_ARGUMENT,
              "tuple index 3 is out of range for a tuple of 3 items");
  CHECK_ERROR(kiln_tuple_create(NULL, 2, &inner), KILN_ERR_INVALID_ARGUMENT, "kiln_tuple_create");
  kiln_value_t copy;
  kiln_value_t whole;
  whole.kind = KILN_VALUE_TUPLE;
  whole.u.tuple = outer;
  CHECK_OK(kiln_value_copy(&whole, &copy));
  kiln_value_release(&copy);
  kiln_tuple_t* empty = NULL;
  CHECK_OK(kiln_tuple_create(NULL, 0, &empty));
  CHECK(kiln_tuple_size(empty) == 0);
  kiln_tuple_release(empty);
  kiln_tuple_release(outer);
}

static void test_registry(void) {
  kiln_function_t* fn = NULL;
  kiln_function_t* other = NULL;
  kiln_function_t* got = NULL;
  CHECK_OK(kiln_function_create("echo", echo, NULL, NULL, &fn));
  CHECK_OK(kiln_function_create("echo2", echo, NULL, NULL, &other));
  CHECK_OK(kiln_register_function("test.echo", fn, 0));
  CHECK_ERROR(kiln_register_function("test.echo", other, 0), KILN_ERR_INVALID_ARGUMENT,
              "external function 'test.echo' is already registered");
  CHECK_ERROR(kiln_register_function("", other, 0), KILN_ERR_INVALID_ARGUMENT, "non-empty");
  CHECK_OK(kiln_get_registered_function("test.echo", &got));
  CHECK(got == fn);
  kiln_function_release(got);
  CHECK_OK(kiln_register_function("test.echo", other, 1));
  CHECK_OK(kiln_get_registered_function("test.echo", &got));
  CHECK(got == other);
  kiln_value_t arg = {KILN_VALUE_INT, {5}};
  kiln_value_t result;
  CHECK_OK(kiln_function_call(got, &arg, 1, &result));
  CHECK(result.kind == KILN_VALUE_TUPLE && kiln_tuple_size(result.u.tuple) == 1);
  kiln_value_release(&result);
  kiln_function_release(got);
  CHECK_OK(kiln_unregister_function("test.echo"));
  CHECK_ERROR(kiln_unregister_function("test.echo"), KILN_ERR_NOT_FOUND,
              "no external function 'test.echo' is registered");
  CHECK_ERROR(kiln_get_registered_function("test.echo", &got), KILN_ERR_NOT_FOUND, "test.echo");
  kiln_function_release(fn);
  kiln_function_release(other);
}

static kiln_status_t call1(kiln_module_t* vm, const char* name, kiln_tensor_t* x,
                           kiln_value_t* out) {
  kiln_function_t* fn = NULL;
  kiln_status_t st = kiln_module_get_function(vm, name, &fn);
  if (st != KILN_OK) return st;
  kiln_value_t arg = tv(x);
  st = kiln_function_call(fn, &arg, 1, out);
  kiln_function_release(fn);
  return st;
}

static kiln_status_t init(kiln_module_t* vm, const kiln_value_t* device) {
  kiln_function_t* fn = NULL;
  kiln_status_t st = kiln_module_get_function(vm, "init", &fn);
  if (st != KILN_OK) return st;
  st = kiln_function_call(fn, device, device ? 1 : 0, NULL);
  kiln_function_release(fn);
  return st;
}

/* A library module over the fixture kernels and `blob`, and its load_executable(). */
static kiln_status_t load(const uint8_t* blob, uint64_t size, kiln_module_t** out_vm) {
  kiln_module_t* lib = NULL;
  kiln_function_t* loader = NULL;
  kiln_value_t v = {KILN_VALUE_NULL, {0}};
  kiln_status_t st = kiln_module_from_static(g_info, blob, size, &lib);
  if (!st) st = kiln_module_get_function(lib, "load_executable", &loader);
  if (!st) st = kiln_function_call(loader, NULL, 0, &v);
  kiln_function_release(loader);
  kiln_module_release(lib); /* the VM keeps it alive */
  if (!st) *out_vm = v.u.module;
  return st;
}

static void check_forward(kiln_value_t* r, const float* x) {
  /* ((2 * (x + 1), relu(c - 3), c), relu(c - 3)) */
  CHECK(r->kind == KILN_VALUE_TUPLE && kiln_tuple_size(r->u.tuple) == 2);
  if (r->kind != KILN_VALUE_TUPLE) return;
  kiln_value_t first, doubled, relu;
  CHECK_OK(kiln_tuple_get_item(r->u.tuple, 0, &first));
  CHECK_OK(kiln_tuple_get_item(first.u.tuple, 0, &doubled));
  CHECK_OK(kiln_tuple_get_item(r->u.tuple, 1, &relu));
  for (int i = 0; i < 8; ++i) {
    CHECK(fdata(doubled.u.tensor)[i] == 2 * (x[i] + 1));
    CHECK(fdata(relu.u.tensor)[i] == (i > 3 ? (float)(i - 3) : 0.0f));
  }
  kiln_value_release(&relu);
  kiln_value_release(&doubled);
  kiln_value_release(&first);
}

static void test_vm(const char* model_path) {
  kiln_module_t* vm = NULL;
  CHECK_OK(load(g_blob, g_blob_size, &vm));
  if (!vm) return;
  CHECK(strcmp(kiln_module_kind(vm), "vm") == 0);
  CHECK(kiln_module_num_functions(vm) == 6);
  CHECK(strcmp(kiln_module_function_name(vm, 2), "forward") == 0);
  kiln_tensor_t* x = vec(8, 0.5f);
  kiln_value_t r = {KILN_VALUE_NULL, {0}};
  CHECK_ERROR(call1(vm, "forward", x, &r), KILN_ERR_INVALID_STATE,
              "forward: the virtual machine is not initialized; call init(device) first");
  CHECK_ERROR(init(vm, NULL), KILN_ERR_NOT_FOUND,
              "init: external function 'test.relu_shift' is not registered");
  kiln_function_t* relu = NULL;
  CHECK_OK(kiln_function_create("relu_shift", relu_shift, NULL, NULL, &relu));
  CHECK_OK(kiln_register_function("test.relu_shift", relu, 1));
  kiln_function_release(relu);
  kiln_value_t gpu;
  gpu.kind = KILN_VALUE_DEVICE;
  gpu.u.device = (DLDevice){kDLCUDA, 0};
  CHECK_ERROR(init(vm, &gpu), KILN_ERR_UNSUPPORTED, "init: device cuda:0 is not supported");
  kiln_value_t cpu;
  cpu.kind = KILN_VALUE_DEVICE;
  cpu.u.device = kCPU;
  CHECK_OK(init(vm, &cpu));
  CHECK_OK(call1(vm, "forward", x, &r));
  check_forward(&r, fdata(x));
  kiln_value_release(&r);
  kiln_tensor_t* x9 = vec(9, 0);
  CHECK_ERROR(call1(vm, "forward", x9, &r), KILN_ERR_SHAPE_MISMATCH,
              "forward: argument 0 'x' expected shape (8,), got (9,)");
  /* symbolic arena views: n <= 16 fits the 64-byte arena */
  kiln_tensor_t* x16 = vec(16, 1);
  CHECK_OK(call1(vm, "quad", x16, &r));
  for (int i = 0; i < 16; ++i) CHECK(fdata(r.u.tensor)[i] == 4.0f * (float)(i + 1));
  kiln_value_release(&r);
  kiln_tensor_t* x17 = vec(17, 1);
  CHECK_ERROR(call1(vm, "quad", x17, &r), KILN_ERR_SHAPE_MISMATCH,
              "quad: instruction 0 (ALLOC_ARENA): a view of shape (17,) at offset 0 does not fit");
  /* a view of the arena returned: it keeps the call's frame alive (ASan checks the accesses) */
  kiln_value_t view1, view2;
  CHECK_OK(call1(vm, "escape", x, &view1));
  CHECK_OK(call1(vm, "escape", x16 == NULL ? x : x, &view2));
  CHECK(fdata(view1.u.tensor) != fdata(view2.u.tensor));
  for (int i = 0; i < 8; ++i) CHECK(fdata(view1.u.tensor)[i] == fdata(x)[i] + 1);
  kiln_value_release(&view2);
  kiln_module_release(vm); /* results outlive the VM too */
  vm = NULL;
  for (int i = 0; i < 8; ++i) CHECK(fdata(view1.u.tensor)[i] == fdata(x)[i] + 1);
  kiln_value_release(&view1);

  /* the same executable from a library file, with profiling */
  kiln_module_t* lib = NULL;
  kiln_function_t* loader = NULL;
  kiln_function_t* profile = NULL;
  CHECK_OK(kiln_module_load_library(model_path, &lib));
  CHECK(kiln_module_num_functions(lib) == 6 &&
        strcmp(kiln_module_function_name(lib, 5), "load_executable") == 0);
  CHECK_OK(kiln_module_get_function(lib, "load_executable", &loader));
  kiln_value_t v;
  CHECK_OK(kiln_function_call(loader, NULL, 0, &v));
  CHECK_ERROR(kiln_function_call(loader, &v, 1, NULL), KILN_ERR_INVALID_ARGUMENT,
              "load_executable: expected 0 arguments, got 1");
  vm = v.u.module;
  CHECK_OK(init(vm, NULL));
  CHECK_OK(kiln_module_get_function(vm, "profile", &profile));
  kiln_value_t pargs[2];
  pargs[0].kind = KILN_VALUE_STRING;
  pargs[0].u.s = "forward";
  pargs[1] = tv(x);
  CHECK_OK(kiln_function_call(profile, pargs, 2, &r));
  CHECK(r.kind == KILN_VALUE_TUPLE && kiln_tuple_size(r.u.tuple) >= 8);
  int kernels = 0, totals = 0;
  for (int32_t i = 0; r.kind == KILN_VALUE_TUPLE && i < kiln_tuple_size(r.u.tuple); ++i) {
    kiln_value_t row, kind;
    CHECK_OK(kiln_tuple_get_item(r.u.tuple, i, &row));
    CHECK_OK(kiln_tuple_get_item(row.u.tuple, 1, &kind));
    kernels += strcmp(kind.u.s, "kernel") == 0;
    totals += strcmp(kind.u.s, "total") == 0;
    kiln_value_release(&kind);
    kiln_value_release(&row);
  }
  CHECK(kernels == 2 && totals == 1);
  kiln_value_release(&r);
  pargs[0].u.s = "nope";
  CHECK_ERROR(kiln_function_call(profile, pargs, 2, &r), KILN_ERR_NOT_FOUND, "profile: no function 'nope'");
  kiln_function_release(profile);
  kiln_function_release(loader);
  kiln_module_release(vm);
  kiln_module_release(lib);
  kiln_tensor_t* all[] = {x, x9, x16, x17};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) kiln_tensor_release(all[i]);
}

/* Loads and runs one (possibly corrupted) blob: every function on a valid argument. Returns 1 if
 * load_executable succeeded. Anything may fail; nothing may crash, leak or touch bad memory. */
static int try_blob(const uint8_t* blob, uint64_t size, kiln_tensor_t* x8, kiln_tensor_t* x5) {
  kiln_module_t* vm = NULL;
  if (load(blob, size, &vm) != KILN_OK) {
    CHECK(kiln_last_error()[0] != '\0');
    return 0;
  }
  if (init(vm, NULL) == KILN_OK) {
    const char* names[] = {"forward", "quad", "escape", "ident"};
    for (int i = 0; i < 4; ++i) {
      kiln_value_t r = {KILN_VALUE_NULL, {0}};
      if (call1(vm, names[i], i == 1 ? x5 : x8, &r) == KILN_OK) kiln_value_release(&r);
    }
  }
  kiln_module_release(vm);
  return 1;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_random(void) { /* xorshift64 */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

static void test_fuzz(void) {
  uint8_t* copy = NULL;
  CHECK_OK(kiln_memory_alloc(g_blob_size, (void**)&copy));
  kiln_tensor_t* x8 = vec(8, 1);
  kiln_tensor_t* x5 = vec(5, 1);
  /* truncation at every 7th byte, as given and with blob_size patched to match */
  for (uint64_t n = 0; n < g_blob_size; n += 7) {
    memcpy(copy, g_blob, n);
    CHECK(!try_blob(copy, n, x8, x5));
    if (n >= 24) {
      for (int b = 0; b < 8; ++b) copy[16 + b] = (uint8_t)(n >> (8 * b));
      CHECK(!try_blob(copy, n, x8, x5));
    }
  }
  /* random corruption: 1 to 4 bytes replaced or bit-flipped */
  int loaded = 0, iterations = 3000;
  for (int it = 0; it < iterations; ++it) {
    memcpy(copy, g_blob, g_blob_size);
    int flips = 1 + (int)(next_random() % 4);
    for (int f = 0; f < flips; ++f) {
      uint64_t at = next_random() % g_blob_size;
      uint64_t r = next_random();
      copy[at] = (r & 1) ? (uint8_t)(r >> 8) : (uint8_t)(copy[at] ^ (1u << ((r >> 8) % 8)));
    }
    loaded += try_blob(copy, g_blob_size, x8, x5);
  }
  CHECK(loaded > 0 && loaded < iterations);
  fprintf(stderr, "fuzz: %d of %d corrupted executables loaded\n", loaded, iterations);
  kiln_tensor_release(x8);
  kiln_tensor_release(x5);
  kiln_memory_free(copy);
}

/* Load, init, run and profile, returning the first failure; cleans up after itself. */
static kiln_status_t scenario(void) {
  kiln_module_t* vm = NULL;
  kiln_function_t* profile = NULL;
  kiln_tensor_t* x = NULL;
  kiln_value_t r = {KILN_VALUE_NULL, {0}};
  int64_t n = 8;
  kiln_status_t st = load(g_blob, g_blob_size, &vm);
  if (!st) st = init(vm, NULL);
  if (!st) st = kiln_tensor_create(&n, 1, kF32, kCPU, &x);
  if (!st) st = call1(vm, "forward", x, &r);
  kiln_value_release(&r);
  if (!st) st = call1(vm, "escape", x, &r);
  kiln_value_release(&r);
  if (!st) st = kiln_module_get_function(vm, "profile", &profile);
  if (!st) {
    kiln_value_t args[2];
    args[0].kind = KILN_VALUE_STRING;
    args[0].u.s = "forward";
    args[1] = tv(x);
    st = kiln_function_call(profile, args, 2, &r);
  }
  kiln_value_release(&r);
  kiln_function_release(profile);
  kiln_tensor_release(x);
  kiln_module_release(vm);
  return st;
}

/* ---- IF: an executable with control flow (conftest.py's if_spec) ---------------------------- */

static kiln_status_t call_pick(kiln_module_t* vm, int32_t cond, kiln_tensor_t* x, kiln_value_t* out) {
  kiln_function_t* fn = NULL;
  kiln_tensor_t* c = NULL;
  int64_t one = 1;
  DLDataType i32 = {kDLInt, 32, 1};
  kiln_status_t st = kiln_module_get_function(vm, "pick", &fn);
  if (!st) st = kiln_tensor_create(&one, 1, i32, kCPU, &c);
  if (!st) {
    *(int32_t*)kiln_tensor_dltensor(c)->data = cond;
    kiln_value_t args[2];
    args[0] = tv(c);
    args[1] = tv(x);
    st = kiln_function_call(fn, args, 2, out);
  }
  kiln_tensor_release(c);
  kiln_function_release(fn);
  return st;
}

/* try_blob for the IF executable: pick with both conditions. */
static int try_if_blob(const uint8_t* blob, uint64_t size, kiln_tensor_t* x8) {
  kiln_module_t* vm = NULL;
  if (load(blob, size, &vm) != KILN_OK) {
    CHECK(kiln_last_error()[0] != '\0');
    return 0;
  }
  if (init(vm, NULL) == KILN_OK) {
    for (int32_t c = 0; c < 2; ++c) {
      kiln_value_t r = {KILN_VALUE_NULL, {0}};
      if (call_pick(vm, c, x8, &r) == KILN_OK) kiln_value_release(&r);
    }
  }
  kiln_module_release(vm);
  return 1;
}

static void test_if(void) {
  kiln_tensor_t* x8 = vec(8, 1);
  kiln_module_t* vm = NULL;
  CHECK_OK(load(g_if_blob, g_if_blob_size, &vm));
  CHECK_OK(init(vm, NULL));
  for (int32_t c = 0; c < 2; ++c) { /* c: twice_plus1 (2 * (x + 1)); else same (x) */
    kiln_value_t r = {KILN_VALUE_NULL, {0}};
    CHECK_OK(call_pick(vm, c, x8, &r));
    CHECK(r.kind == KILN_VALUE_TENSOR);
    for (int i = 0; r.kind == KILN_VALUE_TENSOR && i < 8; ++i)
      CHECK(fdata(r.u.tensor)[i] == (float)(c ? 2 * (i + 2) : i + 1));
    kiln_value_release(&r);
  }
  kiln_function_t* fn = NULL;
  CHECK(kiln_module_get_function(vm, "twice_plus1", &fn) == KILN_ERR_NOT_FOUND); /* private */
  CHECK(kiln_module_num_functions(vm) == 3);                               /* init, profile, pick */
  kiln_module_release(vm);
  /* truncated and corrupted copies: refused cleanly or run */
  uint8_t* copy = NULL;
  CHECK_OK(kiln_memory_alloc(g_if_blob_size, (void**)&copy));
  for (uint64_t n = 0; n < g_if_blob_size; n += 5) {
    memcpy(copy, g_if_blob, n);
    CHECK(!try_if_blob(copy, n, x8));
  }
  int loaded = 0, iterations = 2000;
  for (int it = 0; it < iterations; ++it) {
    memcpy(copy, g_if_blob, g_if_blob_size);
    for (int f = 0, flips = 1 + (int)(next_random() % 3); f < flips; ++f) {
      uint64_t at = next_random() % g_if_blob_size;
      copy[at] = (uint8_t)(copy[at] ^ (1u << (next_random() % 8)));
    }
    loaded += try_if_blob(copy, g_if_blob_size, x8);
  }
  CHECK(loaded > 0 && loaded < iterations);
  fprintf(stderr, "IF fuzz: %d of %d corrupted executables loaded\n", loaded, iterations);
  kiln_memory_free(copy);
  kiln_tensor_release(x8);
}

/* ---- derived dimensions: cat(a: f32[m], b: f32[n]) -> f32[m + n] (test_derived_dims.py) ------ */

static const kiln_library_info_t* g_derived_info;
static uint8_t* g_derived_blob;
static uint64_t g_derived_size;

static kiln_status_t call_cat(kiln_module_t* vm, kiln_tensor_t* a, kiln_tensor_t* b, kiln_value_t* out) {
  kiln_function_t* fn = NULL;
  kiln_status_t st = kiln_module_get_function(vm, "cat", &fn);
  if (!st) {
    kiln_value_t args[2] = {tv(a), tv(b)};
    st = kiln_function_call(fn, args, 2, out);
  }
  kiln_function_release(fn);
  return st;
}

static int try_derived_blob(const uint8_t* blob, uint64_t size, kiln_tensor_t* a, kiln_tensor_t* b) {
  kiln_module_t* vm = NULL;
  if (load(blob, size, &vm) != KILN_OK) {
    CHECK(kiln_last_error()[0] != '\0');
    return 0;
  }
  if (init(vm, NULL) == KILN_OK) {
    kiln_value_t r = {KILN_VALUE_NULL, {0}};
    if (call_cat(vm, a, b, &r) == KILN_OK) kiln_value_release(&r);
    if (call_cat(vm, b, a, &r) == KILN_OK) kiln_value_release(&r);
  }
  kiln_module_release(vm);
  return 1;
}

static void test_derived(void) {
  const kiln_library_info_t* saved = g_info;
  g_info = g_derived_info; /* load() builds modules over g_info's kernels */
  kiln_tensor_t* a = vec(3, 1);
  kiln_tensor_t* b = vec(9, 10);
  kiln_module_t* vm = NULL;
  CHECK_OK(load(g_derived_blob, g_derived_size, &vm));
  CHECK_OK(init(vm, NULL));
  kiln_value_t r = {KILN_VALUE_NULL, {0}};
  CHECK_OK(call_cat(vm, a, b, &r));
  CHECK(r.kind == KILN_VALUE_TENSOR && kiln_tensor_dltensor(r.u.tensor)->shape[0] == 12);
  for (int i = 0; r.kind == KILN_VALUE_TENSOR && i < 12; ++i)
    CHECK(fdata(r.u.tensor)[i] == (float)(i < 3 ? 1 + i : 10 + i - 3));
  kiln_value_release(&r);
  /* m = 9 exceeds the bound 8 the blob declares */
  CHECK_ERROR(call_cat(vm, b, a, &r), KILN_ERR_SHAPE_MISMATCH, "'m' = 9 exceeds its bound 8");
  kiln_module_release(vm);
  uint8_t* copy = NULL;
  CHECK_OK(kiln_memory_alloc(g_derived_size, (void**)&copy));
  for (uint64_t n = 0; n < g_derived_size; n += 3) {
    memcpy(copy, g_derived_blob, n);
    CHECK(!try_derived_blob(copy, n, a, b));
  }
  int loaded = 0, iterations = 3000;
  for (int it = 0; it < iterations; ++it) {
    memcpy(copy, g_derived_blob, g_derived_size);
    for (int f = 0, flips = 1 + (int)(next_random() % 3); f < flips; ++f) {
      uint64_t at = next_random() % g_derived_size;
      uint64_t rnd = next_random();
      copy[at] = (rnd & 1) ? (uint8_t)(rnd >> 8) : (uint8_t)(copy[at] ^ (1u << ((rnd >> 8) % 8)));
    }
    loaded += try_derived_blob(copy, g_derived_size, a, b);
  }
  CHECK(loaded > 0 && loaded < iterations);
  fprintf(stderr, "derived fuzz: %d of %d corrupted executables loaded\n", loaded, iterations);
  kiln_memory_free(copy);
  kiln_tensor_release(a);
  kiln_tensor_release(b);
  g_info = saved;
}

static void test_allocation_failures(void) {
  int failures = 0;
  for (int64_t k = 0; k < 200; ++k) {
    kiln_testing_fail_allocations_after(k);
    kiln_status_t st = scenario();
    kiln_testing_fail_allocations_after(-1);
    if (st == KILN_OK) break;
    if (st != KILN_ERR_OUT_OF_MEMORY || !strstr(kiln_last_error(), "out of memory")) {
      fprintf(stderr, "allocation failure %d gave status 0x%x '%s'\n", (int)k, (unsigned)st,
              kiln_last_error());
      ++g_failures;
    }
    ++failures;
  }
  CHECK(failures >= 20); /* every allocation of the scenario was made to fail once */
  CHECK(scenario() == KILN_OK);
}

/* The fewest heap allocations a call of "quad" succeeds with: on a freshly loaded VM, or on one
 * that made a call before. -1 when none up to 100 does. */
static int64_t quad_allocations(int warm) {
  kiln_module_t* vm = NULL;
  kiln_function_t* quad = NULL;
  kiln_tensor_t* q = vec(13, 1.0f);
  int64_t found = -1;
  for (int64_t k = 0; k < 100 && found < 0; ++k) {
    if (!vm || !warm) {
      kiln_function_release(quad);
      kiln_module_release(vm);
      CHECK_OK(load(g_blob, g_blob_size, &vm));
      CHECK_OK(init(vm, NULL));
      CHECK_OK(kiln_module_get_function(vm, "quad", &quad));
      kiln_value_t arg = tv(q), r;
      if (warm) {
        CHECK_OK(kiln_function_call(quad, &arg, 1, &r));
        kiln_value_release(&r);
      }
    }
    kiln_value_t arg = tv(q), r;
    kiln_testing_fail_allocations_after(k);
    kiln_status_t st = kiln_function_call(quad, &arg, 1, &r);
    kiln_testing_fail_allocations_after(-1);
    if (st == KILN_OK) {
      for (int i = 0; i < 13; ++i) CHECK(fdata(r.u.tensor)[i] == 4 * fdata(q)[i]);
      kiln_value_release(&r);
      found = k;
    }
  }
  kiln_function_release(quad);
  kiln_module_release(vm);
  kiln_tensor_release(q);
  return found;
}

/* A VM keeps its last call's frame for the next call (a big model's frame is tens of MB, which
 * malloc would map, and the kernels fault in, on every call): the second call allocates one
 * block less. A frame that an output still views is not reused: the output keeps its values. */
static void test_frame_reuse(void) {
  int64_t first = quad_allocations(0), again = quad_allocations(1);
  CHECK(first > 0 && again == first - 1);
  kiln_module_t* vm = NULL;
  kiln_function_t* forward = NULL;
  CHECK_OK(load(g_blob, g_blob_size, &vm));
  CHECK_OK(init(vm, NULL));
  CHECK_OK(kiln_module_get_function(vm, "forward", &forward));
  kiln_tensor_t* x = vec(8, 1.0f);
  kiln_tensor_t* y = vec(8, 100.0f);
  kiln_value_t arg = tv(x), r1, r2, first_out, doubled;
  CHECK_OK(kiln_function_call(forward, &arg, 1, &r1));
  arg = tv(y);
  CHECK_OK(kiln_function_call(forward, &arg, 1, &r2));
  kiln_tuple_get_item(r1.u.tuple, 0, &first_out);
  kiln_tuple_get_item(first_out.u.tuple, 0, &doubled);
  for (int i = 0; i < 8; ++i) CHECK(fdata(doubled.u.tensor)[i] == 2 * (fdata(x)[i] + 1));
  kiln_value_release(&doubled);
  kiln_value_release(&first_out);
  kiln_value_release(&r1);
  kiln_value_release(&r2);
  kiln_module_release(vm);  /* a function keeps its module: released with the function */
  kiln_function_release(forward);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
}

typedef struct {
  kiln_module_t* vm;
  int ok;
  float start;
} worker_t;

static void* worker(void* arg) {
  worker_t* w = arg;
  kiln_function_t* forward = NULL;
  kiln_function_t* quad = NULL;
  w->ok = kiln_module_get_function(w->vm, "forward", &forward) == KILN_OK &&
          kiln_module_get_function(w->vm, "quad", &quad) == KILN_OK;
  kiln_tensor_t* x = vec(8, w->start);
  kiln_tensor_t* q = vec(13, w->start);
  for (int round = 0; round < 100 && w->ok; ++round) {
    kiln_value_t arg = tv(x), r, first, doubled;
    w->ok &= kiln_function_call(forward, &arg, 1, &r) == KILN_OK;
    if (!w->ok) break;
    kiln_tuple_get_item(r.u.tuple, 0, &first);
    kiln_tuple_get_item(first.u.tuple, 0, &doubled);
    for (int i = 0; i < 8; ++i) w->ok &= fdata(doubled.u.tensor)[i] == 2 * (fdata(x)[i] + 1);
    kiln_value_release(&doubled);
    kiln_value_release(&first);
    kiln_value_release(&r);
    arg = tv(q);
    w->ok &= kiln_function_call(quad, &arg, 1, &r) == KILN_OK;
    if (!w->ok) break;
    for (int i = 0; i < 13; ++i) w->ok &= fdata(r.u.tensor)[i] == 4 * fdata(q)[i];
    kiln_value_release(&r);
  }
  kiln_tensor_release(x);
  kiln_tensor_release(q);
  kiln_function_release(forward);
  kiln_function_release(quad);
  return NULL;
}

static void test_threads(void) {
  kiln_module_t* vm = NULL;
  CHECK_OK(load(g_blob, g_blob_size, &vm));
  CHECK_OK(init(vm, NULL));
  worker_t w[6];
  pthread_t tids[6];
  for (int i = 0; i < 6; ++i) {
    w[i].vm = vm;
    w[i].start = (float)(10 * i);
    pthread_create(&tids[i], NULL, worker, &w[i]);
  }
  CHECK_OK(init(vm, NULL)); /* re-initialising while calls run is safe */
  for (int i = 0; i < 6; ++i) {
    pthread_join(tids[i], NULL);
    CHECK(w[i].ok);
  }
  kiln_module_release(vm);
}

static uint8_t* read_file(const char* path, uint64_t* out_size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* buf = NULL;
  if (n < 0 || kiln_memory_alloc((size_t)n, &buf) != KILN_OK || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    kiln_memory_free(buf);
    fclose(f);
    return NULL;
  }
  fclose(f);
  *out_size = (uint64_t)n;
  return buf;
}

int main(int argc, char** argv) {
  if (argc != 5 && argc != 7) {
    fprintf(stderr, "usage: %s FIXTURE.so BLOB MODEL.so IF_BLOB [DERIVED.so DERIVED_BLOB]\n", argv[0]);
    return 2;
  }
  void* derived = argc == 7 ? dlopen(argv[5], RTLD_NOW | RTLD_LOCAL) : NULL;
  if (argc == 7) {
    g_derived_info = derived ? dlsym(derived, "kiln_library_info") : NULL;
    g_derived_blob = read_file(argv[6], &g_derived_size);
    if (!g_derived_info || !g_derived_blob) {
      fprintf(stderr, "cannot load %s or %s\n", argv[5], argv[6]);
      return 2;
    }
  }
  void* fixture = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  g_info = fixture ? dlsym(fixture, "kiln_library_info") : NULL;
  g_blob = read_file(argv[2], &g_blob_size);
  g_if_blob = read_file(argv[4], &g_if_blob_size);
  if (!g_info || !g_blob || !g_if_blob) {
    fprintf(stderr, "cannot load %s or %s\n", argv[1], argv[2]);
    return 2;
  }
  test_tuples();
  test_registry();
  test_vm(argv[3]);
  test_fuzz();
  test_if();
  if (g_derived_info) test_derived();
  test_allocation_failures();
  test_frame_reuse();
  test_threads();
  CHECK_OK(kiln_unregister_function("test.relu_shift"));
  kiln_memory_free(g_blob);
  kiln_memory_free(g_if_blob);
  kiln_memory_free(g_derived_blob);
  if (derived) dlclose(derived);
  dlclose(fixture);
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("ALL OK\n");
  return 0;
}
