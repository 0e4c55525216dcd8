/* call_overhead.c — what the runtime adds to a kernel call: argument checking and dispatch
 * (kiln_function_call on an 8-element kernel), a parallel loop's launch (a kernel whose tasks
 * do nothing), and a parallel loop whose num_threads tasks each do ~20 us of work (ideal time:
 * 20 us whatever the thread count; the excess is waking workers). Kernels are linked in
 * (kiln_module_from_library_info). Run: make bench */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>

#include "kiln_runtime.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int32_t add_one(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)ctx, (void)n;
  const float* a = args[0]->data;
  float* b = args[1]->data;
  for (int i = 0; i < 8; ++i) b[i] = a[i] + 1.0f;
  return 0;
}

static int32_t nothing(int64_t task, int64_t num_tasks, void* closure) {
  (void)task, (void)num_tasks, (void)closure;
  return 0;
}

static int32_t empty_loop(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)args, (void)n;
  return ctx->parallel_launch(ctx->pool, nothing, NULL, ctx->num_threads);
}

static int64_t g_spin_iters; /* calibrated so that one task of spin() takes ~20 us */

static int32_t spin(int64_t task, int64_t num_tasks, void* closure) {
  (void)task, (void)num_tasks, (void)closure;
  volatile int64_t x = 0;
  for (int64_t i = 0; i < g_spin_iters; ++i) x = x + 1;
  return 0;
}

static int32_t work_loop(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)args, (void)n;
  return ctx->parallel_launch(ctx->pool, spin, NULL, ctx->num_threads);
}

static const int64_t shape8[] = {8};
static const kiln_kernel_param_t params[] = {{"A", kDLFloat, 32, 1, 1, 0, shape8},
                                             {"B", kDLFloat, 32, 1, 1, KILN_PARAM_WRITTEN, shape8}};
static const kiln_kernel_info_t kernels[] = {{"add_one", add_one, 2, params, 0, NULL},
                                             {"empty_loop", empty_loop, 0, NULL, 0, NULL},
                                             {"work_loop", work_loop, 0, NULL, 0, NULL}};
static const kiln_library_info_t info = {KILN_KERNEL_ABI_VERSION, 3, kernels};

static double time_spin(void) {
  double t0 = now();
  for (int i = 0; i < 200; ++i) spin(0, 1, NULL);
  return (now() - t0) / 200;
}

/* Sets g_spin_iters so that one spin() task takes about `seconds`; returns its time. */
static double calibrate_spin(double seconds) {
  double t = 0;
  for (g_spin_iters = 1000; (t = time_spin()) < seconds / 4;) g_spin_iters *= 2;
  for (int round = 0; round < 5 && (t < 0.9 * seconds || t > 1.1 * seconds); ++round) {
    g_spin_iters = (int64_t)((double)g_spin_iters * seconds / t);
    t = time_spin();
  }
  return t;
}

static double time_calls(kiln_function_t* fn, const kiln_value_t* args, int32_t n, int iters) {
  for (int i = 0; i < iters / 10; ++i) kiln_function_call(fn, args, n, NULL); /* warm up */
  double t0 = now();
  for (int i = 0; i < iters; ++i) kiln_function_call(fn, args, n, NULL);
  return (now() - t0) / iters;
}

int main(void) {
  kiln_module_t* mod;
  kiln_function_t *add, *loop, *work;
  kiln_tensor_t *a, *b;
  DLDataType f32 = {kDLFloat, 32, 1};
  DLDevice cpu = {kDLCPU, 0};
  if (kiln_module_from_library_info(&info, &mod) || kiln_module_get_function(mod, "add_one", &add) ||
      kiln_module_get_function(mod, "empty_loop", &loop) ||
      kiln_module_get_function(mod, "work_loop", &work) ||
      kiln_tensor_create(shape8, 1, f32, cpu, &a) || kiln_tensor_create(shape8, 1, f32, cpu, &b)) {
    fprintf(stderr, "%s\n", kiln_last_error());
    return 1;
  }
  kiln_value_t args[2];
  args[0].kind = args[1].kind = KILN_VALUE_TENSOR;
  args[0].u.tensor = a;
  args[1].u.tensor = b;
  printf("kiln_function_call, float32[8] add-one kernel: %.0f ns\n",
         time_calls(add, args, 2, 2000000) * 1e9);
  int32_t cores = kiln_get_num_threads();
  for (int32_t threads = 1; threads <= cores; threads *= 2) {
    kiln_set_num_threads(threads);
    printf("kernel with an empty parallel loop, %2d threads: %.2f us\n", (int)threads,
           time_calls(loop, NULL, 0, 100000) * 1e6);
  }
  double task_time = calibrate_spin(20e-6);
  for (int32_t threads = 1; threads <= cores; threads *= 2) {
    kiln_set_num_threads(threads);
    printf("parallel loop of %2d tasks of %.0f us each, %2d threads: %.1f us\n", (int)threads,
           task_time * 1e6, (int)threads, time_calls(work, NULL, 0, 5000) * 1e6);
  }
  kiln_function_release(work);
  kiln_function_release(add);
  kiln_function_release(loop);
  kiln_tensor_release(a);
  kiln_tensor_release(b);
  kiln_module_release(mod);
  return 0;
}
