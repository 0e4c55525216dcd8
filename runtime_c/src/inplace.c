/* inplace.c — arguments a VM function updates in place (a KV cache): declared by the
 * KILN_PARAM_WRITTEN flag of a FUNCTIONS parameter (executable format version 3).
 *
 * The argument check (kiln_kernel_check_args) already refuses a read-only tensor there (a
 * constant could be mapped from the library file). This adds what only the whole call can see:
 * the written argument must not share memory with any other argument, or the function would
 * read values it has already overwritten (its kernels assume distinct buffers). */
#include "internal.h"

kiln_status_t kiln_check_written_args(const kiln_kernel_info_t* k, const kiln_value_t* args,
                                      int32_t num_args) {
  for (int32_t i = 0; i < num_args; ++i) {
    if (!(k->params[i].flags & KILN_PARAM_WRITTEN)) continue;
    const DLTensor* w = kiln_tensor_dltensor(args[i].u.tensor);
    uintptr_t lo_w, hi_w;
    kiln_byte_range(w, &lo_w, &hi_w);
    if (lo_w == hi_w) continue; /* empty */
    for (int32_t j = 0; j < num_args; ++j) {
      if (j == i) continue;
      const DLTensor* t = kiln_tensor_dltensor(args[j].u.tensor);
      uintptr_t lo, hi;
      kiln_byte_range(t, &lo, &hi);
      if (lo < hi && lo < hi_w && lo_w < hi)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "%s: argument %d '%s' is updated in place and shares memory with argument "
                          "%d '%s'; pass distinct buffers", k->name, (int)i, k->params[i].name, (int)j,
                          k->params[j].name);
    }
  }
  return KILN_OK;
}
