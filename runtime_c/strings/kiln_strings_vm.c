/* String tensors as runtime values, and the external functions compiled models call (CALL_PACKED)
 * for the ONNX string operators: kiln_strings_register (kiln_strings.h, docs/strings.md).
 *
 * A string tensor value is a kiln tensor of dtype KILN_STR_DTYPE whose elements are the block's
 * records; the block (records, then the UTF-8 bytes) is one allocation the tensor owns, so the VM
 * holds, copies (a reference) and frees it like any tensor, knowing nothing of strings. Every
 * function here validates each string argument (kiln_str_validate over the bytes its records
 * reach) before reading it, and returns new tensors. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "kiln_strings.h"
#include "../src/ext_error.h"

#define REC ((uint64_t)sizeof(kiln_str_t))

static void free_block(void* block) { kiln_str_free(block); }

int32_t kiln_str_is_tensor(const DLTensor* t) {
  return t && t->dtype.code == KILN_STR_DTYPE_CODE && t->dtype.bits == KILN_STR_DTYPE_BITS &&
         t->dtype.lanes == 1;
}

static uint64_t numel(int32_t ndim, const int64_t* shape) {
  uint64_t n = 1;
  for (int32_t d = 0; d < ndim; ++d) n *= (uint64_t)shape[d];
  return n;
}

kiln_status_t kiln_str_tensor_block(kiln_tensor_t* tensor, const void** out_block,
                                    uint64_t* out_nbytes, uint64_t* out_count) {
  DLTensor* t = kiln_tensor_dltensor(tensor);
  if (!t || !out_block || !out_nbytes || !out_count)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_str_tensor_block: NULL argument");
  if (!kiln_str_is_tensor(t))
    return kiln_ext_fail(KILN_ERR_DTYPE_MISMATCH, "expected a string tensor, got a tensor of dtype "
                         "(code %u, bits %u, lanes %u)", (unsigned)t->dtype.code,
                         (unsigned)t->dtype.bits, (unsigned)t->dtype.lanes);
  if (t->byte_offset != 0 || t->device.device_type != kDLCPU)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "a string tensor must be a whole block on the cpu");
  uint64_t count = numel(t->ndim, t->shape), expect = 1;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] != 1 && t->strides[d] != (int64_t)expect)
      return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "a string tensor must be compact (row-major)");
    expect *= (uint64_t)t->shape[d];
  }
  /* The block ends where its furthest element ends; kiln_str_validate then checks every
   * record and every byte up to there. */
  const kiln_str_t* r = t->data;
  uint64_t end = count * REC;
  for (uint64_t i = 0; i < count; ++i) {
    if (r[i].offset > UINT64_MAX - r[i].length)
      return kiln_ext_fail(KILN_ERR_INVALID_FORMAT, "string tensor: element %llu (offset %llu, "
                           "length %llu) overflows", (unsigned long long)i,
                           (unsigned long long)r[i].offset, (unsigned long long)r[i].length);
    if (r[i].offset + r[i].length > end) end = r[i].offset + r[i].length;
  }
  kiln_status_t st = kiln_str_validate(t->data, end, count);
  if (st != KILN_OK) return st;
  *out_block = t->data;
  *out_nbytes = end;
  *out_count = count;
  return KILN_OK;
}

/* A tensor owning `block` (from malloc; freed here on failure). */
static kiln_status_t wrap_block(void* block, const int64_t* shape, int32_t ndim,
                                kiln_tensor_t** out_tensor) {
  DLTensor dl;
  memset(&dl, 0, sizeof dl);
  dl.data = block;
  dl.device.device_type = kDLCPU;
  dl.ndim = ndim;
  dl.dtype.code = KILN_STR_DTYPE_CODE;
  dl.dtype.bits = KILN_STR_DTYPE_BITS;
  dl.dtype.lanes = 1;
  dl.shape = (int64_t*)shape;
  kiln_status_t st = kiln_tensor_wrap(&dl, free_block, block, out_tensor);
  if (st != KILN_OK) kiln_str_free(block);
  return st;
}

