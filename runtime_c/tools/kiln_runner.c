/*
 * kiln_runner — runs one graph function of a compiled model on .npy inputs and writes its
 * outputs as .npy files. Built per target triple next to the runtime
 * (`make -C runtime_c TARGET=aarch64-linux-gnu runner`), it is what `kiln run` executes under
 * qemu-user for a model of another CPU; on the host it is a Python-free way to run a model.
 *
 *   kiln_runner MODEL.so FUNCTION OUT_PREFIX [--threads N] [IN.npy ...]
 *
 * Inputs are given in the function's parameter order. Output k goes to OUT_PREFIX<k>.npy
 * (a function returning one tensor writes OUT_PREFIX0.npy). Exit status 0 on success, 2 for
 * bad usage or a bad .npy file, 1 for an error of the runtime (its message on stderr).
 *
 * .npy files (format versions 1.0, 2.0 and 3.0) are validated byte by byte: the magic, the
 * header length against the file size, the header dictionary (descr, fortran_order, shape and
 * nothing else), the element count against overflow, and the data size against what is left of
 * the file. Only little-endian (or byte-sized) bool, int, uint and float element types and C
 * order are accepted, which is what numpy writes on every target Kiln runs on.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

#define MAX_INPUTS 256
#define MAX_HEADER (1u << 20)

static int usage(void) {
  fprintf(stderr, "usage: kiln_runner MODEL.so FUNCTION OUT_PREFIX [--threads N] [IN.npy ...]\n");
  return 2;
}

/* Prints the runtime's last error, after `what` unless NULL (the runtime's messages for a
 * function call already start with the function's name). */
static int fail_runtime(const char* what) {
  if (what) fprintf(stderr, "kiln_runner: %s: %s\n", what, kiln_last_error());
  else fprintf(stderr, "kiln_runner: %s\n", kiln_last_error());
  return 1;
}

/* ---- .npy reading -------------------------------------------------------------------------- */

static const char* skip_space(const char* p, const char* end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n')) ++p;
  return p;
}

/* Parses "'<f4'" etc. into a DLDataType; 0 on an unsupported or malformed descr. */
static int parse_descr(const char* s, size_t n, DLDataType* out) {
  if (n < 3 || (s[0] != '<' && s[0] != '|' && s[0] != '=')) return 0;
  char kind = s[1];
  long bytes = 0;
  for (size_t i = 2; i < n; ++i) {
    if (s[i] < '0' || s[i] > '9' || bytes > 16) return 0;
    bytes = bytes * 10 + (s[i] - '0');
  }
  if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8) return 0;
  if (s[0] == '|' && bytes != 1) return 0; /* '|' is only for byte-sized types */
  out->bits = (uint8_t)(bytes * 8);
  out->lanes = 1;
  switch (kind) {
    case 'f': if (bytes == 1) return 0; out->code = kDLFloat; return 1;
    case 'i': out->code = kDLInt; return 1;
    case 'u': out->code = kDLUInt; return 1;
    case 'b': if (bytes != 1) return 0; out->code = kDLBool; return 1;
    default: return 0;
  }
}

