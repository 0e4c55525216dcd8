/*
 * generate.c: greedy generation from a language model exported by Kiln (examples/export_gpt.py),
 * in plain C99 over the public runtime API (runtime_c/include/kiln_runtime.h).
 *
 *   generate MODEL.so STEPS TOKEN...
 *
 * Loads the one artifact, creates its KV cache ("create_cache"), prefills the prompt's token ids
 * ("prefill": tokens[1, n]), then decodes STEPS tokens greedily ("decode": one token[1, 1] per
 * step) and prints them, space separated. The cache is one tensor the functions update in place;
 * it holds its own length, so a step passes only the new token, wrapped without a copy
 * (kiln_tensor_wrap). Exit status 0 on success, 1 on an error (message on stderr), 2 on bad usage.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kiln_runtime.h"

static int fail(const char* what, kiln_status_t status) {
  fprintf(stderr, "generate: %s: %s [%s]\n", what, kiln_last_error(), kiln_status_string(status));
  return 1;
}

/* fn(tokens[1, t], kv) -> (logits, kv): the argmax of the logits in *next. */
static kiln_status_t step(kiln_function_t* fn, int64_t* tokens, int64_t t, kiln_tensor_t* kv,
                          int64_t* next) {
  int64_t shape[2] = {1, t};
  DLTensor view = {tokens, {kDLCPU, 0}, 2, {kDLInt, 64, 1}, shape, NULL, 0};
  kiln_tensor_t* tok = NULL;
  kiln_value_t args[2], result = {KILN_VALUE_NULL, {0}}, logits = {KILN_VALUE_NULL, {0}};
  kiln_status_t st = kiln_tensor_wrap(&view, NULL, NULL, &tok);  /* borrowed: no deleter */
  if (st != KILN_OK) return st;
  args[0].kind = KILN_VALUE_TENSOR;
  args[0].u.tensor = tok;
  args[1].kind = KILN_VALUE_TENSOR;
  args[1].u.tensor = kv;
  st = kiln_function_call(fn, args, 2, &result);
  if (st == KILN_OK) st = kiln_tuple_get_item(result.u.tuple, 0, &logits);
  if (st == KILN_OK) {
    const DLTensor* l = kiln_tensor_dltensor(logits.u.tensor);
    const float* v = (const float*)((const char*)l->data + l->byte_offset);
    int64_t best = 0;
    for (int64_t i = 1; i < l->shape[1]; i++)
      if (v[i] > v[best]) best = i;
    *next = best;
  }
  kiln_value_release(&logits);
  kiln_value_release(&result);  /* its kv item is the caller's tensor: only a reference dropped */
  kiln_tensor_release(tok);
  return st;
}

int main(int argc, char** argv) {
  kiln_module_t* lib = NULL;
  kiln_module_t* vm = NULL;
  kiln_function_t *load = NULL, *init = NULL, *create = NULL, *prefill = NULL, *decode = NULL;
  kiln_value_t v = {KILN_VALUE_NULL, {0}}, kv = {KILN_VALUE_NULL, {0}};
  kiln_status_t st;
  int rc = 1;
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL.so STEPS TOKEN...\n", argv[0]);
    return 2;
  }
  int steps = atoi(argv[2]), n = argc - 3;
  if ((st = kiln_module_load_library(argv[1], &lib)) != KILN_OK) return fail("loading the model", st);
  if ((st = kiln_module_get_function(lib, "load_executable", &load)) != KILN_OK ||
      (st = kiln_function_call(load, NULL, 0, &v)) != KILN_OK) {
    rc = fail("load_executable", st);
    goto done;
  }
  vm = v.u.module;
  if ((st = kiln_module_get_function(vm, "init", &init)) != KILN_OK ||
      (st = kiln_function_call(init, NULL, 0, NULL)) != KILN_OK ||
      (st = kiln_module_get_function(vm, "create_cache", &create)) != KILN_OK ||
      (st = kiln_module_get_function(vm, "prefill", &prefill)) != KILN_OK ||
      (st = kiln_module_get_function(vm, "decode", &decode)) != KILN_OK ||
      (st = kiln_function_call(create, NULL, 0, &kv)) != KILN_OK) {
    rc = fail("setting up the VM", st);
    goto done;
  }
  if (steps < 1) {
    fprintf(stderr, "generate: STEPS must be at least 1\n");
    goto done;
  }
  /* kv_cache[layers, 2, heads, max_len + 1, head_dim]: the last position holds the length */
  int64_t max_len = kiln_tensor_dltensor(kv.u.tensor)->shape[3] - 1;
  int64_t* tokens = calloc((size_t)n, sizeof *tokens);
  if (!tokens) goto done;
  for (int i = 0; i < n; i++) tokens[i] = atoll(argv[3 + i]);
  /* (a prompt longer than the cache: the runtime refuses prefill, naming the limit) */
  int64_t t = n, next = 0;
  st = step(prefill, tokens, n, kv.u.tensor, &next);
  free(tokens);
  for (int k = 0; st == KILN_OK && k < steps; k++) {
    printf(k ? " %lld" : "%lld", (long long)next);
    if (k + 1 == steps) break;
    if (t == max_len) {  /* decode would return NaN logits: the cache is full */
      printf("\n");
      fprintf(stderr, "generate: the KV cache is full (%lld positions)\n", (long long)max_len);
      goto done;
    }
    int64_t token = next;
    st = step(decode, &token, 1, kv.u.tensor, &next);
    t++;
  }
  printf("\n");
  rc = st == KILN_OK ? 0 : fail("generating", st);
done:
  kiln_value_release(&kv);
  kiln_function_release(load);
  kiln_function_release(init);
  kiln_function_release(create);
  kiln_function_release(prefill);
  kiln_function_release(decode);
  kiln_module_release(vm);
  kiln_module_release(lib);
  return rc;
}