kiln_status_t kiln_str_tensor_from_block(const void* block, uint64_t nbytes, const int64_t* shape,
                                         int32_t ndim, kiln_tensor_t** out_tensor) {
  if ((!block && nbytes) || (!shape && ndim > 0) || ndim < 0 || ndim > KILN_MAX_NDIM || !out_tensor)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_str_tensor_from_block: invalid arguments");
  for (int32_t d = 0; d < ndim; ++d)
    if (shape[d] < 0)
      return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "string tensor: negative extent %lld",
                           (long long)shape[d]);
  void* copy = malloc(nbytes ? nbytes : 1); /* malloc's alignment suits the records */
  if (!copy) return kiln_ext_fail(KILN_ERR_OUT_OF_MEMORY, "string tensor: out of memory (%llu bytes)",
                                  (unsigned long long)nbytes);
  if (nbytes) memcpy(copy, block, nbytes);
  kiln_status_t st = kiln_str_validate(copy, nbytes, numel(ndim, shape));
  if (st != KILN_OK) {
    free(copy);
    return st;
  }
  return wrap_block(copy, shape, ndim, out_tensor);
}

/* ---- arguments ------------------------------------------------------------------------------ */

typedef struct {
  const char* fn; /* "kiln_strings.equal", for messages */
  const kiln_value_t* args;
} call_t;

static DLTensor* tensor_arg(const call_t* c, int32_t i) {
  return c->args[i].kind == KILN_VALUE_TENSOR ? kiln_tensor_dltensor(c->args[i].u.tensor) : NULL;
}

static kiln_status_t str_arg(const call_t* c, int32_t i, const void** block, uint64_t* count) {
  uint64_t nbytes;
  if (!tensor_arg(c, i))
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "%s: argument %d must be a string tensor", c->fn, (int)i);
  kiln_status_t st = kiln_str_tensor_block(c->args[i].u.tensor, block, &nbytes, count);
  if (st != KILN_OK) {
    char inner[900];
    snprintf(inner, sizeof inner, "%s", kiln_last_error());
    return kiln_ext_fail(st, "%s: argument %d: %s", c->fn, (int)i, inner);
  }
  return KILN_OK;
}

/* A one-element string argument (a pattern, a delimiter, a default) as a NUL-terminated copy. */
static kiln_status_t text_arg(const call_t* c, int32_t i, char** out) {
  const void* b;
  uint64_t n;
  kiln_status_t st = str_arg(c, i, &b, &n);
  if (st != KILN_OK) return st;
  if (n != 1)
    return kiln_ext_fail(KILN_ERR_SHAPE_MISMATCH, "%s: argument %d must hold one string, it holds %llu",
                         c->fn, (int)i, (unsigned long long)n);
  const kiln_str_t* r = b;
  if (memchr((const char*)b + r->offset, 0, r->length))
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "%s: argument %d contains NUL", c->fn, (int)i);
  *out = malloc(r->length + 1);
  if (!*out) return kiln_ext_fail(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", c->fn);
  memcpy(*out, (const char*)b + r->offset, r->length);
  (*out)[r->length] = 0;
  return KILN_OK;
}

/* A one-element int64 argument (an attribute: case action, maxsplit). */
static kiln_status_t int_arg(const call_t* c, int32_t i, int64_t* out) {
  DLTensor* t = tensor_arg(c, i);
  if (!t || t->dtype.code != kDLInt || t->dtype.bits != 64 || numel(t->ndim, t->shape) != 1)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "%s: argument %d must be one int64", c->fn, (int)i);
  *out = *(const int64_t*)((const char*)t->data + t->byte_offset);
  return KILN_OK;
}

static kiln_status_t nargs(const call_t* c, int32_t got, int32_t want) {
  if (got == want) return KILN_OK;
  return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "%s: expected %d arguments, got %d", c->fn,
                       (int)want, (int)got);
}

static void set_tensor(kiln_value_t* out, kiln_tensor_t* t) {
  out->kind = KILN_VALUE_TENSOR;
  out->u.tensor = t;
}

static kiln_status_t new_tensor(const int64_t* shape, int32_t ndim, uint8_t code, uint8_t bits,
                                kiln_tensor_t** out) {
  DLDataType dt = {code, bits, 1};
  DLDevice cpu = {kDLCPU, 0};
  return kiln_tensor_create(shape, ndim, dt, cpu, out);
}

