/* thread_pool.c — the process-wide pool that runs kernels' parallel loops.
 *
 * N threads run a loop: the launching thread plus N-1 workers started at the first parallel
 * loop that needs them. Each thread first claims its own task (the launcher task 0, worker k
 * task k), so a thread runs the same part of every loop of one task per thread: consecutive
 * kernels split alike read what their thread wrote from its own core's cache. The rest are handed
 * out through an atomic counter, so uneven tasks balance and a thread's task that it does not
 * take (asleep, descheduled) is run by another.
 * One loop runs on the pool at a time (launch_mu); a loop of one task, a pool of one thread and
 * a launch from inside a task run serially on the calling thread (no nested parallelism).
 *
 * Protocol: spin, then block. A model runs dozens of parallel loops per inference with little
 * serial work between them; a worker that blocked after every loop would make every loop pay a
 * wake-up (tens of us through the kernel, more than many loops' work). So:
 *   - Publishing a loop: the launcher writes the loop (fn, closure, num_tasks, counters), opens
 *     it (`join` = LOOP_OPEN), bumps the atomic `generation`, and only then reads `sleepers`:
 *     when some worker is blocked on the condition variable `wake` it takes the mutex and
 *     signals as many as the loop has tasks besides its own; when every worker is spinning it
 *     takes no lock and makes no system call.
 *   - Waiting for a loop: after a loop a worker spins on `generation` (with a pause
 *     instruction) for a bounded time, KILN_SPIN_NS, then counts itself in `sleepers` and
 *     blocks on `wake`. So an idle process uses no CPU, and a spinning worker gives its core
 *     back after the budget when other threads of this process or others need it. When the pool
 *     alone has more threads than there are cores, workers do not spin at all (spin_ns = 0).
 *     `sleepers` and `generation` are a Dekker pair (each side writes its own, then reads the
 *     other's, all sequentially consistent), so either the launcher sees the sleeper and
 *     signals it under the mutex, or the worker sees the new generation before it waits: no
 *     wake-up is lost.
 *   - Joining: a worker that sees a new generation joins the loop only while it is open (a CAS
 *     on `join`: the LOOP_OPEN bit plus the count of joined workers) and, as far as it can
 *     tell, still has unclaimed tasks. The launcher runs tasks too, and once every task is
 *     claimed it closes the loop (clears LOOP_OPEN) and waits only for the workers that
 *     joined: spinning on `join` for up to KILN_SPIN_IN_CALL_NS (it waits for work in
 *     flight; see there why not less), then blocking on `done`
 *     (`launcher_waiting` is the Dekker pair of the count; the last worker to leave a closed
 *     loop signals it). So a loop never waits for a worker that is asleep or slow to notice,
 *     and a small loop costs little more than running it serially.
 *   - Stopping (a resize): `stop` is set, the generation bumped and `wake` broadcast; workers
 *     check `stop` whenever they see a new generation.
 * The loop's fields are written only while the loop is closed with no worker in it, and a worker
 * relies on them only after its CAS joined: that CAS (acquire) reads the launcher's opening
 * store (release) or a later join in its release sequence, so it sees this loop's fields; a
 * worker's leaving decrement releases its tasks' writes to the launcher.
 * The pool is the runtime's only global state, statically initialised, so creating it needs no
 * synchronisation beyond its own mutexes. */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

/* Nonzero while this thread runs parallel tasks (worker threads: always). */
static KILN_THREAD_LOCAL int t_in_task;

static int32_t run_serially(kiln_task_fn fn, void* closure, int64_t num_tasks) {
  int saved = t_in_task;
  int32_t status = 0;
  t_in_task = 1;
  for (int64_t t = 0; t < num_tasks && status == 0; ++t) status = fn(t, num_tasks, closure);
  t_in_task = saved;
  return status;
}

#if defined(KILN_SINGLE_THREADED)

static int32_t pool_launch(void* pool, kiln_task_fn fn, void* closure, int64_t num_tasks) {
  (void)pool;
  return run_serially(fn, closure, num_tasks);
}

kiln_status_t kiln_set_num_threads(int32_t num_threads) {
  if (num_threads < 0)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_set_num_threads: %d is negative",
                      (int)num_threads);
  return KILN_OK; /* this build always runs on the calling thread */
}