/* Parses the header dictionary. Returns NULL on success, else what was wrong. */
static const char* parse_header(const char* h, size_t n, DLDataType* dtype, int64_t* shape,
                                int32_t* ndim) {
  const char* p = h;
  const char* end = h + n;
  int seen_descr = 0, seen_order = 0, seen_shape = 0;
  p = skip_space(p, end);
  if (p >= end || *p++ != '{') return "header does not start with '{'";
  for (;;) {
    p = skip_space(p, end);
    if (p < end && *p == '}') break;
    if (p >= end || *p != '\'') return "expected a quoted key";
    const char* key = ++p;
    while (p < end && *p != '\'') ++p;
    if (p >= end) return "unterminated key";
    size_t klen = (size_t)(p - key);
    ++p;
    p = skip_space(p, end);
    if (p >= end || *p++ != ':') return "expected ':' after a key";
    p = skip_space(p, end);
    if (klen == 5 && memcmp(key, "descr", 5) == 0) {
      if (p >= end || *p != '\'') return "descr is not a string";
      const char* v = ++p;
      while (p < end && *p != '\'') ++p;
      if (p >= end) return "unterminated descr";
      if (!parse_descr(v, (size_t)(p - v), dtype))
        return "unsupported descr (little-endian bool, int, uint or float expected)";
      ++p;
      seen_descr = 1;
    } else if (klen == 13 && memcmp(key, "fortran_order", 13) == 0) {
      if (end - p >= 5 && memcmp(p, "False", 5) == 0) {
        p += 5;
      } else if (end - p >= 4 && memcmp(p, "True", 4) == 0) {
        return "fortran_order True is not supported (save a C-ordered array)";
      } else {
        return "fortran_order is not True or False";
      }
      seen_order = 1;
    } else if (klen == 5 && memcmp(key, "shape", 5) == 0) {
      if (p >= end || *p++ != '(') return "shape is not a tuple";
      *ndim = 0;
      for (;;) {
        p = skip_space(p, end);
        if (p < end && *p == ')') { ++p; break; }
        if (p >= end || *p < '0' || *p > '9') return "shape entry is not a non-negative integer";
        int64_t v = 0;
        while (p < end && *p >= '0' && *p <= '9') {
          if (v > (INT64_MAX - 9) / 10) return "shape entry too large";
          v = v * 10 + (*p++ - '0');
        }
        if (*ndim >= KILN_MAX_NDIM) return "too many dimensions";
        shape[(*ndim)++] = v;
        p = skip_space(p, end);
        if (p < end && *p == ',') ++p;
        else if (p < end && *p == ')') { ++p; break; }
        else return "malformed shape tuple";
      }
      seen_shape = 1;
    } else {
      return "unknown key in header";
    }
    p = skip_space(p, end);
    if (p < end && *p == ',') { ++p; continue; }
    if (p < end && *p == '}') break;
    return "expected ',' or '}' in header";
  }
  if (!seen_descr || !seen_order || !seen_shape) return "header lacks descr, fortran_order or shape";
  return NULL;
}

/* Reads a whole .npy file into a new tensor. Returns 0 on success, else prints why. */
static int read_npy(const char* path, kiln_tensor_t** out) {
  FILE* f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "kiln_runner: cannot open %s\n", path); return 2; }
  int rc = 2;
  char* header = NULL;
  kiln_tensor_t* t = NULL;
  unsigned char pre[12];
  if (fseek(f, 0, SEEK_END) != 0) goto io;
  long fsize = ftell(f);
  if (fsize < 0 || fseek(f, 0, SEEK_SET) != 0) goto io;
  if (fsize < 10 || fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
    fprintf(stderr, "kiln_runner: %s: not a .npy file (bad magic or too short)\n", path);
    goto done;
  }
  uint32_t hlen;
  long prefix;
  if (pre[6] == 1) {
    hlen = (uint32_t)pre[8] | ((uint32_t)pre[9] << 8);
    prefix = 10;
  } else if (pre[6] == 2 || pre[6] == 3) {
    if (fsize < 12 || fread(pre + 10, 1, 2, f) != 2) goto io;
    hlen = (uint32_t)pre[8] | ((uint32_t)pre[9] << 8) | ((uint32_t)pre[10] << 16) |
           ((uint32_t)pre[11] << 24);
    prefix = 12;
  } else {
    fprintf(stderr, "kiln_runner: %s: .npy format version %u.%u is not supported\n", path,
            (unsigned)pre[6], (unsigned)pre[7]);
    goto done;
  }
  if (hlen > MAX_HEADER || (long)hlen > fsize - prefix) {
    fprintf(stderr, "kiln_runner: %s: header of %lu bytes exceeds the file (%ld bytes)\n", path,
            (unsigned long)hlen, fsize);
    goto done;
  }
  header = malloc(hlen + 1u);
  if (!header) { fprintf(stderr, "kiln_runner: out of memory\n"); goto done; }
  if (fread(header, 1, hlen, f) != hlen) goto io;
  header[hlen] = '\0';
  DLDataType dtype = {0, 0, 0};
  int64_t shape[KILN_MAX_NDIM];
  int32_t ndim = 0;
  const char* why = parse_header(header, hlen, &dtype, shape, &ndim);
  if (why) {
    fprintf(stderr, "kiln_runner: %s: bad .npy header: %s\n", path, why);
    goto done;
  }
  uint64_t count = 1;
  for (int32_t i = 0; i < ndim; ++i) {
    if (shape[i] != 0 && count > UINT64_MAX / (uint64_t)shape[i]) {
      fprintf(stderr, "kiln_runner: %s: element count overflows\n", path);
      goto done;
    }
    count *= (uint64_t)shape[i];
  }
  uint64_t itemsize = dtype.bits / 8u;
  uint64_t left = (uint64_t)(fsize - prefix - (long)hlen);
  if (count > left / itemsize || count * itemsize != left) {
    fprintf(stderr, "kiln_runner: %s: data is %llu bytes, the header says %llu x %llu\n", path,
            (unsigned long long)left, (unsigned long long)count, (unsigned long long)itemsize);
    goto done;
  }
  DLDevice cpu = {kDLCPU, 0};
  if (kiln_tensor_create(shape, ndim, dtype, cpu, &t) != KILN_OK) {
    rc = fail_runtime(path);
    goto done;
  }
  size_t nbytes = (size_t)(count * itemsize);
  if (nbytes && fread(kiln_tensor_dltensor(t)->data, 1, nbytes, f) != nbytes) goto io;
  *out = t;
  t = NULL;
  rc = 0;
  goto done;
