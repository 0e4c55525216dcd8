/* registry.c — the process-wide registry of external functions (kiln_register_function), which
 * executables call by name (call_dps_packed). A list under one mutex: lookups happen at a VM's
 * init, not per call. References are dropped outside the lock, because releasing a function may
 * run its owner's deleter (a binding's callback that takes the Python GIL, say), which must not
 * wait on the registry. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "internal.h"

#if defined(KILN_SINGLE_THREADED)
#define LOCK()
#define UNLOCK()
#else
#include <pthread.h>
static pthread_mutex_t g_registry_mu = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&g_registry_mu)
#define UNLOCK() pthread_mutex_unlock(&g_registry_mu)
#endif

typedef struct entry_t {
  struct entry_t* next;
  kiln_function_t* function; /* one reference */
  char name[];
} entry_t;

static entry_t* g_entries; /* guarded by the mutex */

/* The link pointing at the entry named `name`, or at the list's end. Call with the lock held. */
static entry_t** find(const char* name) {
  entry_t** link = &g_entries;
  while (*link && strcmp((*link)->name, name) != 0) link = &(*link)->next;
  return link;
}

kiln_status_t kiln_register_function(const char* name, kiln_function_t* function,
                                     int32_t override) {
  if (!name || !name[0] || !function)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "kiln_register_function: name (non-empty) and function must not be NULL");
  size_t n = strlen(name) + 1;
  entry_t* fresh = kiln_mem_alloc(sizeof *fresh + n); /* before locking: the common case adds */
  if (!fresh)
    return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory registering function '%s'", name);
  memcpy(fresh->name, name, n);
  fresh->next = NULL;
  fresh->function = function;
  kiln_function_t* replaced = NULL;
  kiln_status_t st = KILN_OK;
  LOCK();
  entry_t** link = find(name);
  if (*link && !override) {
    st = KILN_ERR_INVALID_ARGUMENT;
  } else {
    kiln_function_retain(function);
    if (*link) {
      replaced = (*link)->function;
      (*link)->function = function;
    } else {
      *link = fresh;
      fresh = NULL;
    }
  }
  UNLOCK();
  kiln_mem_free(fresh);
  kiln_function_release(replaced);
  if (st != KILN_OK)
    return kiln_error(st, "external function '%s' is already registered (pass override to replace it)",
                      name);
  return KILN_OK;
}

kiln_status_t kiln_get_registered_function(const char* name, kiln_function_t** out_function) {
  if (!name || !out_function)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "kiln_get_registered_function: name and out_function must not be NULL");
  kiln_function_t* fn = NULL;
  LOCK();
  entry_t* e = *find(name);
  if (e) {
    fn = e->function;
    kiln_function_retain(fn);
  }
  UNLOCK();
  if (!fn) return kiln_error(KILN_ERR_NOT_FOUND, "no external function '%s' is registered", name);
  *out_function = fn;
  return KILN_OK;
}

kiln_status_t kiln_unregister_function(const char* name) {
  if (!name)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_unregister_function: name must not be NULL");
  LOCK();
  entry_t** link = find(name);
  entry_t* e = *link;
  if (e) *link = e->next;
  UNLOCK();
  if (!e) return kiln_error(KILN_ERR_NOT_FOUND, "no external function '%s' is registered", name);
  kiln_function_release(e->function);
  kiln_mem_free(e);
  return KILN_OK;
}
