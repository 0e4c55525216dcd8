/* call_overhead.c — what the runtime adds to a kernel call, and what a parallel loop costs.
 *
 *   - kiln_function_call on an 8-element kernel: argument checking and dispatch;
 *   - a kernel whose parallel loop has num_threads empty tasks, called back to back (the
 *     launcher may claim every task before a worker joins), and one whose 2 tasks wait for
 *     each other, so that both threads must take part: the pool's fork-join cost, from the
 *     launch through a worker noticing and joining the loop to the launcher seeing it leave;
 *   - the same after 2 ms idle, long enough for the workers to have gone to sleep: the cost of
 *     a wake-up through the condition variable;
 *   - a loop of 2 tasks of ~2 us and of ~20 us each on 1 and on 2 threads (ideal: half the time
 *     on 2; what 2 threads take beyond one task's time is the fork-join cost), and a loop of
 *     num_threads tasks of ~20 us (ideal: 20 us whatever the thread count).
 * Every figure is a median over many calls (a mean is pulled by preemptions on a shared
 * machine), measured in rounds that interleave the rows so that slow periods hit all of them.
 * Two-thread rows need an idle machine: with other busy processes the worker has no core to run
 * on. Kernels are linked in (kiln_module_from_library_info). Run: make bench */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kiln_runtime.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof v[0], compare_doubles);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

/* Each task waits until every task of the loop has started. */
static int32_t meet(int64_t task, int64_t num_tasks, void* closure) {
  (void)task;
  int64_t* arrived = closure;
  __atomic_add_fetch(arrived, 1, __ATOMIC_ACQ_REL);
  while (__atomic_load_n(arrived, __ATOMIC_ACQUIRE) < num_tasks) {
  }
  return 0;
}

static int32_t meet_loop(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)args, (void)n;
  int64_t arrived = 0;
  return ctx->parallel_launch(ctx->pool, meet, &arrived, ctx->num_threads);
}

/* One task of spin(), with closure = &iters, takes ~20 us (g_iters_20us) or ~2 us. */
static int64_t g_iters_20us, g_iters_2us;

static volatile uint64_t g_sink;

/* A chain of dependent multiply-adds in a register: its time is steady, where a loop over a
 * volatile counter ran up to 6x faster on some runs than others (store forwarding). */
static int32_t spin(int64_t task, int64_t num_tasks, void* closure) {
  (void)num_tasks;
  int64_t iters = *(const int64_t*)closure;
  uint64_t x = (uint64_t)task;
  for (int64_t i = 0; i < iters; ++i) x = x * 6364136223846793005u + 1442695040888963407u;
  g_sink = x;
  return 0;
}

static int32_t work_loop(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)args, (void)n;
  return ctx->parallel_launch(ctx->pool, spin, &g_iters_20us, ctx->num_threads);
}

static int32_t work2_loop(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)args, (void)n;
  return ctx->parallel_launch(ctx->pool, spin, &g_iters_20us, 2);
}

static int32_t small2_loop(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)args, (void)n;
  return ctx->parallel_launch(ctx->pool, spin, &g_iters_2us, 2);
}

static const int64_t shape8[] = {8};
static const kiln_kernel_param_t params[] = {{"A", kDLFloat, 32, 1, 1, 0, shape8},
                                             {"B", kDLFloat, 32, 1, 1, KILN_PARAM_WRITTEN, shape8}};
static const kiln_kernel_info_t kernels[] = {{"add_one", add_one, 2, params, 0, NULL, 0, NULL},
                                             {"empty_loop", empty_loop, 0, NULL, 0, NULL, 0, NULL},
                                             {"meet_loop", meet_loop, 0, NULL, 0, NULL, 0, NULL},
                                             {"work_loop", work_loop, 0, NULL, 0, NULL, 0, NULL},
                                             {"work2_loop", work2_loop, 0, NULL, 0, NULL, 0, NULL},
                                             {"small2_loop", small2_loop, 0, NULL, 0, NULL, 0, NULL}};
static const kiln_library_info_t info = {KILN_KERNEL_ABI_VERSION, 6, kernels};

/* Median time of one spin() task of `iters` over 101 runs. */
static double time_spin(int64_t* iters) {
  double t[101];
  for (int i = 0; i < 101; ++i) {
    double t0 = now();
    spin(0, 1, iters);
    t[i] = now() - t0;
  }
  return median(t, 101);
}

/* Sets *iters so that one spin() task takes about `seconds`; returns its time. */
static double calibrate_spin(int64_t* iters, double seconds) {
  double t = 0;
  for (*iters = 100; (t = time_spin(iters)) < seconds / 4;) *iters *= 2;
  for (int round = 0; round < 5 && (t < 0.95 * seconds || t > 1.05 * seconds); ++round) {
    *iters = (int64_t)((double)*iters * seconds / t);
    t = time_spin(iters);
  }
  return t;
}

/* One line of the report: a function called with `threads` threads, timed in samples of
 * `batch` back-to-back calls (the sample is the mean call), each after `idle_us` of sleep. */
typedef struct {
  const char* what;
  kiln_function_t* fn;
  const kiln_value_t* args;
  int32_t num_args;
  int32_t threads;
  int batch;
  long idle_us;
  int per_round; /* samples per round */
  double* samples;
  int count;
} row_t;

#define ROUNDS 15

/* Runs every row's samples in ROUNDS interleaved rounds, so that the slow periods of a shared
 * (or virtualised) machine hit all rows alike, then prints each row's median and the 10th and
 * 90th percentiles. */
