/* Typed C bindings of a model with tuple results (tests/deploy/test_section_c_calls.py's LM):
 * kiln_model_lm_prefill(&m, inputs, weight, kv_cache, out0, out1), then decode with the cache
 * prefill returned.
 *
 *   lm_typed <lm.so> <dir>   reads dir/{inputs,weight,kv_cache,token}.bin; prints each output
 *                            as "name v0 v1 ..." on one line. */
#include <stdio.h>

#include "lm_bindings.h"

static int read_file(const char* dir, const char* name, void* data, size_t nbytes) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.bin", dir, name);
  FILE* f = fopen(path, "rb");
  int ok = f != NULL && fread(data, nbytes, 1, f) == 1;
  if (f) fclose(f);
  if (!ok) fprintf(stderr, "cannot read %s\n", path);
  return ok;
}

static void print(const char* name, const float* v, int n) {
  printf("%s", name);
  for (int i = 0; i < n; ++i) printf(" %.9g", v[i]);
  printf("\n");
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  static float inputs[1][4][16], weight[16][16], kv_cache[1][4][16], token[1][1][16];
  static float logits[1][4][16], cache[1][4][16], dec_logits[1][1][16], dec_cache[1][4][16];
  if (!read_file(argv[2], "inputs", inputs, sizeof inputs) || !read_file(argv[2], "weight", weight, sizeof weight) ||
      !read_file(argv[2], "kv_cache", kv_cache, sizeof kv_cache) || !read_file(argv[2], "token", token, sizeof token))
    return 1;
  kiln_model_lm_t m;
  kiln_status_t st = kiln_model_lm_open(&m, argv[1]);
  if (st == KILN_OK) st = kiln_model_lm_prefill(&m, inputs, weight, kv_cache, logits, cache);
  if (st == KILN_OK) st = kiln_model_lm_decode(&m, token, weight, cache, dec_logits, dec_cache);
  kiln_model_lm_close(&m);
  if (st != KILN_OK) {
    fprintf(stderr, "kiln error %d: %s\n", (int)st, kiln_last_error());
    return 1;
  }
  print("prefill_logits", &logits[0][0][0], 64);
  print("prefill_cache", &cache[0][0][0], 64);
  print("decode_logits", &dec_logits[0][0][0], KILN_MODEL_LM_DECODE_OUT0_DIM2);
  return 0;
}
