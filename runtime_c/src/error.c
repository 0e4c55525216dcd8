/* error.c — status names and the per-thread last-error message. */
#include <string.h>

#include "internal.h"

#define KILN_ERROR_CAPACITY 1024

/* Per thread, so concurrent callers never see each other's messages. */
static KILN_THREAD_LOCAL char g_last_error[KILN_ERROR_CAPACITY];

const char* kiln_last_error(void) { return g_last_error; }

kiln_status_t kiln_set_last_error(kiln_status_t status, const char* message) {
  size_t n = message ? strlen(message) : 0;
  if (n >= KILN_ERROR_CAPACITY) n = KILN_ERROR_CAPACITY - 1;
  if (n) memcpy(g_last_error, message, n);
  g_last_error[n] = '\0';
  return status;
}

kiln_status_t kiln_error(kiln_status_t status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_vformat(g_last_error, KILN_ERROR_CAPACITY, fmt, ap);
  va_end(ap);
  return status;
}

const char* kiln_status_string(kiln_status_t status) {
  switch (status) {
    case KILN_OK: return "ok";
    case KILN_ERR_INTERNAL: return "internal error";
    case KILN_ERR_RUNTIME: return "runtime failure";
    case KILN_ERR_INVALID_ARGUMENT: return "invalid argument";
    case KILN_ERR_SHAPE_MISMATCH: return "shape mismatch";
    case KILN_ERR_DTYPE_MISMATCH: return "dtype mismatch";
    case KILN_ERR_DEVICE_MISMATCH: return "device mismatch";
    case KILN_ERR_UNSUPPORTED: return "unsupported";
    case KILN_ERR_INVALID_STATE: return "invalid state";
    case KILN_ERR_NOT_FOUND: return "not found";
    case KILN_ERR_IO: return "i/o error";
    case KILN_ERR_INVALID_FORMAT: return "invalid format";
    case KILN_ERR_VERSION_MISMATCH: return "version mismatch";
    case KILN_ERR_OUT_OF_MEMORY: return "out of memory";
    default: return "unknown status";
  }
}
