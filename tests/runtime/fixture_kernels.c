/* fixture_kernels.c — a kernel library written by hand the way Kiln's codegen emits one
 * (kiln_kernel_abi.h), for the runtime tests. Build variants:
 *   -DFIXTURE_ABI_VERSION=n   report another ABI version
 *   -DFIXTURE_BAD_DTYPE       a parameter with a dtype codegen never emits (float8_e3m4)
 *   -DFIXTURE_SINGLE          only the "scale" kernel (a module with one function, not "main")
 *   -DFIXTURE_NO_MAIN         every kernel but "main"
 *   -DFIXTURE_NO_INFO         no kiln_library_info symbol at all
 *   -DFIXTURE_DERIVED         adds "concat", whose output has a derived dimension (m + n)
 *   -DFIXTURE_BAD_DERIVED     the same with a derived dimension that refers to itself
 *
 * Kernels:
 *   main(A: float32[8], B: float32[8])        B = A + 1
 *   scale(A: float32[n], B: float32[n])       B = 2 * A, a parallel loop of num_threads chunks
 *   rowsum(A: float64[m, n], B: float64[m])   B = A.sum(axis=1)
 *   threads(T: int64[4])                      probes the pool; see threads_kernel
 *   fail(X: int32[1])                         a parallel loop whose task 2 returns X[0]
 *   concat(A: float32[m], B: float32[n], C: float32[m + n])   C = [A, B] (FIXTURE_DERIVED)
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <time.h>

#include "kiln_kernel_abi.h"

#ifndef FIXTURE_ABI_VERSION
#define FIXTURE_ABI_VERSION KILN_KERNEL_ABI_VERSION
#endif

#define DATA(type, t) ((type*)((char*)(t)->data + (t)->byte_offset))

static int32_t main_kernel(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)ctx, (void)n;
  const float* a = DATA(float, args[0]);
  float* b = DATA(float, args[1]);
  for (int i = 0; i < 8; ++i) b[i] = a[i] + 1.0f;
  return 0;
}

typedef struct {
  const float* a;
  float* b;
  int64_t n;
} scale_closure_t;

static int32_t scale_task(int64_t task, int64_t num_tasks, void* closure) {
  scale_closure_t* c = closure;
  int64_t begin = task * c->n / num_tasks, end = (task + 1) * c->n / num_tasks;
  for (int64_t i = begin; i < end; ++i) c->b[i] = 2.0f * c->a[i];
  return 0;
}

static int32_t scale_kernel(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)n;
  scale_closure_t c = {DATA(float, args[0]), DATA(float, args[1]), args[0]->shape[0]};
  if (!ctx) return scale_task(0, 1, &c);
  return ctx->parallel_launch(ctx->pool, scale_task, &c, ctx->num_threads);
}

static int32_t rowsum_kernel(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)ctx, (void)n;
  int64_t rows = args[0]->shape[0], cols = args[0]->shape[1];
  const double* a = DATA(double, args[0]);
  double* b = DATA(double, args[1]);
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0;
    for (int64_t j = 0; j < cols; ++j) s += a[i * cols + j];
    b[i] = s;
  }
  return 0;
}

/* threads(T): in: T[0] = number of tasks (<= 16), T[1] = 1 to make every task wait (up to 1 s)
 * until all tasks are running at once. out: T[0] = number of distinct threads that ran tasks,
 * T[1] = ctx->num_threads, T[2] = 1 if a launch from inside every task ran serially on that
 * task's thread, T[3] = 0. */
typedef struct {
  const kiln_kernel_ctx_t* ctx;
  int64_t wait;
  int arrived; /* atomic */
  pthread_t ids[16];
  pthread_t nested_ids[16][4];
  int nested_ok[16];
} probe_t;

typedef struct {
  probe_t* probe;
  int64_t outer;
} nested_t;

static int32_t nested_task(int64_t task, int64_t num_tasks, void* closure) {
  nested_t* c = closure;
  (void)num_tasks;
  c->probe->nested_ids[c->outer][task] = pthread_self();
  return 0;
}

static int32_t probe_task(int64_t task, int64_t num_tasks, void* closure) {
  probe_t* p = closure;
  p->ids[task] = pthread_self();
  __atomic_add_fetch(&p->arrived, 1, __ATOMIC_SEQ_CST);
  for (int spins = 0; p->wait && spins < 10000; ++spins) { /* 10000 x 100 us = 1 s at most */
    if (__atomic_load_n(&p->arrived, __ATOMIC_SEQ_CST) >= num_tasks) break;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  nested_t nested = {p, task};
  int32_t rc = p->ctx->parallel_launch(p->ctx->pool, nested_task, &nested, 4);
  int ok = rc == 0;
  for (int i = 0; i < 4; ++i) ok &= pthread_equal(p->nested_ids[task][i], pthread_self()) != 0;
  p->nested_ok[task] = ok;
  return 0;
}

static int32_t threads_kernel(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)n;
  int64_t* t = DATA(int64_t, args[0]);
  int64_t num_tasks = t[0] < 1 ? 1 : t[0] > 16 ? 16 : t[0];
  probe_t p = {0};
  p.ctx = ctx;
  p.wait = t[1];
  int32_t rc = ctx->parallel_launch(ctx->pool, probe_task, &p, num_tasks);
  if (rc) return rc;
  int64_t distinct = 0, nested_ok = 1;
  for (int64_t i = 0; i < num_tasks; ++i) {
    int64_t seen = 0;
    for (int64_t j = 0; j < i; ++j) seen |= pthread_equal(p.ids[i], p.ids[j]) != 0;
    distinct += !seen;
    nested_ok &= p.nested_ok[i];
  }
  t[0] = distinct;
  t[1] = ctx->num_threads;
  t[2] = nested_ok;
  t[3] = 0;
  return 0;
}

