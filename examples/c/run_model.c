/*
 * run_model.c: runs a graph function of a model exported by Kiln (Executable.export_library)
 * on float32 tensors read from raw files, and prints the result. Plain C99 over the public
 * runtime API (runtime_c/include/kiln_runtime.h).
 *
 *   run_model [-f FUNCTION] MODEL.so FILE[:SHAPE] ...
 *
 * Each FILE holds one argument as raw little-endian float32 in C order; SHAPE is its shape as
 * extents joined by 'x' ("1x784"; "" for a scalar); without ":SHAPE" the argument is 1-D. The
 * function is "forward" unless -f names another. Output: for each output tensor, a line
 * "output K: float32 (D0, D1)" and a line of its values ("%.9g", space separated).
 * Exit status: 0 on success, 1 on any error (message on stderr), 2 on bad usage.
 *
 * The steps are the ones every program embedding a model takes:
 *   kiln_module_load_library -> "load_executable" -> VM module -> "init"(cpu) -> "forward"(...)
 * Every status is checked; on error kiln_last_error() says what went wrong.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

#define MAX_ARGS 256

/* Prints "run_model: <what>: <runtime message> [<status name>]" and returns 1. */
static int fail(const char* what, kiln_status_t status) {
  fprintf(stderr, "run_model: %s: %s [%s]\n", what, kiln_last_error(), kiln_status_string(status));
  return 1;
}

/* Parses "1x784" (or "" for a scalar) into shape[]. Returns the ndim, or -1 if malformed. */
static int parse_shape(const char* text, int64_t* shape) {
  int ndim = 0;
  if (*text == '\0') return 0;
  for (;;) {
    char* end;
    long long v;
    if (*text < '0' || *text > '9' || ndim == KILN_MAX_NDIM) return -1;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || end == text) return -1;
    shape[ndim++] = (int64_t)v;
    if (*end == '\0') return ndim;
    if (*end != 'x') return -1;
    text = end + 1;
  }
}

static void format_shape(const int64_t* shape, int ndim, char* buf, size_t size) {
  size_t n = (size_t)snprintf(buf, size, "(");
  for (int d = 0; d < ndim && n < size; d++)
    n += (size_t)snprintf(buf + n, size - n, d ? ", %lld" : "%lld", (long long)shape[d]);
  if (n < size) snprintf(buf + n, size - n, ndim == 1 ? ",)" : ")");
}

/* Makes a float32 tensor from argument `spec` ("FILE" or "FILE:SHAPE"); argument number `index`
 * is used in messages. Returns 0 and sets *out, or prints an error and returns 1. */
