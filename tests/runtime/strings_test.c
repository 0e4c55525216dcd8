/* libkiln_strings under AddressSanitizer + UBSan (test_strings.py builds and runs it): valid
 * blocks are accepted; blocks with bytes mutated at random are either refused by
 * kiln_str_validate with KILN_ERR_INVALID_FORMAT, or accepted and then read by every kernel
 * without a memory error; the same blocks made string tensors (kiln_str_tensor_from_block) are
 * refused, or read by every function compiled models call (kiln_strings_register), whose
 * results are released without a leak. Prints "ALL OK". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_strings.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c)) {                                                               \
      printf("FAIL line %d: %s (%s)\n", __LINE__, #c, kiln_last_error());     \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* A block of the n strings s[] (8-byte aligned: uint64_t storage). */
static uint64_t* make(const char** s, uint64_t n, uint64_t* nbytes) {
  uint64_t i, pos = n * 16, total = n * 16;
  uint64_t* b;
  for (i = 0; i < n; i++) total += strlen(s[i]);
  b = calloc(total / 8 + 1, 8);
  for (i = 0; i < n; i++) {
    b[2 * i] = pos, b[2 * i + 1] = strlen(s[i]);
    memcpy((char*)b + pos, s[i], strlen(s[i]));
    pos += strlen(s[i]);
  }
  *nbytes = total;
  return b;
}

static void run_kernels(const void* b, uint64_t n) {
  int64_t shape[1] = {(int64_t)n}, one[1] = {1}, zero[1] = {0};
  uint8_t* flags = malloc(n + 1);
  int64_t* idx = malloc((n + 1) * sizeof(int64_t));
  void* out;
  uint64_t nb, cnt, w, i;
  CHECK(kiln_str_equal(b, one, b, n ? zero : one, 1, shape, flags) == KILN_OK);
  CHECK(kiln_str_concat(b, one, b, one, 1, shape, &out, &nb) == KILN_OK);
  CHECK(kiln_str_validate(out, nb, n) == KILN_OK);
  kiln_str_free(out);
  CHECK(kiln_str_regex_full_match(b, n, "(\\w|[.-])+@[a-z]+\\.com", flags) == KILN_OK);
  CHECK(kiln_str_normalize(b, n, 2, 0, b, n > 1 ? 1 : n, &out, &nb, &cnt) == KILN_OK);
  CHECK(kiln_str_validate(out, nb, cnt) == KILN_OK);
  kiln_str_free(out);
  CHECK(kiln_str_split(b, n, (next() & 1) ? "," : NULL, (int64_t)(next() % 4) - 1, &out, &nb, &w, idx) == KILN_OK);
  CHECK(kiln_str_validate(out, nb, n * w) == KILN_OK);
  kiln_str_free(out);
  CHECK(kiln_str_index(b, n, b, n, idx) == KILN_OK);
  for (i = 0; i < n; i++) CHECK(idx[i] >= 0 && (uint64_t)idx[i] <= i);
  idx[0] = -1;
  CHECK(kiln_str_take(b, n, idx, n, "dflt", 4, &out, &nb) == KILN_OK);
  CHECK(kiln_str_validate(out, nb, n) == KILN_OK);
  kiln_str_free(out);
  free(flags);
  free(idx);
}

/* Calls registered function `name` on `n` values; its result (if any) is released. */
static kiln_status_t call(const char* name, const kiln_value_t* args, int32_t n) {
  kiln_function_t* f = NULL;
  kiln_value_t out = {KILN_VALUE_NULL, {0}};
  CHECK(kiln_get_registered_function(name, &f) == KILN_OK);
  kiln_status_t st = kiln_function_call(f, args, n, &out);
  kiln_value_release(&out);
  kiln_function_release(f);
  return st;
}

static kiln_value_t tensor_value(kiln_tensor_t* t) {
  kiln_value_t v;
  v.kind = KILN_VALUE_TENSOR;
  v.u.tensor = t;
  return v;
}

static kiln_tensor_t* strings_of(const char** s, uint64_t n, const int64_t* shape, int32_t ndim) {
  uint64_t nbytes;
  uint64_t* b = make(s, n, &nbytes);
  kiln_tensor_t* t = NULL;
  CHECK(kiln_str_tensor_from_block(b, nbytes, shape, ndim, &t) == KILN_OK);
  free(b);
  return t;
}

static kiln_tensor_t* int64_of(int64_t v) {
  kiln_tensor_t* t = NULL;
  DLDataType i64 = {kDLInt, 64, 1};
  DLDevice cpu = {kDLCPU, 0};
  CHECK(kiln_tensor_create(NULL, 0, i64, cpu, &t) == KILN_OK);
  *(int64_t*)kiln_tensor_dltensor(t)->data = v;
  return t;
}