/* The broadcast (numpy) shape of a and b, and each one's element strides over it. */
static kiln_status_t broadcast(const call_t* c, const DLTensor* a, const DLTensor* b, int32_t* ndim,
                               int64_t* shape, int64_t* as, int64_t* bs) {
  int32_t n = a->ndim > b->ndim ? a->ndim : b->ndim;
  int64_t sa = 1, sb = 1;
  for (int32_t d = n - 1; d >= 0; --d) {
    int32_t da = d - (n - a->ndim), db = d - (n - b->ndim);
    int64_t ea = da >= 0 ? a->shape[da] : 1, eb = db >= 0 ? b->shape[db] : 1;
    if (ea != eb && ea != 1 && eb != 1)
      return kiln_ext_fail(KILN_ERR_SHAPE_MISMATCH, "%s: shapes do not broadcast (dimension %d: %lld "
                           "and %lld)", c->fn, (int)d, (long long)ea, (long long)eb);
    shape[d] = ea == 1 ? eb : ea;
    as[d] = ea == 1 ? 0 : sa;
    bs[d] = eb == 1 ? 0 : sb;
    sa *= ea;
    sb *= eb;
  }
  *ndim = n;
  return KILN_OK;
}

/* ---- the functions -------------------------------------------------------------------------- */

#define TRY(x) do { st = (x); if (st != KILN_OK) goto done; } while (0)

/* from_block(block: uint8[n], shape: int64[ndim]): a string constant of a compiled model, kept
 * in the executable as its block's bytes; validated here, where it becomes a value. */
static kiln_status_t fn_from_block(void* ctx, const kiln_value_t* args, int32_t n, kiln_value_t* out) {
  call_t c = {"kiln_strings.from_block", args};
  kiln_status_t st = nargs(&c, n, 2);
  if (st != KILN_OK) return st;
  DLTensor *b = tensor_arg(&c, 0), *s = tensor_arg(&c, 1);
  (void)ctx;
  if (!b || !s || b->dtype.code != kDLUInt || b->dtype.bits != 8 || b->ndim != 1 ||
      s->dtype.code != kDLInt || s->dtype.bits != 64 || s->ndim != 1 || s->shape[0] > KILN_MAX_NDIM)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "%s: expects a uint8 block and an int64 shape", c.fn);
  kiln_tensor_t* t = NULL;
  st = kiln_str_tensor_from_block((const char*)b->data + b->byte_offset, (uint64_t)b->shape[0],
                                  (const int64_t*)((const char*)s->data + s->byte_offset),
                                  (int32_t)s->shape[0], &t);
  if (st != KILN_OK) {
    char inner[900];
    snprintf(inner, sizeof inner, "%s", kiln_last_error());
    return kiln_ext_fail(st, "%s: a string constant: %s", c.fn, inner);
  }
  set_tensor(out, t);
  return KILN_OK;
}

/* equal(a, b) -> bool (broadcast); concat(a, b) -> string (broadcast). */
static kiln_status_t binary(const char* fn, const kiln_value_t* args, int32_t n, kiln_value_t* out,
                            int concat) {
  call_t c = {fn, args};
  const void *a, *b;
  uint64_t na, nb, nbytes;
  int32_t ndim = 0;
  int64_t shape[KILN_MAX_NDIM], as[KILN_MAX_NDIM], bs[KILN_MAX_NDIM];
  kiln_tensor_t* t = NULL;
  void* block = NULL;
  kiln_status_t st = nargs(&c, n, 2);
  if (st != KILN_OK) return st;
  TRY(str_arg(&c, 0, &a, &na));
  TRY(str_arg(&c, 1, &b, &nb));
  TRY(broadcast(&c, tensor_arg(&c, 0), tensor_arg(&c, 1), &ndim, shape, as, bs));
  if (concat) {
    TRY(kiln_str_concat(a, as, b, bs, ndim, shape, &block, &nbytes));
    TRY(wrap_block(block, shape, ndim, &t));
  } else {
    TRY(new_tensor(shape, ndim, kDLBool, 8, &t));
    st = kiln_str_equal(a, as, b, bs, ndim, shape, kiln_tensor_dltensor(t)->data);
    if (st != KILN_OK) goto done;
  }
  set_tensor(out, t);
  return KILN_OK;
done:
  kiln_tensor_release(t);
  return st;
}