int32_t kiln_get_num_threads(void) { return 1; }

void kiln_thread_pool_call_begin(void) {}
void kiln_thread_pool_wait_counts(int32_t* out_sleepers, int64_t* out_wakeups) {
  *out_sleepers = 0;
  *out_wakeups = 0;
}
void kiln_thread_pool_call_end(void) {}

void kiln_thread_pool_kernel_ctx(kiln_kernel_ctx_t* ctx) {
  ctx->abi_version = KILN_KERNEL_ABI_VERSION;
  ctx->num_threads = 1;
  ctx->pool = NULL;
  ctx->parallel_launch = pool_launch;
}

#else /* threads */

#include <pthread.h>
#include <sched.h>

/* Tells the core this thread is spin-waiting: frees the sibling hyperthread's resources and,
 * on x86, avoids the memory-order mis-speculation flush when the awaited store arrives. */
#if defined(__x86_64__) || defined(__i386__)
#define KILN_CPU_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define KILN_CPU_PAUSE() __asm__ __volatile__("yield" ::: "memory")
#else
#define KILN_CPU_PAUSE() ((void)0)
#endif

/* How long an idle worker spins before it blocks: 50 us. Blocking costs tens of us: `make -C
 * runtime_c bench` (2-vCPU VM) measures ~14 us for the launcher to wake a sleeping worker (a
 * futex wake, in a VM an inter-processor interrupt) and ~40 us until that worker takes part in
 * the loop, against ~0.6 us when it was spinning. Spinning about as long as a block costs is
 * the classic spin-then-block rule: what it pays, spinning plus blocking, is never more than
 * twice what an oracle that knew when the next loop comes would pay. It also covers the gaps between one
 * inference's loops (a few serial kernels and the VM's dispatch: usually well under 50 us), so
 * those loops pay no wake-up. Much longer (OpenMP runtimes spin for milliseconds) would hold
 * cores that another pool in the same process, or another process, needs when there are more
 * threads than cores. */
#define KILN_SPIN_NS 50000u
/* While a VM call is in flight (kiln_thread_pool_call_begin/end), an idle worker spins up to
 * 2 ms instead. On the 2-vCPU VM, waking a blocked worker usually takes 14-50 us but its p90 is
 * about 2 ms (the host deschedules the idle vCPU): a decoder inference whose worker blocked in
 * a gap between two of its ~40 parallel loops took 2.6-4.8 ms on 2 threads instead of 2.0 ms.
 * Between calls the short spin applies again, so an idle process holds no core for long. */
#define KILN_SPIN_IN_CALL_NS 2000000u
/* A launcher waiting for the workers in its loop to finish their tasks spins that long too
 * (when the pool spins at all): it waits for work in flight, not for work that may never come.
 * It used to block after 50 us, and a blocked launcher is woken by the last worker to leave,
 * which the kernel's wake-up placement moved onto that worker's vCPU: on the 2-vCPU VM, after
 * the process idled, both threads then took turns on one vCPU, call after call, and a
 * two-thread 49 x 4608 x 1000 matmul (one loop of two 0.85 ms tasks) ran at one thread's
 * speed for 5-20 calls (bench/RESULTS.md, "the idle effect", "Session 13"). */
/* VM calls in flight in this process, and when the last one ended: hints for how long idle
 * workers spin (relaxed; a stale read only changes a spin's length). */
static int32_t g_calls_in_flight;
static uint64_t g_last_call_end_ns;
/* The clock is read once every this many pauses (a pause is 10-150 cycles; a clock read via the
 * vDSO ~20 ns), so reading it costs little and the budget is not overrun by much. */
#define KILN_SPIN_CLOCK_EVERY 64u
/* A spinning thread yields its CPU once every this many pauses (every 16th clock read, some
 * 10-50 us). When the scheduler has put a spinning worker on the same CPU as the thread it
 * waits for, a spin without yields holds that CPU for the rest of its time slice while the other
 * thread, which would end the wait, cannot run: on the 2-vCPU VM, after the process idled ~0.1 s
 * the pool's worker woke on the caller's vCPU and a 2-thread matrix-vector product took 4.5 ms
 * for its next calls instead of 1.3 ms (2.4 ms on one thread; bench/RESULTS.md, "the idle
 * effect"). sched_yield returns at once when nothing else waits for the CPU. */
