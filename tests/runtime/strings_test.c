/* libkiln_strings under AddressSanitizer + UBSan (test_strings.py builds and runs it): valid
 * blocks are accepted; blocks with bytes mutated at random are either refused by
 * kiln_str_validate with KILN_ERR_INVALID_FORMAT, or accepted and then read by every kernel
 * without a memory error. Prints "ALL OK". */
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
      accepted++;
      run_kernels(b, 4);
    } else {
      CHECK(st == KILN_ERR_INVALID_FORMAT);
      refused++;
    }
    free(b);
  }
  CHECK(refused > 1000 && accepted > 1000);
  printf("ALL OK\n");
  return 0;
}
