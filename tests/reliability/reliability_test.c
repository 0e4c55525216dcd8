/* reliability_test.c — real compiled models (tests/reliability/reliability_models.py) through the C API,
 * built against the runtime's sanitizer builds by test_reliability_c.py:
 *
 *   reliability_test threads MANIFEST THREADS CALLS   (ThreadSanitizer)
 *       One library module, one VM and one function object shared by THREADS threads, each
 *       making CALLS calls and checking every output against the Python VM's. Besides the shared
 *       function, the threads also look functions up on the shared VM, read the shared input
 *       tensors, and every 100th call load and run a VM of their own from the shared library:
 *       everything the header's thread-safety contract says may be shared.
 *   reliability_test leaks MANIFEST CYCLES            (AddressSanitizer + LeakSanitizer)
 *       CYCLES times: load the .so, load_executable, init, run, check, release everything.
 *       LeakSanitizer at exit reports any byte not freed.
 *   reliability_test faults MANIFEST                  (AddressSanitizer + LeakSanitizer)
 *       The same cycle with the runtime's k-th allocation made to fail, for k = 0, 1, 2, ...
 *       until the cycle succeeds: every failure must come back as a status with an "out of
 *       memory" message (no crash, no wrong success), and nothing may leak.
 *
 * Prints one summary line and "ALL OK", exits 0 when every check passed. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

void kiln_testing_fail_allocations_after(int64_t count); /* KILN_FAULT_INJECTION builds */

#include "../runtime/check.h"

#define MAX_IO 8

typedef struct {
  char model[4096 + 16];
  char function[128];
  int num_inputs, num_outputs;
  DLDataType in_dtype[MAX_IO];
  int32_t in_ndim[MAX_IO];
  int64_t in_shape[MAX_IO][KILN_MAX_NDIM];
  void* in_data[MAX_IO];
  size_t in_bytes[MAX_IO];
  int64_t out_numel[MAX_IO];
  float* out_data[MAX_IO];
} manifest_t;

static manifest_t g_m;

static void* read_file(const char* dir, const char* name, size_t* out_size) {
  char path[4096 + 256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* buf = malloc(n > 0 ? (size_t)n : 1);
  if (n < 0 || !buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    fclose(f);
    return NULL;
  }
  fclose(f);
  *out_size = (size_t)n;
  return buf;
}

/* Reads the manifest models.py wrote (format in its docstring). Returns 0 on success. */
static int read_manifest(const char* path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char* slash = strrchr(dir, '/');
  if (slash) *slash = '\0'; else snprintf(dir, sizeof dir, ".");
  snprintf(g_m.model, sizeof g_m.model, "%s/model.so", dir);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  char word[64];
  while (fscanf(f, "%63s", word) == 1) {
    char file[256];
    size_t size = 0;
    if (strcmp(word, "function") == 0) {
      if (fscanf(f, "%127s", g_m.function) != 1) break;
    } else if (strcmp(word, "input") == 0 && g_m.num_inputs < MAX_IO) {
      int i = g_m.num_inputs++, code, bits, ndim;
      if (fscanf(f, "%d %d %d", &code, &bits, &ndim) != 3 || ndim < 0 || ndim > KILN_MAX_NDIM) break;
      g_m.in_dtype[i] = (DLDataType){(uint8_t)code, (uint8_t)bits, 1};
      g_m.in_ndim[i] = ndim;
      for (int d = 0; d < ndim; ++d)
        if (fscanf(f, "%lld", (long long*)&g_m.in_shape[i][d]) != 1) return -1;
      if (fscanf(f, "%255s", file) != 1 || !(g_m.in_data[i] = read_file(dir, file, &size))) return -1;
      g_m.in_bytes[i] = size;
    } else if (strcmp(word, "output") == 0 && g_m.num_outputs < MAX_IO) {
      int i = g_m.num_outputs++;
      if (fscanf(f, "%lld %255s", (long long*)&g_m.out_numel[i], file) != 2 ||
          !(g_m.out_data[i] = read_file(dir, file, &size)) ||
          size != (size_t)g_m.out_numel[i] * sizeof(float))
        return -1;
    } else {
      break;
    }
  }
  fclose(f);
  return g_m.function[0] && g_m.num_inputs > 0 && g_m.num_outputs > 0 ? 0 : -1;
}

/* The inputs as runtime tensors (copies of the manifest's data). */
static kiln_status_t make_inputs(kiln_tensor_t** out) {
  for (int i = 0; i < g_m.num_inputs; ++i) out[i] = NULL;
  for (int i = 0; i < g_m.num_inputs; ++i) {
    DLDevice cpu = {kDLCPU, 0};
    kiln_status_t st = kiln_tensor_create(g_m.in_shape[i], g_m.in_ndim[i], g_m.in_dtype[i], cpu, &out[i]);
    if (st != KILN_OK) {
      for (int j = 0; j < i; ++j) kiln_tensor_release(out[j]);
      return st;
    }
    if (kiln_tensor_nbytes(out[i]) != g_m.in_bytes[i]) {
      fprintf(stderr, "input %d: %zu bytes in the file, %zu in the tensor\n", i, g_m.in_bytes[i],
              kiln_tensor_nbytes(out[i]));
      exit(2);
    }
    memcpy(kiln_tensor_dltensor(out[i])->data, g_m.in_data[i], g_m.in_bytes[i]);
  }
  return KILN_OK;
}

/* Compares the result (a tensor or a tuple, flattened in order) with the expected outputs.
 * Returns the number of outputs seen, or -1 on a mismatch. */
static int check_value(const kiln_value_t* v, int index) {
  if (v->kind == KILN_VALUE_TUPLE) {
    for (int32_t k = 0; k < kiln_tuple_size(v->u.tuple); ++k) {
      kiln_value_t item;
      if (kiln_tuple_get_item(v->u.tuple, k, &item) != KILN_OK) return -1;
      index = check_value(&item, index);
      kiln_value_release(&item);
      if (index < 0) return -1;
    }
    return index;
  }
  if (v->kind != KILN_VALUE_TENSOR || index >= g_m.num_outputs) return -1;
  const DLTensor* t = kiln_tensor_dltensor(v->u.tensor);
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; ++d) n *= t->shape[d];
  if (n != g_m.out_numel[index] || t->dtype.code != kDLFloat || t->dtype.bits != 32) return -1;
  const float* got = (const float*)((const char*)t->data + t->byte_offset);
  for (int64_t i = 0; i < n; ++i) {
    float want = g_m.out_data[index][i];
    if (!(fabsf(got[i] - want) <= 1e-5f + 1e-4f * fabsf(want))) return -1;
  }
  return index + 1;
}