#define KILN_SPIN_YIELD_EVERY (16u * KILN_SPIN_CLOCK_EVERY)

typedef struct {
  uint32_t pauses;
  uint64_t start_ns; /* 0 until the first clock read: a short wait never reads the clock */
} spin_t;

/* One pause of a spin: 0, or on every KILN_SPIN_CLOCK_EVERY-th pause the clock (ns), the
 * spin's start then recorded in start_ns. */
static uint64_t spin_pause(spin_t* s) {
  KILN_CPU_PAUSE();
  if (++s->pauses % KILN_SPIN_CLOCK_EVERY != 0) return 0;
  if (s->pauses % KILN_SPIN_YIELD_EVERY == 0) sched_yield();
  uint64_t now = kiln_platform_now_ns();
  if (s->start_ns == 0) s->start_ns = now;
  return now;
}

/* One pause of the launcher's spin; 0 once it has lasted KILN_SPIN_IN_CALL_NS. */
static int spin_once(spin_t* s) {
  uint64_t now = spin_pause(s);
  return now == 0 || now - s->start_ns < KILN_SPIN_IN_CALL_NS;
}

#define LOOP_OPEN 0x80000000u /* in `join`: the current loop still accepts workers */

typedef struct {
  /* What idle workers spin on, alone on its cache line: their reads then do not slow down the
   * launcher's claims and joins on the next line. */
  uint64_t generation; /* bumped once per loop (and to stop workers) */
  char pad1[64 - 8];
  /* The current loop, written by the launcher and read by every thread in it. All of these are
   * accessed with __atomic builtins except fn and closure, ordered through `join` (see top). */
  uint32_t join;       /* LOOP_OPEN | number of workers in the current loop */
  int32_t status;      /* the first non-zero task result */
  int64_t next_task;
  int64_t num_tasks;
  kiln_task_fn fn;
  void* closure;
  uint64_t owned; /* bit t: task t (< 64) is claimed; see run_tasks */
  char pad2[64 - 48];
  int32_t sleepers;         /* workers blocked (or about to block) on `wake` */
  int32_t launcher_waiting; /* the launcher is blocked (or about to block) on `done` */
  int32_t stop;             /* workers exit at the next generation */
  int32_t started;          /* atomic: workers started since the last start_workers */
  int64_t wakeups;          /* atomic: times a worker stopped blocking on `wake` (for tests) */
  pthread_mutex_t launch_mu; /* held for a whole launch or resize: one loop at a time */
  pthread_mutex_t mu;        /* the mutex of both condition variables */
  pthread_cond_t wake;       /* workers block here for a new generation */
  pthread_cond_t done;       /* the launcher blocks here for the joined workers to leave */
  /* Touched only with launch_mu held (and by fork handlers). */
  pthread_t* workers;
  int32_t num_workers;
  uint64_t start_generation; /* the generation new workers start from */
  /* KILN_SPIN_NS, or 0 when the pool alone has more threads than the machine has cores: then a
   * spinning thread would only take the core of one with work to do. Written before the
   * workers start, so they read it without synchronisation. */
  uint32_t spin_ns;
} pool_t;

#if defined(__GNUC__)
#define KILN_CACHE_ALIGNED __attribute__((aligned(64)))
#else
#define KILN_CACHE_ALIGNED
#endif

static pool_t g_pool KILN_CACHE_ALIGNED = {.launch_mu = PTHREAD_MUTEX_INITIALIZER,
                                           .mu = PTHREAD_MUTEX_INITIALIZER,
                                           .wake = PTHREAD_COND_INITIALIZER,
                                           .done = PTHREAD_COND_INITIALIZER};
static int32_t g_num_threads;     /* atomic; 0 means the default */
static int32_t g_default_threads; /* atomic; 0 until first asked */
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

int32_t kiln_get_num_threads(void) {
  int32_t n = __atomic_load_n(&g_num_threads, __ATOMIC_RELAXED);
  if (n > 0) return n;
  n = __atomic_load_n(&g_default_threads, __ATOMIC_RELAXED);
  if (n == 0) {
    n = kiln_platform_num_cores(); /* racing callers compute the same value */
    __atomic_store_n(&g_default_threads, n, __ATOMIC_RELAXED);
  }
  return n;
}