static int32_t fail_task(int64_t task, int64_t num_tasks, void* closure) {
  (void)num_tasks;
  return task == 2 ? *(int32_t*)closure : 0;
}

static int32_t fail_kernel(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)n;
  return ctx->parallel_launch(ctx->pool, fail_task, DATA(int32_t, args[0]), 4);
}

#if defined(FIXTURE_DERIVED) || defined(FIXTURE_BAD_DERIVED)
#define FIXTURE_WITH_CONCAT 1
/* Reads only what the runtime checked: C's extent is m + n because the runtime said so. */
static int32_t concat_kernel(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)ctx, (void)n;
  int64_t m = args[0]->shape[0], k = args[1]->shape[0];
  const float* a = DATA(float, args[0]);
  const float* b = DATA(float, args[1]);
  float* c = DATA(float, args[2]);
  for (int64_t i = 0; i < m; ++i) c[i] = a[i];
  for (int64_t i = 0; i < k; ++i) c[m + i] = b[i];
  return 0;
}
static const int64_t shape_m[] = {-1}, shape_n[] = {-2}, shape_m_plus_n[] = {-3};
static const kiln_kernel_param_t concat_params[] = {{"A", kDLFloat, 32, 1, 1, 0, shape_m},
                                                    {"B", kDLFloat, 32, 1, 1, 0, shape_n},
                                                    {"C", kDLFloat, 32, 1, 1, KILN_PARAM_WRITTEN, shape_m_plus_n}};
#ifdef FIXTURE_BAD_DERIVED
static const kiln_derived_dim_t concat_derived[] = {{KILN_DIM_ADD, 0, 0, 2}}; /* m + itself */
#else
static const kiln_derived_dim_t concat_derived[] = {{KILN_DIM_ADD, 0, 0, 1}}; /* m + n */
#endif
#endif

static const int64_t shape_8[] = {8};
static const int64_t shape_sym0[] = {-1};
static const int64_t shape_sym01[] = {-1, -2};
static const int64_t shape_4[] = {4};
static const int64_t shape_1[] = {1};
static const char* const names_n[] = {"n"};
static const char* const names_mn[] = {"m", "n"};

#ifdef FIXTURE_BAD_DTYPE
#define MAIN_B_CODE kDLFloat8_e3m4
#define MAIN_B_BITS 8
#else
#define MAIN_B_CODE kDLFloat
#define MAIN_B_BITS 32
#endif

static const kiln_kernel_param_t main_params[] = {{"A", kDLFloat, 32, 1, 1, 0, shape_8},
                                                  {"B", MAIN_B_CODE, MAIN_B_BITS, 1, 1, KILN_PARAM_WRITTEN, shape_8}};
static const kiln_kernel_param_t scale_params[] = {{"A", kDLFloat, 32, 1, 1, 0, shape_sym0},
                                                   {"B", kDLFloat, 32, 1, 1, KILN_PARAM_WRITTEN, shape_sym0}};
static const kiln_kernel_param_t rowsum_params[] = {{"A", kDLFloat, 64, 1, 2, 0, shape_sym01},
                                                    {"B", kDLFloat, 64, 1, 1, KILN_PARAM_WRITTEN, shape_sym0}};
static const kiln_kernel_param_t threads_params[] = {{"T", kDLInt, 64, 1, 1, KILN_PARAM_WRITTEN, shape_4}};
static const kiln_kernel_param_t fail_params[] = {{"X", kDLInt, 32, 1, 1, KILN_PARAM_WRITTEN, shape_1}};

static const kiln_kernel_info_t kernels[] = {
#if !defined(FIXTURE_SINGLE) && !defined(FIXTURE_NO_MAIN)
    {"main", main_kernel, 2, main_params, 0, NULL, 0, NULL},
#endif
    {"scale", scale_kernel, 2, scale_params, 1, names_n, 0, NULL},
#ifndef FIXTURE_SINGLE
    {"rowsum", rowsum_kernel, 2, rowsum_params, 2, names_mn, 0, NULL},
    {"threads", threads_kernel, 1, threads_params, 0, NULL, 0, NULL},
    {"fail", fail_kernel, 1, fail_params, 0, NULL, 0, NULL},
#endif
#ifdef FIXTURE_WITH_CONCAT
    {"concat", concat_kernel, 3, concat_params, 2, names_mn, 1, concat_derived},
#endif
};

#ifndef FIXTURE_NO_INFO
const kiln_library_info_t kiln_library_info = {
    FIXTURE_ABI_VERSION, (int32_t)(sizeof kernels / sizeof kernels[0]), kernels};
#else
const int not_a_kiln_library = 1;
#endif