io:
  fprintf(stderr, "kiln_runner: %s: read error\n", path);
done:
  kiln_tensor_release(t);
  free(header);
  fclose(f);
  return rc;
}

/* ---- .npy writing -------------------------------------------------------------------------- */

static int write_npy(const char* path, kiln_tensor_t* tensor) {
  const DLTensor* dl = kiln_tensor_dltensor(tensor);
  char descr[8];
  char kind;
  switch (dl->dtype.code) {
    case kDLFloat: kind = 'f'; break;
    case kDLInt: kind = 'i'; break;
    case kDLUInt: kind = 'u'; break;
    case kDLBool: kind = 'b'; break;
    default:
      fprintf(stderr, "kiln_runner: output dtype code %u cannot be written as .npy\n",
              (unsigned)dl->dtype.code);
      return 2;
  }
  snprintf(descr, sizeof descr, "%c%c%u", dl->dtype.bits == 8 ? '|' : '<', kind,
           (unsigned)(dl->dtype.bits / 8u));
  char dict[64 + 24 * KILN_MAX_NDIM];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int32_t i = 0; i < dl->ndim; ++i)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld,%s", (long long)dl->shape[i],
                  i + 1 < dl->ndim ? " " : "");
  n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  /* Version 1.0: magic, 2 version bytes, u16 header length; the header is padded with spaces
   * and ends in '\n' so the data starts 64-byte aligned, as numpy writes it. */
  size_t total = 10u + (size_t)n + 1u;
  size_t pad = (64u - total % 64u) % 64u;
  size_t hlen = (size_t)n + pad + 1u;
  FILE* f = fopen(path, "wb");
  if (!f) { fprintf(stderr, "kiln_runner: cannot write %s\n", path); return 2; }
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                           (unsigned char)(hlen >> 8)};
  int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
  for (size_t i = 0; ok && i < pad; ++i) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  size_t nbytes = kiln_tensor_nbytes(tensor);
  ok = ok && (nbytes == 0 ||
              fwrite((const char*)dl->data + dl->byte_offset, 1, nbytes, f) == nbytes);
  ok = (fclose(f) == 0) && ok;
  if (!ok) { fprintf(stderr, "kiln_runner: write error on %s\n", path); return 2; }
  return 0;
}

static int write_output(const char* prefix, int index, kiln_tensor_t* tensor) {
  size_t n = strlen(prefix) + 16;
  char* path = malloc(n);
  if (!path) { fprintf(stderr, "kiln_runner: out of memory\n"); return 2; }
  snprintf(path, n, "%s%d.npy", prefix, index);
  int rc = write_npy(path, tensor);
  free(path);
  return rc;
}

