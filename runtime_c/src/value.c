/* value.c — ownership of kiln_value_t payloads. */
#include "internal.h"

void kiln_value_release(kiln_value_t* value) {
  if (!value) return;
  switch (value->kind) {
    case KILN_VALUE_STRING: kiln_mem_free((char*)value->u.s); break;
    case KILN_VALUE_TENSOR: kiln_tensor_release(value->u.tensor); break;
    case KILN_VALUE_MODULE: kiln_module_release(value->u.module); break;
    case KILN_VALUE_FUNCTION: kiln_function_release(value->u.function); break;
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
    case KILN_VALUE_FLOAT: break;
    case KILN_VALUE_STRING: return kiln_value_from_string(value->u.s, out_value);
    case KILN_VALUE_TENSOR: kiln_tensor_retain(value->u.tensor); break;
    case KILN_VALUE_MODULE: kiln_module_retain(value->u.module); break;
    case KILN_VALUE_FUNCTION: kiln_function_retain(value->u.function); break;
    default:
      return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_value_copy: unknown value kind %d",
                        (int)value->kind);
  }
  *out_value = *value;
  return KILN_OK;
}