static kiln_status_t fn_equal(void* ctx, const kiln_value_t* args, int32_t n, kiln_value_t* out) {
  (void)ctx;
  return binary("kiln_strings.equal", args, n, out, 0);
}

static kiln_status_t fn_concat(void* ctx, const kiln_value_t* args, int32_t n, kiln_value_t* out) {
  (void)ctx;
  return binary("kiln_strings.concat", args, n, out, 1);
}

/* regex_full_match(x, pattern: one string) -> bool of x's shape. */
static kiln_status_t fn_regex(void* ctx, const kiln_value_t* args, int32_t n, kiln_value_t* out) {
  call_t c = {"kiln_strings.regex_full_match", args};
  const void* x;
  uint64_t count;
  char* pattern = NULL;
  kiln_tensor_t* t = NULL;
  kiln_status_t st = nargs(&c, n, 2);
  (void)ctx;
  if (st != KILN_OK) return st;
  TRY(str_arg(&c, 0, &x, &count));
  TRY(text_arg(&c, 1, &pattern));
  DLTensor* xt = tensor_arg(&c, 0);
  TRY(new_tensor(xt->shape, xt->ndim, kDLBool, 8, &t));
  TRY(kiln_str_regex_full_match(x, count, pattern, kiln_tensor_dltensor(t)->data));
  free(pattern);
  set_tensor(out, t);
  return KILN_OK;
done:
  free(pattern);
  kiln_tensor_release(t);
  return st;
}

/* normalize(x: [C] or [1, C], stopwords: [S], case_action, case_sensitive) -> [N] or [1, N]. */
static kiln_status_t fn_normalize(void* ctx, const kiln_value_t* args, int32_t n, kiln_value_t* out) {
  call_t c = {"kiln_strings.normalize", args};
  const void *x, *stop;
  uint64_t count, nstop, nbytes, kept;
  int64_t action, sensitive;
  void* block = NULL;
  kiln_tensor_t* t = NULL;
  kiln_status_t st = nargs(&c, n, 4);
  (void)ctx;
  if (st != KILN_OK) return st;
  TRY(str_arg(&c, 0, &x, &count));
  TRY(str_arg(&c, 1, &stop, &nstop));
  TRY(int_arg(&c, 2, &action));
  TRY(int_arg(&c, 3, &sensitive));
  DLTensor* xt = tensor_arg(&c, 0);
  if (xt->ndim != 1 && !(xt->ndim == 2 && xt->shape[0] == 1))
    return kiln_ext_fail(KILN_ERR_SHAPE_MISMATCH, "%s: the input must be [C] or [1, C]", c.fn);
  if (action < 0 || action > 2)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "%s: case action %lld is not 0, 1 or 2", c.fn,
                         (long long)action);
  TRY(kiln_str_normalize(x, count, (int32_t)action, sensitive != 0, stop, nstop, &block, &nbytes, &kept));
  int64_t shape[2] = {1, (int64_t)kept};
  TRY(wrap_block(block, xt->ndim == 1 ? shape + 1 : shape, xt->ndim, &t));
  set_tensor(out, t);
  return KILN_OK;
done:
  return st;
}

