/* check.h — the check macros of the C tests (runtime_test.c, vm_test.c): a failed check prints
 * where and what, and counts in g_failures; main prints "ALL OK" when
 * none failed. */
#ifndef KILN_TESTS_CHECK_H_
#define KILN_TESTS_CHECK_H_

#include <stdio.h>
#include <string.h>

#include "kiln_runtime.h"

static int g_failures;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                            \
    }                                                                          \
  } while (0)

/* Checks that `call` fails with `status` and that the message contains `text`. */
#define CHECK_ERROR(call, status, text)                                                    \
  do {                                                                                     \
    kiln_status_t st_ = (call);                                                            \
    if (st_ != (status) || !strstr(kiln_last_error(), (text))) {                           \
      fprintf(stderr, "%s:%d: %s gave status 0x%x '%s'; expected 0x%x containing '%s'\n", \
              __FILE__, __LINE__, #call, (unsigned)st_, kiln_last_error(),                 \
              (unsigned)(status), (text));                                                 \
      ++g_failures;                                                                        \
    }                                                                                      \
  } while (0)

#define CHECK_OK(call) CHECK_ERROR(call, KILN_OK, "")

#endif /* KILN_TESTS_CHECK_H_ */