static int load_argument(const char* spec, int index, kiln_tensor_t** out) {
  char path[4096];
  int64_t shape[KILN_MAX_NDIM];
  int ndim = 1;
  const char* colon = strrchr(spec, ':');
  size_t path_len = colon ? (size_t)(colon - spec) : strlen(spec);
  kiln_tensor_t* tensor = NULL;
  kiln_status_t st;
  FILE* f;
  long file_size;
  size_t nbytes;
  char shape_text[64 * 24];

  if (path_len >= sizeof path) {
    fprintf(stderr, "run_model: argument %d: path too long\n", index);
    return 1;
  }
  memcpy(path, spec, path_len);
  path[path_len] = '\0';
  f = fopen(path, "rb");
  if (!f || fseek(f, 0, SEEK_END) != 0 || (file_size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fprintf(stderr, "run_model: argument %d ('%s'): cannot read: %s\n", index, path, strerror(errno));
    if (f) fclose(f);
    return 1;
  }
  if (colon) {
    ndim = parse_shape(colon + 1, shape);
    if (ndim < 0) {
      fprintf(stderr, "run_model: argument %d ('%s'): bad shape '%s' (expected e.g. 1x784)\n",
              index, path, colon + 1);
      fclose(f);
      return 1;
    }
  } else {
    shape[0] = file_size / 4;
  }
  st = kiln_tensor_create(shape, ndim, (DLDataType){kDLFloat, 32, 1}, (DLDevice){kDLCPU, 0}, &tensor);
  if (st != KILN_OK) {
    fclose(f);
    return fail("creating an argument tensor", st);
  }
  nbytes = kiln_tensor_nbytes(tensor);
  format_shape(shape, ndim, shape_text, sizeof shape_text);
  if ((size_t)file_size != nbytes) {
    fprintf(stderr, "run_model: argument %d ('%s'): file has %ld bytes, float32 shape %s needs %zu\n",
            index, path, file_size, shape_text, nbytes);
    kiln_tensor_release(tensor);
    fclose(f);
    return 1;
  }
  if (nbytes > 0 && fread(kiln_tensor_dltensor(tensor)->data, 1, nbytes, f) != nbytes) {
    fprintf(stderr, "run_model: argument %d ('%s'): short read\n", index, path);
    kiln_tensor_release(tensor);
    fclose(f);
    return 1;
  }
  fclose(f);
  *out = tensor;
  return 0;
}

static int print_tensor(int index, kiln_tensor_t* tensor) {
  const DLTensor* dl = kiln_tensor_dltensor(tensor);
  char shape_text[64 * 24];
  int64_t count = 1;
  const float* data;
  if (dl->dtype.code != kDLFloat || dl->dtype.bits != 32 || dl->dtype.lanes != 1) {
    fprintf(stderr, "run_model: output %d: only float32 outputs are printed\n", index);
    return 1;
  }
  for (int d = 0; d < dl->ndim; d++) count *= dl->shape[d];
  format_shape(dl->shape, dl->ndim, shape_text, sizeof shape_text);
  printf("output %d: float32 %s\n", index, shape_text);
  data = (const float*)((const char*)dl->data + dl->byte_offset);  /* compact: strides row-major */
  for (int64_t i = 0; i < count; i++) printf(i ? " %.9g" : "%.9g", (double)data[i]);
  printf("\n");
  return 0;
}

/* Prints a tensor, or each tensor of a (possibly nested) tuple, numbering outputs from *next. */
static int print_value(const kiln_value_t* value, int* next) {
  if (value->kind == KILN_VALUE_TENSOR) return print_tensor((*next)++, value->u.tensor);
  if (value->kind == KILN_VALUE_TUPLE) {
    for (int32_t i = 0; i < kiln_tuple_size(value->u.tuple); i++) {
      kiln_value_t item = {KILN_VALUE_NULL, {0}};
      kiln_status_t st = kiln_tuple_get_item(value->u.tuple, i, &item);
      int rc = st != KILN_OK ? fail("reading the result", st) : print_value(&item, next);
      kiln_value_release(&item);
      if (rc) return rc;
    }
    return 0;
  }
  fprintf(stderr, "run_model: the result is neither a tensor nor a tuple (kind %d)\n", (int)value->kind);
  return 1;
}

/* Looks up `name` in `module` and calls it. */
static kiln_status_t call(kiln_module_t* module, const char* name, const kiln_value_t* args,
                          int32_t num_args, kiln_value_t* out_result) {
  kiln_function_t* fn = NULL;
  kiln_status_t st = kiln_module_get_function(module, name, &fn);
  if (st == KILN_OK) st = kiln_function_call(fn, args, num_args, out_result);
  kiln_function_release(fn);
  return st;
}

int main(int argc, char** argv) {
  const char* function = "forward";
  const char* model_path;
  kiln_module_t* lib = NULL;
  kiln_value_t vm = {KILN_VALUE_NULL, {0}};
  kiln_value_t result = {KILN_VALUE_NULL, {0}};
  kiln_value_t args[MAX_ARGS];
  int num_args = 0, first = 1, rc = 1, next_output = 0;
  kiln_status_t st;
  char what[4200];

  if (argc > 2 && strcmp(argv[1], "-f") == 0) {
    function = argv[2];
    first = 3;
  }
  if (argc - first < 1 || argc - first - 1 > MAX_ARGS) {
    fprintf(stderr, "usage: %s [-f FUNCTION] MODEL.so FILE[:SHAPE] ...\n"
                    "  FILE: raw float32 in C order; SHAPE: extents joined by 'x', e.g. 1x784\n",
            argv[0]);
    return 2;
  }
  model_path = argv[first];

  /* 1. The library: kernels + executable blob. */
  snprintf(what, sizeof what, "loading '%s'", model_path);
  if ((st = kiln_module_load_library(model_path, &lib)) != KILN_OK) return fail(what, st);
  /* 2. The VM over the executable (validates the whole blob). */
  if ((st = call(lib, "load_executable", NULL, 0, &vm)) != KILN_OK) {
    rc = fail("load_executable", st);
    goto done;
  }
  if (vm.kind != KILN_VALUE_MODULE) {
    fprintf(stderr, "run_model: load_executable did not return a module\n");
    goto done;
  }
  /* 3. init(cpu): binds the device and resolves external functions. */
  {
    kiln_value_t device;
    device.kind = KILN_VALUE_DEVICE;
    device.u.device = (DLDevice){kDLCPU, 0};
    if ((st = call(vm.u.module, "init", &device, 1, NULL)) != KILN_OK) {
      rc = fail("init", st);
      goto done;
    }
  }
  /* 4. Arguments, then the call. The runtime checks each against the function's signature. */
  for (int i = first + 1; i < argc; i++) {
    kiln_tensor_t* t = NULL;
    if (load_argument(argv[i], num_args, &t)) goto done;
    args[num_args].kind = KILN_VALUE_TENSOR;
    args[num_args++].u.tensor = t;
  }
  snprintf(what, sizeof what, "calling '%s'", function);
  if ((st = call(vm.u.module, function, args, num_args, &result)) != KILN_OK) {
    rc = fail(what, st);
    goto done;
  }
  rc = print_value(&result, &next_output);

done:
  kiln_value_release(&result);
  for (int i = 0; i < num_args; i++) kiln_tensor_release(args[i].u.tensor);
  kiln_value_release(&vm);
  kiln_module_release(lib);
  return rc;
}