/* Every function on the (validated) string tensor x of 4 elements, shaped (2, 2) or (4,). */
static void run_functions(kiln_tensor_t* x) {
  const char* one[] = {","};
  const char* pat[] = {"(\\w|[.-])+@[a-z]+\\.com"};
  const char* keys[] = {"a,b", "MONDAY", "x"};
  int64_t scalar_shape[1] = {1}, three[1] = {3};
  kiln_tensor_t *delim = strings_of(one, 1, NULL, 0), *re = strings_of(pat, 1, NULL, 0);
  kiln_tensor_t *k = strings_of(keys, 3, three, 1), *stop = strings_of(keys, 1, scalar_shape, 1);
  kiln_tensor_t *m1 = int64_of(-1), *two = int64_of(2), *zero = int64_of(0);
  int32_t flat = kiln_tensor_dltensor(x)->ndim == 1;
  kiln_value_t a[4];
  a[0] = tensor_value(x);
  a[1] = tensor_value(x);
  CHECK(call("kiln_strings.equal", a, 2) == KILN_OK);
  CHECK(call("kiln_strings.concat", a, 2) == KILN_OK);
  a[1] = tensor_value(re);
  CHECK(call("kiln_strings.regex_full_match", a, 2) == KILN_OK);
  a[1] = tensor_value(delim);
  a[2] = tensor_value(m1);
  CHECK(call("kiln_strings.split", a, 3) == KILN_OK);
  a[1] = tensor_value(k);
  CHECK(call("kiln_strings.index", a, 2) == KILN_OK);
  a[0] = tensor_value(k);
  a[1] = tensor_value(m1);
  a[2] = tensor_value(delim);
  CHECK(call("kiln_strings.take", a, 3) == KILN_OK);
  a[1] = tensor_value(two); /* index 2 of 3 keys */
  CHECK(call("kiln_strings.take", a, 3) == KILN_OK);
  a[1] = tensor_value(int64_of(3)); /* past the keys: refused */
  CHECK(call("kiln_strings.take", a, 3) == KILN_ERR_INVALID_ARGUMENT);
  kiln_tensor_release(a[1].u.tensor);
  a[0] = tensor_value(x);
  a[1] = tensor_value(stop);
  a[2] = tensor_value(two);
  a[3] = tensor_value(zero);
  CHECK(call("kiln_strings.normalize", a, 4) == (flat ? KILN_OK : KILN_ERR_SHAPE_MISMATCH));
  a[1] = tensor_value(two); /* not a string tensor */
  CHECK(call("kiln_strings.normalize", a, 4) == KILN_ERR_DTYPE_MISMATCH);
  kiln_tensor_release(delim);
  kiln_tensor_release(re);
  kiln_tensor_release(k);
  kiln_tensor_release(stop);
  kiln_tensor_release(m1);
  kiln_tensor_release(two);
  kiln_tensor_release(zero);
}

int main(void) {
  const char* seeds[][4] = {{"a,b", "  x  y ", "ü漢", ""},
                            {"me@mail.com", "o-n,,x", "MONDAY", "monday"}};
  uint64_t nbytes, k, iter, refused = 0, accepted = 0;
  uint64_t* good = make(seeds[0], 4, &nbytes);
  CHECK(kiln_str_validate(good, nbytes, 4) == KILN_OK);
  CHECK(kiln_str_validate(good, nbytes - 1, 4) == KILN_ERR_INVALID_FORMAT); /* last element cut */
  CHECK(kiln_str_validate(good, 40, 4) == KILN_ERR_INVALID_FORMAT);         /* records cut */
  CHECK(kiln_str_validate(NULL, 0, 1) == KILN_ERR_INVALID_ARGUMENT);
  CHECK(kiln_str_validate(NULL, 0, 0) == KILN_OK);
  CHECK(kiln_str_validate(good, nbytes, UINT64_MAX / 8) == KILN_ERR_INVALID_FORMAT); /* overflow */
  free(good);
  CHECK(kiln_strings_register() == KILN_OK);
  for (iter = 0; iter < 20000; iter++) {
    uint64_t* b = make(seeds[iter & 1], 4, &nbytes);
    unsigned char* bytes = (unsigned char*)b;
    uint64_t muts = 1 + next() % 3;
    kiln_status_t st;
    for (k = 0; k < muts; k++) {
      uint64_t at = next() % nbytes;
      bytes[at] = (next() & 1) ? (unsigned char)next() : (unsigned char)(bytes[at] ^ (1u << (next() % 8)));
    }
    st = kiln_str_validate(b, nbytes, 4);
    if (st == KILN_OK) {
      int64_t shape[2] = {2, 2};
      kiln_tensor_t* t = NULL;
      accepted++;
      run_kernels(b, 4);
      CHECK(kiln_str_tensor_from_block(b, nbytes, (iter & 2) ? shape + 1 : shape, (iter & 2) ? 1 : 2, &t) == KILN_OK);
      run_functions(t);
      kiln_tensor_release(t);
    } else {
      kiln_tensor_t* t = NULL;
      int64_t shape[1] = {4};
      CHECK(kiln_str_tensor_from_block(b, nbytes, shape, 1, &t) == KILN_ERR_INVALID_FORMAT);
      CHECK(st == KILN_ERR_INVALID_FORMAT);
      refused++;
    }
    free(b);
  }
  CHECK(refused > 1000 && accepted > 1000);
  printf("ALL OK\n");
  return 0;
}
