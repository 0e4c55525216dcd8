/* module.c — the generic module and function objects: reference counting, lookup and the one
 * call entry point, dispatching through each kind's vtable; plus the callback function kind,
 * for functions implemented outside the runtime (bindings, external-function registries). */
#include <string.h>

#include "internal.h"

void kiln_module_init(kiln_module_t* module, const kiln_module_vtable_t* vtable, const char* name) {
  module->vtable = vtable;
  module->refcount = 1;
  module->name = name;
}

void kiln_module_retain(kiln_module_t* module) {
  if (module) KILN_ATOMIC_INC(&module->refcount);
}

void kiln_module_release(kiln_module_t* module) {
  if (module && KILN_ATOMIC_DEC(&module->refcount) == 0) module->vtable->destroy(module);
}

const char* kiln_module_kind(const kiln_module_t* module) {
  return module ? module->vtable->kind : "";
}

int32_t kiln_module_num_functions(const kiln_module_t* module) {
  return module ? module->vtable->num_functions(module) : 0;
}

const char* kiln_module_function_name(const kiln_module_t* module, int32_t index) {
  if (!module || index < 0 || index >= module->vtable->num_functions(module)) return NULL;
  return module->vtable->function_name(module, index);
}

/* "library module 'x.so' has no function 'f'; its functions: main, scale" — listing the names
 * turns most typos into one-glance fixes. */
static kiln_status_t not_found(const kiln_module_t* module, const char* name) {
  char names[512] = "none";
  size_t n = 0;
  int32_t count = kiln_module_num_functions(module);
  for (int32_t i = 0; i < count && n + 1 < sizeof names; ++i)
    n += kiln_format(names + n, sizeof names - n, "%s%s", i ? ", " : "",
                     kiln_module_function_name(module, i));
  return kiln_error(KILN_ERR_NOT_FOUND, "%s module '%s' has no function '%s'; its functions: %s",
                    module->vtable->kind, module->name, name, names);
}

kiln_status_t kiln_module_get_function(kiln_module_t* module, const char* name,
                                       kiln_function_t** out_function) {
  if (!module || !name || !out_function)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "kiln_module_get_function: module, name and out_function must not be NULL");
  kiln_function_t* fn = NULL;
  kiln_status_t st = module->vtable->get_function(module, name, &fn);
  if (st == KILN_ERR_NOT_FOUND) return not_found(module, name);
  if (st != KILN_OK) return st;
  *out_function = fn;
  return KILN_OK;
}

void kiln_function_init(kiln_function_t* function, const kiln_function_vtable_t* vtable,
                        const char* name, kiln_module_t* module) {
  function->vtable = vtable;
  function->refcount = 1;
  function->name = name;
  function->module = module;
  kiln_module_retain(module);
}

void kiln_function_retain(kiln_function_t* function) {
  if (function) KILN_ATOMIC_INC(&function->refcount);
}

void kiln_function_release(kiln_function_t* function) {
  if (!function || KILN_ATOMIC_DEC(&function->refcount) != 0) return;
  kiln_module_t* module = function->module;
  function->vtable->destroy(function);
  kiln_module_release(module); /* last: the function's code or name may live in the module */
}

const char* kiln_function_name(const kiln_function_t* function) {
  return function ? function->name : "";
}

kiln_status_t kiln_function_call(kiln_function_t* function, const kiln_value_t* args,
                                 int32_t num_args, kiln_value_t* out_result) {
  if (!function) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_function_call: function is NULL");
  if (num_args < 0 || (num_args > 0 && !args))
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: invalid argument array (%d arguments at %s)",
                      function->name, (int)num_args, args ? "non-NULL" : "NULL");
  kiln_value_t result;
  result.kind = KILN_VALUE_NULL;
  result.u.i = 0;
  kiln_status_t st = function->vtable->call(function, args, num_args, &result);
  if (st != KILN_OK) {
    kiln_value_release(&result); /* an implementation that failed half-way may have set it */
    return st;
  }
  if (out_result) *out_result = result;
  else kiln_value_release(&result);
  return KILN_OK;
}

/* ---- callback functions -------------------------------------------------------------------- */

typedef struct {
  kiln_function_t base;
  kiln_callback_fn callback;
  void* ctx;
  kiln_deleter_fn ctx_deleter;
  char name[];
} callback_function_t;

static kiln_status_t callback_call(kiln_function_t* function, const kiln_value_t* args,
                                   int32_t num_args, kiln_value_t* out_result) {
  callback_function_t* fn = (callback_function_t*)function;
  return fn->callback(fn->ctx, args, num_args, out_result);
}

static void callback_destroy(kiln_function_t* function) {
  callback_function_t* fn = (callback_function_t*)function;
  if (fn->ctx_deleter) fn->ctx_deleter(fn->ctx);
  kiln_mem_free(fn);
}

static const kiln_function_vtable_t kCallbackVtable = {callback_call, callback_destroy};

kiln_status_t kiln_function_create(const char* name, kiln_callback_fn callback, void* ctx,
                                   kiln_deleter_fn ctx_deleter, kiln_function_t** out_function) {
  if (!name || !callback || !out_function)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                      "kiln_function_create: name, callback and out_function must not be NULL");
  size_t n = strlen(name) + 1;
  callback_function_t* fn = kiln_mem_alloc(sizeof *fn + n);
  if (!fn) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory creating function '%s'", name);
  memcpy(fn->name, name, n);
  kiln_function_init(&fn->base, &kCallbackVtable, fn->name, NULL);
  fn->callback = callback;
  fn->ctx = ctx;
  fn->ctx_deleter = ctx_deleter;
  *out_function = &fn->base;
  return KILN_OK;
}
