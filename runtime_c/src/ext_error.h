/* ext_error.h — formatted errors for the optional libraries beside the runtime (cuda/, strings/).
 * They link libkiln_runtime.so and report through its public kiln_set_last_error; the runtime's
 * own kiln_error (internal.h) is hidden, to keep the size-bounded library's exports small. */
#ifndef KILN_EXT_ERROR_H
#define KILN_EXT_ERROR_H

#include <stdarg.h>
#include <stdio.h>

#include "kiln_runtime.h"

/* Formats the message (at most 1,023 bytes; longer ones are cut), makes it this thread's last
 * error and returns `status`. Usage: return kiln_ext_fail(KILN_ERR_..., "%s: ...", name); */
static inline kiln_status_t kiln_ext_fail(kiln_status_t status, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kiln_set_last_error(status, msg);
}

#endif /* KILN_EXT_ERROR_H */
