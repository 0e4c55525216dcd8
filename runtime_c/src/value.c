/* value.c — ownership of kiln_value_t payloads, and tuples (immutable arrays of owned values). */
#include <string.h>

#include "internal.h"

struct kiln_tuple_t {
  int32_t refcount;
  int32_t size;
  kiln_value_t items[]; /* owned */
};

void kiln_value_release(kiln_value_t* value) {
  if (!value) return;
  switch (value->kind) {
    case KILN_VALUE_STRING: kiln_mem_free((char*)value->u.s); break;
    case KILN_VALUE_TENSOR: kiln_tensor_release(value->u.tensor); break;
    case KILN_VALUE_MODULE: kiln_module_release(value->u.module); break;
    case KILN_VALUE_FUNCTION: kiln_function_release(value->u.function); break;
    case KILN_VALUE_TUPLE: kiln_tuple_release(value->u.tuple); break;
    default: break;
  }
  value->kind = KILN_VALUE_NULL;
  value->u.i = 0;
}

kiln_status_t kiln_value_from_string(const char* str, kiln_value_t* out_value) {
  if (!str || !out_value)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_value_from_string: str and out_value must not be NULL");
  char* copy = kiln_mem_strdup(str);
  if (!copy) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory copying a string value");
  out_value->kind = KILN_VALUE_STRING;
  out_value->u.s = copy;
  return KILN_OK;
}

kiln_status_t kiln_value_copy(const kiln_value_t* value, kiln_value_t* out_value) {
  if (!value || !out_value)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_value_copy: value and out_value must not be NULL");
  switch (value->kind) {
    case KILN_VALUE_NULL:
    case KILN_VALUE_INT:
    case KILN_VALUE_FLOAT:
    case KILN_VALUE_DEVICE: break;
    case KILN_VALUE_STRING: return kiln_value_from_string(value->u.s, out_value);
    case KILN_VALUE_TENSOR: kiln_tensor_retain(value->u.tensor); break;
    case KILN_VALUE_MODULE: kiln_module_retain(value->u.module); break;
    case KILN_VALUE_FUNCTION: kiln_function_retain(value->u.function); break;
    case KILN_VALUE_TUPLE: kiln_tuple_retain(value->u.tuple); break;
    default:
      return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_value_copy: unknown value kind %d",
                        (int)value->kind);
  }
  *out_value = *value;
  return KILN_OK;
}

/* ---- tuples ---------------------------------------------------------------------------------- */

kiln_tuple_t* kiln_tuple_alloc(int32_t size) {
  kiln_tuple_t* t = kiln_mem_calloc(sizeof *t + (size_t)size * sizeof(kiln_value_t));
  if (!t) return NULL;
  t->refcount = 1;
  t->size = size;
  return t; /* calloc: every item is KILN_VALUE_NULL (0) */
}

kiln_value_t* kiln_tuple_items(kiln_tuple_t* tuple) { return tuple->items; }

size_t kiln_tuple_embedded_size(int32_t size) {
  return sizeof(kiln_tuple_t) + (size_t)size * sizeof(kiln_value_t);
}

kiln_tuple_t* kiln_tuple_init_borrowed(void* storage, int32_t size) {
  kiln_tuple_t* t = storage;
  t->refcount = INT32_MAX / 2; /* released at most once per hand-out: never reaches zero */
  t->size = size;
  return t;
}

kiln_status_t kiln_tuple_create(const kiln_value_t* items, int32_t num_items,
                                kiln_tuple_t** out_tuple) {
  if (!out_tuple || num_items < 0 || (num_items > 0 && !items))
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "kiln_tuple_create: invalid arguments (%d items at %s, out_tuple %s)",
                      (int)num_items, items ? "non-NULL" : "NULL", out_tuple ? "non-NULL" : "NULL");
  kiln_tuple_t* t = kiln_tuple_alloc(num_items);
  if (!t) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory creating a tuple of %d items",
                            (int)num_items);
  for (int32_t i = 0; i < num_items; ++i) {
    kiln_status_t st = kiln_value_copy(&items[i], &t->items[i]);
    if (st != KILN_OK) {
      kiln_tuple_release(t); /* releases the items copied so far; the rest are null */
      return st;
    }
  }
  *out_tuple = t;
  return KILN_OK;
}

void kiln_tuple_retain(kiln_tuple_t* tuple) {
  if (tuple) KILN_ATOMIC_INC(&tuple->refcount);
}

void kiln_tuple_release(kiln_tuple_t* tuple) {
  if (!tuple || KILN_ATOMIC_DEC(&tuple->refcount) != 0) return;
  for (int32_t i = 0; i < tuple->size; ++i) kiln_value_release(&tuple->items[i]);
  kiln_mem_free(tuple);
}

int32_t kiln_tuple_size(const kiln_tuple_t* tuple) { return tuple ? tuple->size : 0; }

kiln_status_t kiln_tuple_get_item(const kiln_tuple_t* tuple, int32_t index,
                                  kiln_value_t* out_value) {
  if (!tuple || !out_value)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tuple_get_item: tuple and out_value must not be NULL");
  if (index < 0 || index >= tuple->size)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "tuple index %d is out of range for a tuple of %d items",
                      (int)index, (int)tuple->size);
  return kiln_value_copy(&tuple->items[index], out_value);
}