static int outputs_match(const kiln_value_t* v) { return check_value(v, 0) == g_m.num_outputs; }

static kiln_status_t call_fn(kiln_function_t* fn, kiln_tensor_t** inputs, kiln_value_t* out) {
  kiln_value_t args[MAX_IO];
  for (int i = 0; i < g_m.num_inputs; ++i) {
    args[i].kind = KILN_VALUE_TENSOR;
    args[i].u.tensor = inputs[i];
  }
  return kiln_function_call(fn, args, g_m.num_inputs, out);
}

/* load_executable on `lib`, then init(): a new VM module, owned by the caller. */
static kiln_status_t new_vm(kiln_module_t* lib, kiln_module_t** out_vm) {
  kiln_function_t* loader = NULL;
  kiln_function_t* init = NULL;
  kiln_value_t v = {KILN_VALUE_NULL, {0}};
  kiln_status_t st = kiln_module_get_function(lib, "load_executable", &loader);
  if (!st) st = kiln_function_call(loader, NULL, 0, &v);
  kiln_function_release(loader);
  if (!st) st = kiln_module_get_function(v.u.module, "init", &init);
  if (!st) st = kiln_function_call(init, NULL, 0, NULL);
  kiln_function_release(init);
  if (st) {
    kiln_value_release(&v);
    return st;
  }
  *out_vm = v.u.module;
  return KILN_OK;
}

/* One whole cycle: load the .so, make a VM, init, run, check, release everything. Returns the
 * first failing status; sets *wrong when a successful call gave wrong outputs. */
static kiln_status_t cycle(int* wrong) {
  kiln_module_t* lib = NULL;
  kiln_module_t* vm = NULL;
  kiln_function_t* fn = NULL;
  kiln_tensor_t* inputs[MAX_IO] = {NULL};
  kiln_value_t r = {KILN_VALUE_NULL, {0}};
  int have_inputs = 0;
  kiln_status_t st = kiln_module_load_library(g_m.model, &lib);
  if (!st) st = new_vm(lib, &vm);
  if (!st) st = kiln_module_get_function(vm, g_m.function, &fn);
  if (!st) st = make_inputs(inputs), have_inputs = st == KILN_OK;
  if (!st) st = call_fn(fn, inputs, &r);
  if (!st && !outputs_match(&r)) *wrong = 1;
  kiln_value_release(&r);
  for (int i = 0; have_inputs && i < g_m.num_inputs; ++i) kiln_tensor_release(inputs[i]);
  kiln_function_release(fn);
  kiln_module_release(vm);
  kiln_module_release(lib);
  return st;
}

/* ---- threads ------------------------------------------------------------------------------- */

typedef struct {
  kiln_module_t* lib;       /* shared */
  kiln_module_t* vm;        /* shared, initialised */
  kiln_function_t* fn;      /* shared */
  kiln_tensor_t** inputs;   /* shared, only read */
  int id, calls, ok, wrong, own_vms;
} worker_t;