/* Claims and runs tasks until none is left or one failed. Participant `t` (the launcher 0,
 * workers 1, 2, ... in the order they started) first claims its own task `t`, then draws from
 * the counter. A kernel's loop has one task per thread, so with one worker each thread runs the
 * same part of every loop: what a conv wrote stays in the cache of the core that reads it next.
 * A task below 64 is claimed with its bit in `owned` (its owner may have taken it); the counter
 * alone hands out the others. The loop's description is read once: its cache line is written by
 * every claim. */
static void run_tasks(pool_t* p, int64_t t) {
  kiln_task_fn fn = p->fn;
  void* closure = p->closure;
  int64_t num_tasks = __atomic_load_n(&p->num_tasks, __ATOMIC_RELAXED);
  for (int own = 1;; own = 0, t = __atomic_fetch_add(&p->next_task, 1, __ATOMIC_RELAXED)) {
    if (t >= num_tasks) {
      if (own) continue;
      return;
    }
    uint64_t bit = t < 64 ? (uint64_t)1 << t : 0;
    if (__atomic_fetch_or(&p->owned, bit, __ATOMIC_RELAXED) & bit) continue;
    if (__atomic_load_n(&p->status, __ATOMIC_RELAXED) != 0) return;
    int32_t rc = fn(t, num_tasks, closure);
    int32_t ok = 0;
    if (rc != 0)
      __atomic_compare_exchange_n(&p->status, &ok, rc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  }
}

/* A call wakes the workers that blocked since the last one: they then spin through the call
 * (KILN_SPIN_IN_CALL_NS) and are there for its first parallel loop. A blocked worker's vCPU
 * can take milliseconds to run again, so a worker woken only by that loop missed most of the
 * call: on the 2-vCPU VM a decoder called every 20 ms took 5.0 ms on two threads and 4.9 on
 * one (1.9 back to back). The generation is bumped with no loop open: a worker that wakes
 * finds nothing to join and waits again, spinning. */
void kiln_thread_pool_call_begin(void) {
  __atomic_add_fetch(&g_calls_in_flight, 1, __ATOMIC_RELAXED);
  pool_t* p = &g_pool;
  if (t_in_task || __atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) == 0) return;
  __atomic_add_fetch(&p->generation, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_lock(&p->mu);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
}
void kiln_thread_pool_wait_counts(int32_t* out_sleepers, int64_t* out_wakeups) {
  *out_sleepers = __atomic_load_n(&g_pool.sleepers, __ATOMIC_SEQ_CST);
  *out_wakeups = __atomic_load_n(&g_pool.wakeups, __ATOMIC_SEQ_CST);
}
void kiln_thread_pool_call_end(void) {
  __atomic_store_n(&g_last_call_end_ns, kiln_platform_now_ns(), __ATOMIC_RELAXED);
  __atomic_sub_fetch(&g_calls_in_flight, 1, __ATOMIC_RELAXED);
}

/* One pause of an idle worker's spin; 0 once it has lasted its budget: KILN_SPIN_IN_CALL_NS
 * while a VM call is in flight, else the pool's spin_ns (0 when oversubscribed: no spin)
 * counted from the later of the spin's start and the last call's end, so back-to-back calls
 * find the worker still spinning. */
static int worker_spin_once(spin_t* s, const pool_t* p) {
  uint64_t now = spin_pause(s);
  if (now == 0) return 1;
  if (p->spin_ns && __atomic_load_n(&g_calls_in_flight, __ATOMIC_RELAXED))
    return now - s->start_ns < KILN_SPIN_IN_CALL_NS;
  uint64_t from = __atomic_load_n(&g_last_call_end_ns, __ATOMIC_RELAXED);
  if (from < s->start_ns || from > now) from = s->start_ns;
  return now - from < p->spin_ns;
}

/* Waits for a generation other than `seen` and returns it: spins, then blocks. */
static uint64_t wait_for_generation(pool_t* p, uint64_t seen) {
  spin_t spin = {0, 0};
  uint64_t g;
  while ((g = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE)) == seen)
    if (!worker_spin_once(&spin, p)) break;
  if (g != seen) return g;
  pthread_mutex_lock(&p->mu);
  /* Dekker with pool_launch: register as a sleeper, then look at the generation again. */
  __atomic_add_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
  while ((g = __atomic_load_n(&p->generation, __ATOMIC_SEQ_CST)) == seen)
    pthread_cond_wait(&p->wake, &p->mu);
  __atomic_sub_fetch(&p->sleepers, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&p->wakeups, 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&p->mu);
  return g;
}

