/* thread_pool.c — the process-wide pool that runs kernels' parallel loops.
 *
 * N threads run a loop: the launching thread plus N-1 workers started at the first parallel
 * loop that needs them. Tasks are handed out through an atomic counter, so uneven tasks balance.
 * Idle workers sleep on a condition variable (no spinning). A woken worker *joins* the loop only
 * while it is still open; the launcher closes it once every task has been claimed and then waits
 * just for the workers that joined. So a loop never waits for a slow wake-up that has nothing
 * left to do, and a small loop costs little more than running it serially.
 * One loop runs at a time; a launch from inside a task runs its tasks serially on that thread
 * (no nested parallelism). The pool is the runtime's only global state, statically initialised,
 * so creating it needs no synchronisation beyond its own mutexes. */
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

void kiln_thread_pool_kernel_ctx(kiln_kernel_ctx_t* ctx) {
  ctx->abi_version = KILN_KERNEL_ABI_VERSION;
  ctx->num_threads = 1;
  ctx->pool = NULL;
  ctx->parallel_launch = pool_launch;
}

#else /* threads */

#include <pthread.h>

typedef struct {
  pthread_mutex_t launch_mu; /* held for a whole launch or resize: one loop at a time */
  pthread_mutex_t mu;        /* guards the fields below */
  pthread_cond_t wake;       /* workers wait here for a new generation or stop */
  pthread_cond_t done;       /* the launcher waits here for the joined workers to leave */
  pthread_t* workers;
  int32_t num_workers;
  int stop;
  uint64_t generation;       /* bumped once per loop */
  uint64_t start_generation; /* the generation new workers start from */
  int open;                  /* the current loop still accepts workers */
  int32_t active;            /* workers that joined the current loop and are still in it */
  /* The current loop: written before the generation is bumped, read only by the launcher and
   * joined workers, and not rewritten until the loop is closed and no worker is active. */
  kiln_task_fn fn;
  void* closure;
  int64_t num_tasks;
  int64_t next_task; /* atomic */
  int32_t status;    /* atomic: the first non-zero task result */
} pool_t;

static pool_t g_pool = {.launch_mu = PTHREAD_MUTEX_INITIALIZER,
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

static void run_tasks(pool_t* p) {
  for (;;) {
    int64_t t = __atomic_fetch_add(&p->next_task, 1, __ATOMIC_RELAXED);
    if (t >= p->num_tasks || __atomic_load_n(&p->status, __ATOMIC_RELAXED) != 0) return;
    int32_t rc = p->fn(t, p->num_tasks, p->closure);
    int32_t ok = 0;
    if (rc != 0)
      __atomic_compare_exchange_n(&p->status, &ok, rc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  }
}

static void* worker_main(void* arg) {
  pool_t* p = arg;
  t_in_task = 1;
  pthread_mutex_lock(&p->mu);
  uint64_t seen = p->start_generation;
  for (;;) {
    while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
    if (p->stop) break;
    seen = p->generation;
    if (!p->open) continue; /* woke too late: every task was already taken */
    ++p->active;
    pthread_mutex_unlock(&p->mu);
    run_tasks(p);
    pthread_mutex_lock(&p->mu);
    if (--p->active == 0 && !p->open) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Caller holds launch_mu. */
static void stop_workers(pool_t* p) {
  if (p->num_workers == 0) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int32_t i = 0; i < p->num_workers; ++i) pthread_join(p->workers[i], NULL);
  kiln_mem_free(p->workers);
  p->workers = NULL;
  p->num_workers = 0;
  p->stop = 0;
}

/* fork() copies only the forking thread: the child must not wait for workers it does not have.
 * The prepare handler takes both locks so that no loop is half-way through at the fork. */
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
  g_pool.active = 0;
  g_pool.open = 0;
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
  p->start_generation = p->generation;
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
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->closure = closure;
  p->num_tasks = num_tasks;
  p->next_task = 0;
  p->status = 0;
  p->open = 1;
  ++p->generation;
  /* Wake as many workers as there are tasks besides the launcher's own. */
  if (num_tasks - 1 >= p->num_workers) pthread_cond_broadcast(&p->wake);
  else
    for (int64_t i = 0; i < num_tasks - 1; ++i) pthread_cond_signal(&p->wake);
  pthread_mutex_unlock(&p->mu);

  t_in_task = 1;
  run_tasks(p);
  t_in_task = 0;

  pthread_mutex_lock(&p->mu);
  p->open = 0; /* every task is claimed: later wake-ups go back to sleep */
  while (p->active > 0) pthread_cond_wait(&p->done, &p->mu);
  int32_t status = p->status;
  pthread_mutex_unlock(&p->mu);
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