static void* worker(void* arg) {
  worker_t* w = arg;
  for (int c = 0; c < w->calls; ++c) {
    kiln_value_t r = {KILN_VALUE_NULL, {0}};
    kiln_status_t st;
    if (c % 100 == 99) { /* a VM of its own from the shared library */
      kiln_module_t* vm = NULL;
      kiln_function_t* fn = NULL;
      st = new_vm(w->lib, &vm);
      if (!st) st = kiln_module_get_function(vm, g_m.function, &fn);
      if (!st) st = call_fn(fn, w->inputs, &r);
      kiln_function_release(fn);
      kiln_module_release(vm);
      w->own_vms += st == KILN_OK;
    } else if ((c + w->id) % 4 == 0) { /* a lookup of its own on the shared VM */
      kiln_function_t* fn = NULL;
      st = kiln_module_get_function(w->vm, g_m.function, &fn);
      if (!st) st = call_fn(fn, w->inputs, &r);
      kiln_function_release(fn);
    } else { /* the shared function object */
      st = call_fn(w->fn, w->inputs, &r);
    }
    if (st != KILN_OK) {
      fprintf(stderr, "thread %d call %d: status 0x%x '%s'\n", w->id, c, (unsigned)st, kiln_last_error());
      return NULL;
    }
    if (outputs_match(&r)) ++w->ok; else ++w->wrong;
    kiln_value_release(&r);
  }
  return NULL;
}

static void run_threads(int threads, int calls) {
  kiln_module_t* lib = NULL;
  kiln_module_t* vm = NULL;
  kiln_function_t* fn = NULL;
  kiln_tensor_t* inputs[MAX_IO];
  CHECK_OK(kiln_module_load_library(g_m.model, &lib));
  CHECK_OK(new_vm(lib, &vm));
  CHECK_OK(kiln_module_get_function(vm, g_m.function, &fn));
  CHECK_OK(make_inputs(inputs));
  if (g_failures) return;
  worker_t* w = calloc((size_t)threads, sizeof *w);
  pthread_t* tids = calloc((size_t)threads, sizeof *tids);
  for (int i = 0; i < threads; ++i) {
    w[i] = (worker_t){lib, vm, fn, inputs, i, calls, 0, 0, 0};
    CHECK(pthread_create(&tids[i], NULL, worker, &w[i]) == 0);
  }
  long ok = 0, wrong = 0, own = 0;
  for (int i = 0; i < threads; ++i) {
    pthread_join(tids[i], NULL);
    ok += w[i].ok, wrong += w[i].wrong, own += w[i].own_vms;
  }
  CHECK(wrong == 0);
  CHECK(ok == (long)threads * calls);
  printf("threads: %d x %d calls, %ld outputs correct, %ld wrong, %ld VMs loaded in threads\n",
         threads, calls, ok, wrong, own);
  for (int i = 0; i < g_m.num_inputs; ++i) kiln_tensor_release(inputs[i]);
  kiln_function_release(fn);
  kiln_module_release(vm);
  kiln_module_release(lib);
  free(w);
  free(tids);
}

/* ---- leaks and faults ---------------------------------------------------------------------- */

static void run_leaks(int cycles) {
  int ok = 0, wrong = 0;
  for (int c = 0; c < cycles; ++c) {
    kiln_status_t st = cycle(&wrong);
    if (st != KILN_OK) {
      fprintf(stderr, "cycle %d: status 0x%x '%s'\n", c, (unsigned)st, kiln_last_error());
      ++g_failures;
      break;
    }
    ++ok;
  }
  CHECK(wrong == 0 && ok == cycles);
  printf("leaks: %d load/init/run/free cycles, %d correct\n", ok, ok - wrong);
}

static void run_faults(void) {
  int64_t k = 0;
  int wrong = 0;
  for (;; ++k) {
    kiln_testing_fail_allocations_after(k);
    kiln_status_t st = cycle(&wrong);
    kiln_testing_fail_allocations_after(-1);
    if (st == KILN_OK) break;
    if (st != KILN_ERR_OUT_OF_MEMORY || !strstr(kiln_last_error(), "out of memory")) {
      fprintf(stderr, "allocation %lld failing gave status 0x%x (%s) '%s'\n", (long long)k,
              (unsigned)st, kiln_status_string(st), kiln_last_error());
      ++g_failures;
    }
    if (k > 100000) { /* the cycle should have succeeded long before */
      ++g_failures;
      break;
    }
  }
  CHECK(wrong == 0);
  CHECK(k >= 10); /* a real model makes at least this many allocations */
  printf("faults: each of the %lld allocations of a load/init/run/free cycle failed in turn\n",
         (long long)k);
}

int main(int argc, char** argv) {
  if (argc < 3 || read_manifest(argv[2]) != 0) {
    fprintf(stderr, "usage: %s threads|leaks|faults MANIFEST [N...] (manifest unreadable?)\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[1], "threads") == 0 && argc == 5) {
    run_threads(atoi(argv[3]), atoi(argv[4]));
  } else if (strcmp(argv[1], "leaks") == 0 && argc == 4) {
    run_leaks(atoi(argv[3]));
  } else if (strcmp(argv[1], "faults") == 0 && argc == 3) {
    run_faults();
  } else {
    fprintf(stderr, "unknown mode or wrong arguments\n");
    return 2;
  }
  for (int i = 0; i < g_m.num_inputs; ++i) free(g_m.in_data[i]);
  for (int i = 0; i < g_m.num_outputs; ++i) free(g_m.out_data[i]);
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("ALL OK\n");
  return 0;
}