static void measure(row_t* rows, int num_rows) {
  for (int i = 0; i < num_rows; ++i) {
    rows[i].samples = malloc((size_t)(ROUNDS * rows[i].per_round) * sizeof(double));
    rows[i].count = 0;
  }
  for (int round = 0; round < ROUNDS; ++round) {
    for (int i = 0; i < num_rows; ++i) {
      row_t* r = &rows[i];
      /* A new thread count starts new workers: calls for 20 ms first, so that the OS has
       * spread them over the cores (a new thread may start on its creator's core). */
      double warm_up = r->threads != kiln_get_num_threads() ? 0.02 : 0;
      kiln_set_num_threads(r->threads);
      for (double t0 = now(); now() - t0 < warm_up;)
        kiln_function_call(r->fn, r->args, r->num_args, NULL);
      for (int w = 0; w < 3; ++w) kiln_function_call(r->fn, r->args, r->num_args, NULL);
      for (int s = 0; s < r->per_round; ++s) {
        if (r->idle_us) sleep_us(r->idle_us);
        double t0 = now();
        for (int c = 0; c < r->batch; ++c) kiln_function_call(r->fn, r->args, r->num_args, NULL);
        r->samples[r->count++] = (now() - t0) / r->batch;
      }
    }
  }
  for (int i = 0; i < num_rows; ++i) {
    row_t* r = &rows[i];
    double m = median(r->samples, r->count); /* sorts */
    printf("%-64s %2d threads: %8.2f us  (p10 %.2f, p90 %.2f)\n", r->what, (int)r->threads,
           m * 1e6, r->samples[r->count / 10] * 1e6, r->samples[r->count * 9 / 10] * 1e6);
    free(r->samples);
  }
}

int main(void) {
  kiln_module_t* mod;
  kiln_function_t *add, *loop, *meet_fn, *work, *work2, *small2;
  kiln_tensor_t *a, *b;
  DLDataType f32 = {kDLFloat, 32, 1};
  DLDevice cpu = {kDLCPU, 0};
  if (kiln_module_from_library_info(&info, &mod) || kiln_module_get_function(mod, "add_one", &add) ||
      kiln_module_get_function(mod, "empty_loop", &loop) ||
      kiln_module_get_function(mod, "meet_loop", &meet_fn) ||
      kiln_module_get_function(mod, "work_loop", &work) ||
      kiln_module_get_function(mod, "work2_loop", &work2) ||
      kiln_module_get_function(mod, "small2_loop", &small2) ||
      kiln_tensor_create(shape8, 1, f32, cpu, &a) || kiln_tensor_create(shape8, 1, f32, cpu, &b)) {
    fprintf(stderr, "%s\n", kiln_last_error());
    return 1;
  }
  kiln_value_t args[2];
  args[0].kind = args[1].kind = KILN_VALUE_TENSOR;
  args[0].u.tensor = a;
  args[1].u.tensor = b;
  int32_t cores = kiln_get_num_threads();
  double small_time = calibrate_spin(&g_iters_2us, 2e-6);
  double task_time = calibrate_spin(&g_iters_20us, 20e-6);
  printf("one spin task: %.2f us (the ~2 us task), %.2f us (the ~20 us task); %d cores\n",
         small_time * 1e6, task_time * 1e6, (int)cores);

  row_t rows[32];
  int n = 0;
  rows[n++] = (row_t){"kiln_function_call, float32[8] add-one kernel", add, args, 2, 1, 1000, 0,
                      12, NULL, 0};
  for (int32_t threads = 1; threads <= cores; threads *= 2)
    rows[n++] = (row_t){"empty parallel loop (num_threads tasks), back to back", loop, NULL, 0,
                        threads, 100, 0, 60, NULL, 0};
  if (cores >= 2) {
    rows[n++] = (row_t){"loop of 2 empty tasks that wait for each other", meet_fn, NULL, 0, 2,
                        1, 0, 300, NULL, 0};
    rows[n++] = (row_t){"empty parallel loop (2 tasks), after 2 ms idle", loop, NULL, 0, 2, 1,
                        2000, 14, NULL, 0};
    rows[n++] = (row_t){"loop of 2 empty tasks that wait for each other, after 2 ms idle",
                        meet_fn, NULL, 0, 2, 1, 2000, 14, NULL, 0};
  }
  for (int32_t threads = 1; threads <= 2 && threads <= cores; ++threads)
    rows[n++] = (row_t){"loop of 2 tasks of ~2 us", small2, NULL, 0, threads, 10, 0, 60, NULL, 0};
  for (int32_t threads = 1; threads <= 2 && threads <= cores; ++threads)
    rows[n++] = (row_t){"loop of 2 tasks of ~20 us", work2, NULL, 0, threads, 1, 0, 140, NULL, 0};
  for (int32_t threads = 4; threads <= cores; threads *= 2)
    rows[n++] = (row_t){"loop of num_threads tasks of ~20 us", work, NULL, 0, threads, 1, 0, 140,
                        NULL, 0};
  measure(rows, n);

  kiln_function_release(small2);
  kiln_function_release(work2);
  kiln_function_release(work);
  kiln_function_release(add);
  kiln_function_release(loop);
  kiln_function_release(meet_fn);
  kiln_tensor_release(a);
  kiln_tensor_release(b);
  kiln_module_release(mod);
  return 0;
}