/* Joins the current loop if it is still open. The loop joined may be newer than the generation
 * the caller saw; that is fine: it is open, so its tasks are there to be claimed. */
static int try_join(pool_t* p) {
  /* Not when every task is claimed already (the launcher often claims all of a small loop's
   * tasks before a worker notices it): joining would only make the launcher wait for this
   * worker to leave. A stale look only costs a join or a missed one; the CAS decides. */
  if (__atomic_load_n(&p->next_task, __ATOMIC_RELAXED) >=
      __atomic_load_n(&p->num_tasks, __ATOMIC_RELAXED))
    return 0;
  uint32_t s = __atomic_load_n(&p->join, __ATOMIC_RELAXED);
  while (s & LOOP_OPEN)
    if (__atomic_compare_exchange_n(&p->join, &s, s + 1, 1, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
      return 1;
  return 0;
}

/* Leaves the loop joined; the last to leave a closed loop wakes a launcher that blocked. The
 * decrement releases this worker's task writes to the launcher. */
static void leave(pool_t* p) {
  if (__atomic_sub_fetch(&p->join, 1, __ATOMIC_SEQ_CST) == 0 &&
      __atomic_load_n(&p->launcher_waiting, __ATOMIC_SEQ_CST)) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->mu);
  }
}

static void* worker_main(void* arg) {
  pool_t* p = arg;
  t_in_task = 1;
  /* This worker's participant id, fixed for its life: 1, 2, ... in the order workers start;
   * from 64 on none (an own task needs a bit of `owned`), so it only draws from the counter. */
  int64_t id = __atomic_add_fetch(&p->started, 1, __ATOMIC_RELAXED);
  if (id >= 64) id = INT64_MAX;
  uint64_t seen = p->start_generation; /* written before this thread was created */
  for (;;) {
    seen = wait_for_generation(p, seen);
    if (__atomic_load_n(&p->stop, __ATOMIC_RELAXED)) break; /* ordered by the generation */
    if (try_join(p)) {
      run_tasks(p, id);
      leave(p);
    }
  }
  return NULL;
}

/* Closes the current loop (every task is claimed) and waits for the workers that joined it. */
static void close_and_wait(pool_t* p) {
  if (__atomic_and_fetch(&p->join, ~LOOP_OPEN, __ATOMIC_ACQ_REL) == 0) return;
  spin_t spin = {0, 0};
  while (p->spin_ns && __atomic_load_n(&p->join, __ATOMIC_ACQUIRE) != 0)
    if (!spin_once(&spin)) break;
  if (__atomic_load_n(&p->join, __ATOMIC_ACQUIRE) == 0) return;
  pthread_mutex_lock(&p->mu);
  /* Dekker with leave(): announce the wait, then look at the count again. */
  __atomic_store_n(&p->launcher_waiting, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&p->join, __ATOMIC_SEQ_CST) != 0) pthread_cond_wait(&p->done, &p->mu);
  __atomic_store_n(&p->launcher_waiting, 0, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&p->mu);
}

/* Caller holds launch_mu; no loop is running. */
static void stop_workers(pool_t* p) {
  if (p->num_workers == 0) return;
  __atomic_store_n(&p->stop, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&p->generation, 1, __ATOMIC_SEQ_CST); /* releases `stop` to spinners */
  pthread_mutex_lock(&p->mu); /* a worker between its check and its wait holds mu */
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int32_t i = 0; i < p->num_workers; ++i) pthread_join(p->workers[i], NULL);
  kiln_mem_free(p->workers);
  p->workers = NULL;
  p->num_workers = 0;
  __atomic_store_n(&p->stop, 0, __ATOMIC_RELAXED);
}

/* fork() copies only the forking thread: the child must not wait for workers it does not have.
 * The prepare handler takes both locks so that no loop is half-way through at the fork and no
 * worker is half-way into a wait. */
static void atfork_prepare(void) {
  pthread_mutex_lock(&g_pool.launch_mu);
  pthread_mutex_lock(&g_pool.mu);
}

