/* thread_pool_test.c — a stress test of the thread pool (runtime_c/src/thread_pool.c), run by
 * test_thread_pool_c.py under ThreadSanitizer and AddressSanitizer. Through the public API
 * (kernels linked in with kiln_module_from_library_info), it runs thousands of small parallel
 * loops back to back (workers spinning) and after idle gaps longer than the pool's spin budget
 * (workers asleep), interleaved with kiln_set_num_threads resizes (2 to 4 threads), tasks that
 * fail, tasks that outlast the budget (the launcher blocks), nested launches, and two threads
 * launching at once. After every loop each task must have run exactly once (a task run twice or
 * skipped fails), a loop whose tasks wait for each other must find num_threads threads (a worker
 * that missed its wake-up fails it) and has the launcher run task 0, no task of one pooled loop
 * may overlap a task of another launcher's, an idle pool must use no CPU, and a launcher waiting
 * 400 us for a worker's task must spin, not block. Prints "ALL OK". Usage: thread_pool_test */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sys/resource.h>
#include <stdint.h>
#include <time.h>

#include "check.h"

#define MAX_TASKS 72 /* test_more_threads_than_task_bits: 70 */
#define RANDOM_TASKS 8 /* the random loops have 1..RANDOM_TASKS tasks */

/* One launcher's current loop; the kernel finds it through its int64[1] argument. */
typedef struct {
  int id;                      /* 0 or 1: which launcher (for the overlap check) */
  const kiln_kernel_ctx_t* ctx; /* the kernel's, for nested launches */
  int64_t num_tasks;
  int64_t fail_task;           /* this task returns 100 + id; -1: none */
  int64_t task_ns;             /* each task busy-waits this long */
  int64_t long_task;           /* > 0: this task busy-waits long_ns instead */
  int64_t long_ns;
  int32_t long_task_on_launcher; /* atomic: long_task ran on the launcher */
  int barrier;                 /* every task waits until num_tasks tasks are running */
  int nested;                  /* every task launches a 3-task loop from inside */
  pthread_t launcher;          /* the thread that launched the loop */
  int32_t runs[MAX_TASKS];     /* atomic: times each task ran in this loop */
  int32_t arrived;             /* atomic: barrier count */
} loop_t;

static loop_t g_loops[2];
static int32_t g_running[2]; /* atomic: tasks of launcher i's pooled loop running now */
static int32_t g_bad;        /* atomic: failures seen inside tasks (CHECK is not thread-safe) */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void busy_wait_ns(int64_t ns) {
  uint64_t end = now_ns() + (uint64_t)ns;
  while (ns > 0 && now_ns() < end) {
  }
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static void bad(void) { __atomic_add_fetch(&g_bad, 1, __ATOMIC_RELAXED); }

typedef struct {
  pthread_t thread;
  int64_t next; /* the task expected next: a nested loop runs in order on its caller */
} nested_t;

static int32_t nested_task(int64_t t, int64_t num_tasks, void* closure) {
  nested_t* n = closure;
  if (num_tasks != 3 || t != n->next++ || !pthread_equal(n->thread, pthread_self())) bad();
  return 0;
}

static int32_t task(int64_t t, int64_t num_tasks, void* closure) {
  loop_t* l = closure;
  if (num_tasks != l->num_tasks || t < 0 || t >= num_tasks) {
    bad();
    return 0;
  }
  /* One loop at a time on the pool: no task of the other launcher's loop runs now (Dekker: of
   * two overlapping tasks, at least one sees the other). A 1-task loop runs on its caller
   * without the pool, so it may overlap. */
  int pooled = num_tasks > 1;
  if (pooled) __atomic_add_fetch(&g_running[l->id], 1, __ATOMIC_SEQ_CST);
  if (pooled && __atomic_load_n(&g_running[1 - l->id], __ATOMIC_SEQ_CST) != 0) bad();
  __atomic_add_fetch(&l->runs[t], 1, __ATOMIC_RELAXED);
  /* Each thread first claims its own task (the launcher task 0). A barrier loop has one task per
   * thread and no thread can finish one before every thread holds one, so the launcher's is
   * task 0 in every such loop. */
  if (l->barrier && (t == 0) != pthread_equal(l->launcher, pthread_self())) bad();
  if (l->barrier) {
    __atomic_add_fetch(&l->arrived, 1, __ATOMIC_SEQ_CST);
    /* 2 s: only a missing thread (a lost wake-up) takes that long. Once one barrier failed,
     * the others give up at once, so that a broken pool fails the test quickly. */
    uint64_t give_up = now_ns() + 2000000000u;
    while (__atomic_load_n(&l->arrived, __ATOMIC_SEQ_CST) < num_tasks)
      if (__atomic_load_n(&g_bad, __ATOMIC_RELAXED) || now_ns() > give_up) {
        bad();
        break;
      }
  }
  busy_wait_ns(l->long_task > 0 && t == l->long_task ? l->long_ns : l->task_ns);
  if (l->long_task > 0 && t == l->long_task && pthread_equal(l->launcher, pthread_self()))
    __atomic_store_n(&l->long_task_on_launcher, 1, __ATOMIC_RELAXED);
  if (l->nested) {
    nested_t n = {pthread_self(), 0};
    if (l->ctx->parallel_launch(l->ctx->pool, nested_task, &n, 3) != 0 || n.next != 3) bad();
  }
  if (pooled) __atomic_sub_fetch(&g_running[l->id], 1, __ATOMIC_SEQ_CST);
  return t == l->fail_task ? 100 + l->id : 0;
}

static int32_t launch_kernel(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)n;
  loop_t* l = &g_loops[*(const int64_t*)args[0]->data];
  l->ctx = ctx;
  l->launcher = pthread_self();
  if (l->barrier && ctx->num_threads != l->num_tasks) return 99; /* resized under the caller */
  return ctx->parallel_launch(ctx->pool, task, l, l->num_tasks);
}

