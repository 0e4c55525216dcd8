/* fuzz_static.c — libFuzzer target over the static-bundle entry, kiln_module_from_static: a
 * kernel table as a program linking a model statically would pass it (kiln_library_info_t,
 * normally generated) plus an executable blob, both from the input. The table is validated
 * first (library.c: ABI version, counts, names, dtypes, ndim, symbolic and derived dimensions,
 * duplicates), then the blob is loaded against it and run (fuzz_common.h). The kernels are one
 * stand-in that reads every byte of every tensor it is given, so a tensor smaller than its
 * shape says is an AddressSanitizer report.
 *
 * Input: a table header, then the blob (the rest of the input):
 *   u8 abi (0: the current KILN_KERNEL_ABI_VERSION, else taken as the version)
 *   u8 num_kernels (taken as int8: negative counts are tried too; at most 4 are built)
 *   per kernel: u8 name (index into kNames), i8 num_params, i8 num_sym, i8 num_derived,
 *     per param (min(num_params, 6) of them): u8 name, u8 dtype code, u8 bits, u8 lanes,
 *       i8 ndim, u8 flags, then min(max(ndim, 0), 6) shape entries as i8
 *     per derived dim (min(num_derived, 3)): u8 op, u8 flags, i8 a, i8 b
 * tests/reliability/fuzz_seeds.py writes seeds in this format for the fixture kernels. */
#include "fuzz_common.h"

static const char* const kNames[] = {"main", "scale", "concat", "rowsum", "m", "n", "A", "B", "", "x"};
#define NUM_NAMES (sizeof kNames / sizeof kNames[0])

typedef struct {
  const uint8_t* p;
  size_t left;
} reader_t;

static int rd(reader_t* r) { /* the next byte, or 0 past the end */
  if (!r->left) return 0;
  --r->left;
  return *r->p++;
}

static int32_t stand_in_kernel(const kiln_kernel_ctx_t* ctx, DLTensor* const* args, int32_t n) {
  (void)ctx;
  volatile uint8_t sink = 0;
  for (int32_t i = 0; i < n; ++i) {
    uint64_t bytes = (uint64_t)(args[i]->dtype.bits * args[i]->dtype.lanes + 7) / 8;
    for (int32_t d = 0; d < args[i]->ndim; ++d) bytes *= (uint64_t)args[i]->shape[d];
    const uint8_t* data = (const uint8_t*)args[i]->data + args[i]->byte_offset;
    for (uint64_t b = 0; b < bytes; ++b) sink ^= data[b];
  }
  return 0;
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc, (void)argv;
  fuzz_setup(); /* the argument pool and test.relu_shift; KILN_FUZZ_LIBS is not needed */
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  reader_t r = {data, size};
  kiln_library_info_t info;
  kiln_kernel_info_t kernels[4];
  kiln_kernel_param_t params[4][6];
  int64_t shapes[4][6][6];
  kiln_derived_dim_t derived[4][3];
  const char* sym_names[] = {"m", "n", "k"};
  memset(kernels, 0, sizeof kernels);
  memset(params, 0, sizeof params);
  int abi = rd(&r);
  info.abi_version = abi ? (uint32_t)abi : KILN_KERNEL_ABI_VERSION;
  info.num_kernels = (int8_t)rd(&r);
  info.kernels = kernels;
  if (info.num_kernels > 4) info.num_kernels = 4; /* kernels has 4 entries; negative stays */
  int nk = info.num_kernels < 0 ? 0 : info.num_kernels;
  for (int k = 0; k < nk; ++k) {
    kiln_kernel_info_t* ki = &kernels[k];
    ki->name = kNames[rd(&r) % NUM_NAMES];
    ki->fn = stand_in_kernel;
    ki->num_params = (int8_t)rd(&r);
    ki->num_sym = (int8_t)rd(&r);
    ki->num_derived = (int8_t)rd(&r);
    ki->params = params[k];
    ki->sym_names = sym_names;
    ki->derived = derived[k];
    if (ki->num_sym > 3) ki->num_sym = 3; /* sym_names has 3 entries */
    if (ki->num_derived > 3) ki->num_derived = 3;
    if (ki->num_params > 6) ki->num_params = 6;
    for (int i = 0; i < ki->num_params; ++i) {
      kiln_kernel_param_t* p = &params[k][i];
      p->name = kNames[rd(&r) % NUM_NAMES];
      p->dtype_code = (uint8_t)rd(&r);
      p->dtype_bits = (uint8_t)rd(&r);
      p->dtype_lanes = (uint16_t)rd(&r);
      p->ndim = (int8_t)rd(&r);
      p->flags = (uint32_t)rd(&r);
      p->shape = shapes[k][i];
      int nd = p->ndim < 0 ? 0 : p->ndim > 6 ? 6 : p->ndim;
      if (p->ndim > 6) p->ndim = 6; /* shapes has 6 entries */
      for (int d = 0; d < nd; ++d) shapes[k][i][d] = (int8_t)rd(&r);
    }
    for (int j = 0; j < ki->num_derived; ++j) {
      derived[k][j].op = (uint32_t)rd(&r);
      derived[k][j].flags = (uint32_t)rd(&r);
      derived[k][j].a = (int8_t)rd(&r);
      derived[k][j].b = (int8_t)rd(&r);
    }
  }
  void* blob = NULL;
  if (kiln_memory_alloc(r.left, &blob) != KILN_OK) return 0;
  if (r.left) memcpy(blob, r.p, r.left);
  kiln_module_t* lib = NULL;
  kiln_status_t st = kiln_module_from_static(&info, r.left ? blob : NULL, r.left, &lib);
  if (st == KILN_OK) {
    /* the kernels themselves, on the argument pool, and the blob's VM */
    int32_t n = kiln_module_num_functions(lib);
    for (int32_t f = 0; f < n; ++f) {
      kiln_function_t* fn = NULL;
      if (kiln_module_get_function(lib, kiln_module_function_name(lib, f), &fn) != KILN_OK) continue;
      for (int t = 0; t + 1 < FUZZ_NUM_TENSORS; ++t) {
        kiln_value_t args[2] = {fuzz_tv(g_tensors[t]), fuzz_tv(g_tensors[t + 1])};
        for (int32_t na = 1; na <= 2; ++na) {
          kiln_value_t res = {KILN_VALUE_NULL, {0}};
          if (kiln_function_call(fn, args, na, &res) == KILN_OK) kiln_value_release(&res);
        }
      }
      kiln_function_release(fn);
    }
    fuzz_load_and_run(lib);
    kiln_module_release(lib);
  } else if (kiln_last_error()[0] == '\0') {
    abort();
  }
  kiln_memory_free(blob);
  return 0;
}