static void atfork_parent(void) {
  pthread_mutex_unlock(&g_pool.mu);
  pthread_mutex_unlock(&g_pool.launch_mu);
}

static void atfork_child(void) {
  g_pool.workers = NULL; /* the parent's array is left behind, once per fork */
  g_pool.num_workers = 0;
  g_pool.join = 0;
  g_pool.sleepers = 0;
  g_pool.launcher_waiting = 0;
  g_pool.stop = 0;
  pthread_cond_init(&g_pool.wake, NULL); /* forget waiters that do not exist here */
  pthread_cond_init(&g_pool.done, NULL);
  atfork_parent();
}

static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

/* Caller holds launch_mu and no worker runs. Starts up to `count`; fewer if the OS refuses. */
static void start_workers(pool_t* p, int32_t count) {
  if (count <= 0) return;
  pthread_once(&g_atfork_once, register_atfork);
  p->workers = kiln_mem_alloc((size_t)count * sizeof(pthread_t));
  if (!p->workers) return;
  p->start_generation = __atomic_load_n(&p->generation, __ATOMIC_RELAXED);
  p->started = 0;
  p->spin_ns = count + 1 > kiln_platform_num_cores() ? 0 : KILN_SPIN_NS;
  while (p->num_workers < count &&
         pthread_create(&p->workers[p->num_workers], NULL, worker_main, p) == 0)
    ++p->num_workers;
  if (p->num_workers == 0) {
    kiln_mem_free(p->workers);
    p->workers = NULL;
  }
}

static int32_t pool_launch(void* pool, kiln_task_fn fn, void* closure, int64_t num_tasks) {
  pool_t* p = pool;
  if (num_tasks <= 0) return 0;
  if (t_in_task || num_tasks == 1 || kiln_get_num_threads() == 1)
    return run_serially(fn, closure, num_tasks);
  pthread_mutex_lock(&p->launch_mu);
  int32_t want = kiln_get_num_threads() - 1;
  if (p->num_workers != want) {
    stop_workers(p);
    start_workers(p, want);
  }
  if (p->num_workers == 0) { /* no threads to be had: still correct, just serial */
    pthread_mutex_unlock(&p->launch_mu);
    return run_serially(fn, closure, num_tasks);
  }
  /* Publish: the loop is closed and no worker is in it, so nobody reads these now. */
  p->fn = fn;
  p->closure = closure;
  __atomic_store_n(&p->num_tasks, num_tasks, __ATOMIC_RELAXED); /* also read before joining */
  __atomic_store_n(&p->next_task, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&p->owned, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&p->status, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&p->join, LOOP_OPEN, __ATOMIC_RELEASE);
  /* Dekker with wait_for_generation: bump the generation, then look for sleepers. Spinning
   * workers need nothing more. */
  __atomic_add_fetch(&p->generation, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) > 0) {
    pthread_mutex_lock(&p->mu);
    /* As many as there are tasks besides the launcher's own (spinners may take some first). */
    if (num_tasks - 1 >= p->num_workers) pthread_cond_broadcast(&p->wake);
    else
      for (int64_t i = 0; i < num_tasks - 1; ++i) pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mu);
  }

  t_in_task = 1;
  run_tasks(p, 0);
  t_in_task = 0;

  close_and_wait(p);
  int32_t status = __atomic_load_n(&p->status, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&p->launch_mu);
  return status;
}

kiln_status_t kiln_set_num_threads(int32_t num_threads) {
  if (num_threads < 0)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_set_num_threads: %d is negative",
                      (int)num_threads);
  if (t_in_task)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "kiln_set_num_threads: cannot be called from inside a parallel task");
  pthread_mutex_lock(&g_pool.launch_mu);
  __atomic_store_n(&g_num_threads, num_threads, __ATOMIC_RELAXED);
  if (g_pool.num_workers != kiln_get_num_threads() - 1) stop_workers(&g_pool);
  pthread_mutex_unlock(&g_pool.launch_mu);
  return KILN_OK;
}

void kiln_thread_pool_kernel_ctx(kiln_kernel_ctx_t* ctx) {
  ctx->abi_version = KILN_KERNEL_ABI_VERSION;
  ctx->num_threads = t_in_task ? 1 : kiln_get_num_threads();
  ctx->pool = &g_pool;
  ctx->parallel_launch = pool_launch;
}

#endif
