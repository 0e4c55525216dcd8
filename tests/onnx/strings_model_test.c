/* A compiled model with string operators run from C (test_strings_e2e.py builds and runs it):
 * argv[1] the model library, argv[2] libkiln_strings.so. init fails, naming the function, until
 * the string library is loaded and registers its functions; then main(x) with x = {"cat", "dog",
 * "émeu"} returns (x == "cat", x ++ "!"). Prints "ALL OK". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_strings.h"

#define CHECK(c)                                                          \
  do {                                                                    \
    if (!(c)) {                                                           \
      printf("FAIL line %d: %s (%s)\n", __LINE__, #c, kiln_last_error()); \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

typedef kiln_status_t (*register_fn)(void);
typedef kiln_status_t (*from_block_fn)(const void*, uint64_t, const int64_t*, int32_t, kiln_tensor_t**);
typedef kiln_status_t (*block_fn)(kiln_tensor_t*, const void**, uint64_t*, uint64_t*);

int main(int argc, char** argv) {
  kiln_module_t* lib = NULL;
  kiln_function_t *load = NULL, *init = NULL, *fmain = NULL;
  kiln_value_t vm = {KILN_VALUE_NULL, {0}}, out = {KILN_VALUE_NULL, {0}};
  CHECK(argc == 3);
  CHECK(kiln_module_load_library(argv[1], &lib) == KILN_OK);
  CHECK(kiln_module_get_function(lib, "load_executable", &load) == KILN_OK);
  CHECK(kiln_function_call(load, NULL, 0, &vm) == KILN_OK && vm.kind == KILN_VALUE_MODULE);
  CHECK(kiln_module_get_function(vm.u.module, "init", &init) == KILN_OK);
  /* Without the string library: init names the first function it lacks. */
  CHECK(kiln_function_call(init, NULL, 0, NULL) == KILN_ERR_NOT_FOUND);
  CHECK(strstr(kiln_last_error(), "init: external function 'kiln_strings.") != NULL);
  CHECK(strstr(kiln_last_error(), "is not registered") != NULL);

  void* strings = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
  CHECK(strings != NULL);
  register_fn reg = (register_fn)(uintptr_t)dlsym(strings, "kiln_strings_register");
  from_block_fn from_block = (from_block_fn)(uintptr_t)dlsym(strings, "kiln_str_tensor_from_block");
  block_fn block_of = (block_fn)(uintptr_t)dlsym(strings, "kiln_str_tensor_block");
  CHECK(reg && from_block && block_of);
  CHECK(reg() == KILN_OK);
  CHECK(kiln_function_call(init, NULL, 0, NULL) == KILN_OK);

  /* x = {"cat", "dog", "émeu"}: three records, then the bytes. */
  const char* words[3] = {"cat", "dog", "\xc3\xa9meu"};
  uint64_t buf[16];
  uint64_t at = 3 * 16;
  memset(buf, 0, sizeof buf);
  for (int i = 0; i < 3; ++i) {
    buf[2 * i] = at;
    buf[2 * i + 1] = strlen(words[i]);
    memcpy((char*)buf + at, words[i], strlen(words[i]));
    at += strlen(words[i]);
  }
  int64_t shape[1] = {3};
  kiln_tensor_t* x = NULL;
  CHECK(from_block(buf, at, shape, 1, &x) == KILN_OK);
  kiln_value_t arg = {KILN_VALUE_TENSOR, {0}};
  arg.u.tensor = x;
  CHECK(kiln_module_get_function(vm.u.module, "main", &fmain) == KILN_OK);
  CHECK(kiln_function_call(fmain, &arg, 1, &out) == KILN_OK && out.kind == KILN_VALUE_TUPLE);

  kiln_value_t eq = {KILN_VALUE_NULL, {0}}, cat = {KILN_VALUE_NULL, {0}};
  CHECK(kiln_tuple_get_item(out.u.tuple, 0, &eq) == KILN_OK && eq.kind == KILN_VALUE_TENSOR);
  CHECK(kiln_tuple_get_item(out.u.tuple, 1, &cat) == KILN_OK && cat.kind == KILN_VALUE_TENSOR);
  const uint8_t* e = kiln_tensor_dltensor(eq.u.tensor)->data;
  CHECK(e[0] == 1 && e[1] == 0 && e[2] == 0);
  const void* b = NULL;
  uint64_t nbytes = 0, count = 0;
  CHECK(block_of(cat.u.tensor, &b, &nbytes, &count) == KILN_OK && count == 3);
  const kiln_str_t* r = b;
  CHECK(r[2].length == 6 && memcmp((const char*)b + r[2].offset, "\xc3\xa9meu!", 6) == 0);
  CHECK(r[0].length == 4 && memcmp((const char*)b + r[0].offset, "cat!", 4) == 0);
  /* A string tensor is not a numeric one: a kernel of the model would refuse it, and so does
   * the check of a graph argument. */
  arg.u.tensor = eq.u.tensor;
  CHECK(kiln_function_call(fmain, &arg, 1, NULL) == KILN_ERR_DTYPE_MISMATCH);

  kiln_value_release(&eq);
  kiln_value_release(&cat);
  kiln_value_release(&out);
  kiln_tensor_release(x);
  kiln_function_release(fmain);
  kiln_function_release(init);
  kiln_function_release(load);
  kiln_value_release(&vm);
  kiln_module_release(lib);
  printf("ALL OK\n");
  return 0;
}