/* ---- main ---------------------------------------------------------------------------------- */

int main(int argc, char** argv) {
  if (argc < 4) return usage();
  const char* lib_path = argv[1];
  const char* fn_name = argv[2];
  const char* prefix = argv[3];
  kiln_value_t args[MAX_INPUTS];
  int nargs = 0, rc = 0;
  for (int i = 4; i < argc; ++i) {
    if (strcmp(argv[i], "--threads") == 0) {
      if (i + 1 >= argc) return usage();
      char* endp = NULL;
      long n = strtol(argv[++i], &endp, 10);
      if (!endp || *endp || n < 0 || n > 1024) return usage();
      if (kiln_set_num_threads((int32_t)n) != KILN_OK) return fail_runtime("--threads");
    }
  }
  kiln_module_t* lib = NULL;
  kiln_module_t* vm = NULL;
  kiln_function_t* load = NULL;
  kiln_function_t* init = NULL;
  kiln_function_t* fn = NULL;
  kiln_value_t vm_value = {KILN_VALUE_NULL, {0}};
  kiln_value_t result = {KILN_VALUE_NULL, {0}};
  for (int i = 4; i < argc && rc == 0; ++i) {
    if (strcmp(argv[i], "--threads") == 0) { ++i; continue; }
    if (nargs >= MAX_INPUTS) { fprintf(stderr, "kiln_runner: too many inputs\n"); rc = 2; break; }
    kiln_tensor_t* t = NULL;
    rc = read_npy(argv[i], &t);
    if (rc == 0) {
      args[nargs].kind = KILN_VALUE_TENSOR;
      args[nargs].u.tensor = t;
      ++nargs;
    }
  }
  if (rc != 0) goto done;
  if (kiln_module_load_library(lib_path, &lib) != KILN_OK) { rc = fail_runtime(lib_path); goto done; }
  if (kiln_module_get_function(lib, "load_executable", &load) != KILN_OK ||
      kiln_function_call(load, NULL, 0, &vm_value) != KILN_OK) {
    rc = fail_runtime("load_executable");
    goto done;
  }
  vm = vm_value.u.module;
  if (kiln_module_get_function(vm, "init", &init) != KILN_OK ||
      kiln_function_call(init, NULL, 0, NULL) != KILN_OK) {
    rc = fail_runtime("init");
    goto done;
  }
  if (kiln_module_get_function(vm, fn_name, &fn) != KILN_OK ||
      kiln_function_call(fn, args, nargs, &result) != KILN_OK) {
    rc = fail_runtime(NULL);
    goto done;
  }
  if (result.kind == KILN_VALUE_TENSOR) {
    rc = write_output(prefix, 0, result.u.tensor);
  } else if (result.kind == KILN_VALUE_TUPLE) {
    int32_t n = kiln_tuple_size(result.u.tuple);
    for (int32_t i = 0; i < n && rc == 0; ++i) {
      kiln_value_t item = {KILN_VALUE_NULL, {0}};
      if (kiln_tuple_get_item(result.u.tuple, i, &item) != KILN_OK) { rc = fail_runtime("output"); break; }
      if (item.kind != KILN_VALUE_TENSOR) {
        fprintf(stderr, "kiln_runner: output %d is not a tensor (kind %d)\n", (int)i, (int)item.kind);
        rc = 2;
      } else {
        rc = write_output(prefix, i, item.u.tensor);
      }
      kiln_value_release(&item);
    }
  } else {
    fprintf(stderr, "kiln_runner: %s returned a value of kind %d, not tensors\n", fn_name,
            (int)result.kind);
    rc = 2;
  }
done:
  kiln_value_release(&result);
  kiln_function_release(fn);
  kiln_function_release(init);
  kiln_value_release(&vm_value);
  kiln_function_release(load);
  kiln_module_release(lib);
  for (int i = 0; i < nargs; ++i) kiln_tensor_release(args[i].u.tensor);
  return rc;
}