static const int64_t shape1[] = {1};
static const kiln_kernel_param_t params[] = {{"which", kDLInt, 64, 1, 1, 0, shape1}};
static const kiln_kernel_info_t kernels[] = {{"launch", launch_kernel, 1, params, 0, NULL, 0, NULL}};
static const kiln_library_info_t info = {KILN_KERNEL_ABI_VERSION, 1, kernels};

static uint32_t next_random(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

/* Runs g_loops[which] as set up by the caller; returns 1 if every task ran exactly once (or,
 * when one fails, at most once, the failing one once) and the launch returned what it should. */
static int run_loop(kiln_function_t* fn, kiln_tensor_t* which_tensor, int which) {
  loop_t* l = &g_loops[which];
  for (int t = 0; t < MAX_TASKS; ++t) l->runs[t] = 0;
  l->arrived = 0;
  kiln_value_t arg;
  arg.kind = KILN_VALUE_TENSOR;
  arg.u.tensor = which_tensor;
  kiln_status_t st = kiln_function_call(fn, &arg, 1, NULL);
  char code[32];
  snprintf(code, sizeof code, "error code %d", 100 + which);
  int ok = l->fail_task < 0 ? st == KILN_OK
                            : st == KILN_ERR_RUNTIME && strstr(kiln_last_error(), code) &&
                                  l->runs[l->fail_task] == 1;
  for (int64_t t = 0; t < MAX_TASKS; ++t) {
    int32_t runs = __atomic_load_n(&l->runs[t], __ATOMIC_RELAXED);
    if (t >= l->num_tasks) ok &= runs == 0;
    else if (l->fail_task >= 0) ok &= runs <= 1;
    else ok &= runs == 1;
  }
  if (!ok)
    fprintf(stderr, "loop %d: %lld tasks, fail %lld, barrier %d, nested %d: status 0x%x '%s'\n",
            which, (long long)l->num_tasks, (long long)l->fail_task, l->barrier, l->nested,
            (unsigned)st, kiln_last_error());
  return ok;
}

static kiln_tensor_t* which_tensor(int which) {
  kiln_tensor_t* t = NULL;
  DLDataType i64 = {kDLInt, 64, 1};
  DLDevice cpu = {kDLCPU, 0};
  if (kiln_tensor_create(shape1, 1, i64, cpu, &t) == KILN_OK)
    *(int64_t*)kiln_tensor_dltensor(t)->data = which;
  return t;
}

/* One launcher, every kind of loop, resizes in between. */
static void test_single_launcher(kiln_function_t* fn) {
  kiln_tensor_t* w = which_tensor(0);
  uint32_t rng = 12345;
  int32_t threads = 2;
  CHECK_OK(kiln_set_num_threads(threads));
  int failed = 0;
  for (int i = 0; i < 1500 && failed < 5 && !__atomic_load_n(&g_bad, __ATOMIC_RELAXED);
       ++i) {
    loop_t* l = &g_loops[0];
    l->id = 0;
    l->num_tasks = 1 + (int64_t)(next_random(&rng) % RANDOM_TASKS);
    l->fail_task = -1;
    l->task_ns = 0;
    l->barrier = 0;
    l->nested = 0;
    uint32_t kind = next_random(&rng) % 100;
    if (kind < 4) { /* resize */
      threads = 2 + (int32_t)(next_random(&rng) % 3);
      CHECK_OK(kiln_set_num_threads(threads));
    } else if (kind < 10) {
      sleep_us(300); /* longer than the spin budget: the workers go to sleep */
    } else if (kind < 20) {
      l->num_tasks = threads;
      l->barrier = 1;
    } else if (kind < 30) {
      l->fail_task = (int64_t)(next_random(&rng) % (uint32_t)l->num_tasks);
    } else if (kind < 33) {
      l->task_ns = 2500000; /* outlasts the launcher's spin: it blocks until workers leave */
    } else if (kind < 36) {
      l->nested = 1;
    } else if (kind < 60) {
      l->task_ns = 1000;
    }
    if (!run_loop(fn, w, 0)) ++failed;
  }
  CHECK(failed == 0);
  kiln_tensor_release(w);
}

typedef struct {
  kiln_function_t* fn;
  int which;
  int ok;
} launcher_t;

static void* launcher_main(void* arg) {
  launcher_t* a = arg;
  kiln_tensor_t* w = which_tensor(a->which);
  uint32_t rng = 777u + (uint32_t)a->which;
  a->ok = w != NULL;
  for (int i = 0; i < 300 && a->ok && !__atomic_load_n(&g_bad, __ATOMIC_RELAXED); ++i) {
    loop_t* l = &g_loops[a->which];
    l->id = a->which;
    l->num_tasks = 1 + (int64_t)(next_random(&rng) % RANDOM_TASKS);
    l->fail_task = -1;
    if (next_random(&rng) % 8 == 0) l->fail_task = next_random(&rng) % (uint32_t)l->num_tasks;
    l->task_ns = next_random(&rng) % 2 ? 2000 : 0;
    l->barrier = 0;
    l->nested = next_random(&rng) % 16 == 0;
    a->ok = run_loop(a->fn, w, a->which);
    if (next_random(&rng) % 32 == 0) sleep_us(200);
  }
  kiln_tensor_release(w);
  return NULL;
}

/* Two threads launching at once (loops queue), while this one resizes the pool. */
static void test_two_launchers(kiln_function_t* fn) {
  launcher_t a[2] = {{fn, 0, 0}, {fn, 1, 0}};
  pthread_t tids[2];
  for (int i = 0; i < 2; ++i) CHECK(pthread_create(&tids[i], NULL, launcher_main, &a[i]) == 0);
  for (int i = 0; i < 20; ++i) {
    CHECK_OK(kiln_set_num_threads(2 + i % 3));
    sleep_us(1000);
  }
  for (int i = 0; i < 2; ++i) {
    pthread_join(tids[i], NULL);
    CHECK(a[i].ok);
  }
}

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Idle workers spin for a bounded time, then block: 100 ms after a loop, 3 idle workers must
 * have used a few ms of CPU at most (spinning throughout would be ~100 ms per core). */
static void test_idle_pool_uses_no_cpu(kiln_function_t* fn) {
  kiln_tensor_t* w = which_tensor(0);
  CHECK_OK(kiln_set_num_threads(4));
  g_loops[0] = (loop_t){0};
  g_loops[0].num_tasks = 4;
  g_loops[0].fail_task = -1;
  g_loops[0].barrier = 1; /* all three workers are awake and in the loop */
  CHECK(run_loop(fn, w, 0));
  double cpu = cpu_seconds();
  sleep_us(100000);
  cpu = cpu_seconds() - cpu;
  if (cpu > 0.03) fprintf(stderr, "idle pool used %.1f ms of CPU in 100 ms\n", cpu * 1e3);
  CHECK(cpu <= 0.03);
  kiln_tensor_release(w);
}

void kiln_thread_pool_call_begin(void); /* runtime_c/src/internal.h */
void kiln_thread_pool_call_end(void);
void kiln_thread_pool_wait_counts(int32_t* out_sleepers, int64_t* out_wakeups);

/* A VM call wakes the workers that blocked since the last one (kiln_thread_pool_call_begin),
 * so they spin through the call and are there for its first loop. Observed through the pool's
 * counts, not CPU time (a woken worker that yields its CPU on a loaded machine used 0.08 ms of
 * CPU in 200 ms in CI): once the worker blocked after a loop, nothing wakes it while the pool
 * is idle, and a call's begin does. */
static void test_a_call_wakes_sleeping_workers(kiln_function_t* fn) {
  kiln_tensor_t* w = which_tensor(0);
  CHECK_OK(kiln_set_num_threads(2));
  g_loops[0] = (loop_t){0};
  g_loops[0].num_tasks = 2;
  g_loops[0].fail_task = -1;
  CHECK(run_loop(fn, w, 0));
  int32_t sleepers = 0;
  int64_t before = 0, wakeups = 0;
  /* The worker spins 50 us after the loop, then blocks. Wait (up to 5 s) until it has: one
   * sleeper and no wake-up across 20 ms. (A worker counts itself a sleeper just before it looks
   * at the generation a last time: one that finds a new one there wakes without blocking.) A
   * pool whose idle workers keep waking never settles. */
  int settled = 0;
  for (int i = 0; i < 250 && !settled; ++i) {
    kiln_thread_pool_wait_counts(&sleepers, &before);
    sleep_us(20000);
    int32_t sleepers_after = 0;
    kiln_thread_pool_wait_counts(&sleepers_after, &wakeups);
    settled = sleepers == 1 && sleepers_after == 1 && wakeups == before;
  }
  if (!settled)
    fprintf(stderr, "the idle pool's worker did not stay blocked for 20 ms (%d sleepers, %d "
                    "wake-ups in the last 20 ms)\n", (int)sleepers, (int)(wakeups - before));
  CHECK(settled);
  kiln_thread_pool_call_begin();
  for (int i = 0; i < 5000 && wakeups == before; ++i) {
    sleep_us(1000);
    kiln_thread_pool_wait_counts(&sleepers, &wakeups);
  }
  kiln_thread_pool_call_end();
  if (wakeups == before) fprintf(stderr, "a call's begin woke no worker in 5 s\n");
  CHECK(wakeups > before);
  kiln_tensor_release(w);
}

/* A launcher waiting for a worker to finish its task spins (up to 2 ms) rather than block: a
 * blocked launcher is woken by that worker, and the wake-up moved it onto the worker's CPU
 * (bench/RESULTS.md, "Session 13"). Loops of 2 tasks, the launcher's 200 us long (time for a
 * sleeping worker to wake and claim its own) and the worker's 600 us: in the loops where the worker ran its own, the launcher blocks (a voluntary context
 * switch) in fewer than half. It blocked in nearly every one when it spun 50 us. */
static void test_launcher_spins_while_a_worker_finishes(kiln_function_t* fn) {
  kiln_tensor_t* w = which_tensor(0);
  CHECK_OK(kiln_set_num_threads(2));
  int by_worker = 0;
  long blocked = 0;
  for (int i = 0; i < 40; ++i) {
    loop_t* l = &g_loops[0];
    *l = (loop_t){0};
    l->num_tasks = 2;
    l->fail_task = -1;
    l->task_ns = 200000;
    l->long_task = 1;
    l->long_ns = 600000;
    struct rusage before, after;
    getrusage(RUSAGE_THREAD, &before);
    CHECK(run_loop(fn, w, 0));
    getrusage(RUSAGE_THREAD, &after);
    if (__atomic_load_n(&l->long_task_on_launcher, __ATOMIC_RELAXED)) continue;
    ++by_worker;
    blocked += after.ru_nvcsw - before.ru_nvcsw;
  }
  if (by_worker >= 10 && 2 * blocked > by_worker)
    fprintf(stderr, "the launcher blocked %ld times in %d loops\n", blocked, by_worker);
  CHECK(by_worker < 10 || 2 * blocked <= by_worker);
  kiln_tensor_release(w);
}

/* 70 threads and loops of 70 tasks: workers from the 64th on have no bit of their own task
 * (the pool claims own tasks through a 64-bit mask), so they only draw from the counter; every
 * task must still run exactly once. */
static void test_more_threads_than_task_bits(kiln_function_t* fn) {
  kiln_tensor_t* w = which_tensor(0);
  CHECK_OK(kiln_set_num_threads(70));
  for (int i = 0; i < 20; ++i) {
    loop_t* l = &g_loops[0];
    l->id = 0;
    l->num_tasks = 70;
    l->fail_task = -1;
    l->task_ns = i % 2 ? 2000 : 0;
    l->barrier = 0;
    l->nested = 0;
    CHECK(run_loop(fn, w, 0));
  }
  CHECK_OK(kiln_set_num_threads(2));
  kiln_tensor_release(w);
}

int main(void) {
  kiln_module_t* mod = NULL;
  kiln_function_t* fn = NULL;
  CHECK_OK(kiln_module_from_library_info(&info, &mod));
  CHECK_OK(kiln_module_get_function(mod, "launch", &fn));
  if (!fn) return 1;
  test_single_launcher(fn);
  test_two_launchers(fn);
  test_idle_pool_uses_no_cpu(fn);
  test_a_call_wakes_sleeping_workers(fn);
  test_launcher_spins_while_a_worker_finishes(fn);
  test_more_threads_than_task_bits(fn);
  CHECK(__atomic_load_n(&g_bad, __ATOMIC_RELAXED) == 0);
  CHECK_OK(kiln_set_num_threads(0));
  kiln_function_release(fn);
  kiln_module_release(mod);
  if (g_failures) {
    fprintf(stderr, "%d checks failed (%d inside tasks)\n", g_failures, (int)g_bad);
    return 1;
  }
  printf("ALL OK\n");
  return 0;
}