/* split(x, delimiter: one string, "" for whitespace, maxsplit) -> (tokens [..., W], counts). */
static kiln_status_t fn_split(void* ctx, const kiln_value_t* args, int32_t n, kiln_value_t* out) {
  call_t c = {"kiln_strings.split", args};
  const void* x;
  uint64_t count, nbytes, width;
  int64_t maxsplit, shape[KILN_MAX_NDIM + 1];
  char* delim = NULL;
  void* block = NULL;
  kiln_tensor_t *tokens = NULL, *counts = NULL;
  kiln_status_t st = nargs(&c, n, 3);
  (void)ctx;
  if (st != KILN_OK) return st;
  TRY(str_arg(&c, 0, &x, &count));
  TRY(text_arg(&c, 1, &delim));
  TRY(int_arg(&c, 2, &maxsplit));
  DLTensor* xt = tensor_arg(&c, 0);
  if (xt->ndim >= KILN_MAX_NDIM)
    return kiln_ext_fail(KILN_ERR_SHAPE_MISMATCH, "%s: the input has too many dimensions", c.fn);
  TRY(new_tensor(xt->shape, xt->ndim, kDLInt, 64, &counts));
  TRY(kiln_str_split(x, count, delim, maxsplit, &block, &nbytes, &width,
                     kiln_tensor_dltensor(counts)->data));
  memcpy(shape, xt->shape, (size_t)xt->ndim * sizeof *shape);
  shape[xt->ndim] = (int64_t)width;
  TRY(wrap_block(block, shape, xt->ndim + 1, &tokens));
  kiln_value_t items[2];
  set_tensor(&items[0], tokens);
  set_tensor(&items[1], counts);
  out->kind = KILN_VALUE_TUPLE;
  TRY(kiln_tuple_create(items, 2, &out->u.tuple)); /* the tuple holds its own references */
  out->kind = KILN_VALUE_TUPLE;
done:
  if (st != KILN_OK) out->kind = KILN_VALUE_NULL;
  free(delim);
  kiln_tensor_release(tokens);
  kiln_tensor_release(counts);
  return st;
}

/* index(x, keys: [K]) -> int64 of x's shape: the key's index, or -1. */
static kiln_status_t fn_index(void* ctx, const kiln_value_t* args, int32_t n, kiln_value_t* out) {
  call_t c = {"kiln_strings.index", args};
  const void *x, *keys;
  uint64_t count, nkeys;
  kiln_tensor_t* t = NULL;
  kiln_status_t st = nargs(&c, n, 2);
  (void)ctx;
  if (st != KILN_OK) return st;
  TRY(str_arg(&c, 0, &x, &count));
  TRY(str_arg(&c, 1, &keys, &nkeys));
  DLTensor* xt = tensor_arg(&c, 0);
  TRY(new_tensor(xt->shape, xt->ndim, kDLInt, 64, &t));
  TRY(kiln_str_index(x, count, keys, nkeys, kiln_tensor_dltensor(t)->data));
  set_tensor(out, t);
  return KILN_OK;
done:
  kiln_tensor_release(t);
  return st;
}

/* take(src: [K], index: int64, default: one string) -> strings of index's shape. */
static kiln_status_t fn_take(void* ctx, const kiln_value_t* args, int32_t n, kiln_value_t* out) {
  call_t c = {"kiln_strings.take", args};
  const void *src, *dflt;
  uint64_t nsrc, ndflt, nbytes;
  void* block = NULL;
  kiln_tensor_t* t = NULL;
  kiln_status_t st = nargs(&c, n, 3);
  (void)ctx;
  if (st != KILN_OK) return st;
  TRY(str_arg(&c, 0, &src, &nsrc));
  TRY(str_arg(&c, 2, &dflt, &ndflt));
  DLTensor* it = tensor_arg(&c, 1);
  if (!it || it->dtype.code != kDLInt || it->dtype.bits != 64 || ndflt != 1)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "%s: expects (strings, int64 indices, one default "
                         "string)", c.fn);
  const kiln_str_t* d = dflt;
  TRY(kiln_str_take(src, nsrc, (const int64_t*)((const char*)it->data + it->byte_offset),
                    numel(it->ndim, it->shape), (const char*)dflt + d->offset, d->length, &block, &nbytes));
  TRY(wrap_block(block, it->shape, it->ndim, &t));
  set_tensor(out, t);
  return KILN_OK;
done:
  return st;
}

kiln_status_t kiln_strings_register(void) {
  static const struct {
    const char* name;
    kiln_callback_fn fn;
  } table[] = {{"kiln_strings.from_block", fn_from_block}, {"kiln_strings.equal", fn_equal},
               {"kiln_strings.concat", fn_concat},         {"kiln_strings.regex_full_match", fn_regex},
               {"kiln_strings.normalize", fn_normalize},   {"kiln_strings.split", fn_split},
               {"kiln_strings.index", fn_index},           {"kiln_strings.take", fn_take}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i) {
    kiln_function_t* f = NULL;
    kiln_status_t st = kiln_function_create(table[i].name, table[i].fn, NULL, NULL, &f);
    if (st == KILN_OK) st = kiln_register_function(table[i].name, f, 1);
    kiln_function_release(f);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}
