/* derived.c — derived dimensions (kiln_kernel_abi.h, kiln_derived_dim_t): dimensions that are
 * expressions of the symbolic ones, shared by kernel signatures and VM function signatures.
 *
 * validate: at load time, every entry's opcode, flags and operand references (an operand refers
 * only to a bound dimension or an earlier derived one, so evaluation in order is well-defined
 * and never reads an unset value). eval: at call time, in order, with checked arithmetic: an
 * overflow or a division by zero is an error naming the dimension, never undefined behaviour.
 * format: "past + n" for messages. */
#include "internal.h"

static const char* op_symbol(uint32_t op) {
  static const char* const names[] = {"?", "+", "-", "*", "//", "%", "min", "max"};
  return op <= KILN_DIM_MAX ? names[op] : "?";
}

kiln_status_t kiln_derived_validate(const kiln_kernel_info_t* k, char* msg, size_t cap) {
  if (k->num_derived < 0 || k->num_sym + k->num_derived > KILN_MAX_KERNEL_SYMS ||
      (k->num_derived > 0 && !k->derived)) {
    kiln_format(msg, cap, "%d symbolic and %d derived dimensions at %s (limit %d in all)",
                (int)k->num_sym, (int)k->num_derived, k->derived ? "a valid table" : "NULL",
                KILN_MAX_KERNEL_SYMS);
    return KILN_ERR_INVALID_FORMAT;
  }
  for (int32_t j = 0; j < k->num_derived; ++j) {
    const kiln_derived_dim_t* d = &k->derived[j];
    int64_t self = k->num_sym + j;
    if (d->op < KILN_DIM_ADD || d->op > KILN_DIM_MAX ||
        (d->flags & ~(KILN_DIM_A_CONST | KILN_DIM_B_CONST))) {
      kiln_format(msg, cap, "derived dimension %d has unknown op %u or flags 0x%x", (int)j,
                  (unsigned)d->op, (unsigned)d->flags);
      return KILN_ERR_INVALID_FORMAT;
    }
    if ((!(d->flags & KILN_DIM_A_CONST) && (d->a < 0 || d->a >= self)) ||
        (!(d->flags & KILN_DIM_B_CONST) && (d->b < 0 || d->b >= self))) {
      kiln_format(msg, cap, "derived dimension %d refers to symbolic dimension %lld; it may refer "
                  "only to dimensions 0..%lld", (int)j,
                  (long long)(!(d->flags & KILN_DIM_A_CONST) && (d->a < 0 || d->a >= self) ? d->a : d->b),
                  (long long)(self - 1));
      return KILN_ERR_INVALID_FORMAT;
    }
  }
  /* Every plain symbolic dimension must be bound by some parameter's plain entry. */
  for (int32_t s = 0; s < k->num_sym; ++s) {
    int bound = 0;
    for (int32_t i = 0; i < k->num_params && !bound; ++i)
      for (int32_t d = 0; d < k->params[i].ndim && !bound; ++d)
        bound = k->params[i].shape[d] == -1 - (int64_t)s;
    if (!bound) {
      kiln_format(msg, cap, "symbolic dimension %d '%s' appears in no parameter's shape, so no "
                  "argument binds it", (int)s, k->sym_names[s]);
      return KILN_ERR_INVALID_FORMAT;
    }
  }
  return KILN_OK;
}

static int apply(uint32_t op, int64_t a, int64_t b, int64_t* out) {
  switch (op) {
    case KILN_DIM_ADD: return !__builtin_add_overflow(a, b, out);
    case KILN_DIM_SUB: return !__builtin_sub_overflow(a, b, out);
    case KILN_DIM_MUL: return !__builtin_mul_overflow(a, b, out);
    case KILN_DIM_FLOORDIV:
    case KILN_DIM_FLOORMOD: {
      if (b == 0 || (a == INT64_MIN && b == -1)) return 0;
      int64_t q = a / b, r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) {
        q -= 1;
        r += b;
      }
      *out = op == KILN_DIM_FLOORDIV ? q : r;
      return 1;
    }
    case KILN_DIM_MIN: *out = a < b ? a : b; return 1;
    case KILN_DIM_MAX: *out = a > b ? a : b; return 1;
    default: return 0;
  }
}

kiln_status_t kiln_derived_eval(const kiln_kernel_info_t* k, int64_t* sym_values) {
  for (int32_t j = 0; j < k->num_derived; ++j) {
    const kiln_derived_dim_t* d = &k->derived[j];
    int64_t a = (d->flags & KILN_DIM_A_CONST) ? d->a : sym_values[d->a];
    int64_t b = (d->flags & KILN_DIM_B_CONST) ? d->b : sym_values[d->b];
    if (!apply(d->op, a, b, &sym_values[k->num_sym + j])) {
      char expr[KILN_SHAPE_STRING];
      kiln_format_dim(expr, sizeof expr, k, -1 - (int64_t)(k->num_sym + j));
      return kiln_error(KILN_ERR_SHAPE_MISMATCH, "%s: the arguments' shapes give %s = %lld %s %lld, "
                        "which %s", k->name, expr, (long long)a, op_symbol(d->op), (long long)b,
                        d->op == KILN_DIM_FLOORDIV || d->op == KILN_DIM_FLOORMOD
                            ? "divides by zero or overflows" : "overflows");
    }
  }
  return KILN_OK;
}

/* Writes operand `v` (a constant, or dimension number v) of a derived dimension. */
static size_t format_operand(char* buf, size_t cap, const kiln_kernel_info_t* k, int is_const,
                             int64_t v, int depth) {
  if (is_const) return kiln_format(buf, cap, "%lld", (long long)v);
  if (v < k->num_sym) return kiln_format(buf, cap, "%s", k->sym_names[v]);
  const kiln_derived_dim_t* d = &k->derived[v - k->num_sym];
  if (depth > 8) return kiln_format(buf, cap, "...");
  size_t n = 0;
  int call = d->op == KILN_DIM_MIN || d->op == KILN_DIM_MAX;
  n += kiln_format(buf + n, cap - n, call ? "%s(" : "(", op_symbol(d->op));
  if (n < cap) n += format_operand(buf + n, cap - n, k, d->flags & KILN_DIM_A_CONST, d->a, depth + 1);
  if (n < cap) n += kiln_format(buf + n, cap - n, call ? ", " : " %s ", op_symbol(d->op));
  if (n < cap) n += format_operand(buf + n, cap - n, k, d->flags & KILN_DIM_B_CONST, d->b, depth + 1);
  if (n < cap) n += kiln_format(buf + n, cap - n, ")");
  return n;
}

size_t kiln_format_dim(char* buf, size_t cap, const kiln_kernel_info_t* k, int64_t entry) {
  if (entry >= 0) return kiln_format(buf, cap, "%lld", (long long)entry);
  int64_t s = -1 - entry;
  if (s < k->num_sym) return kiln_format(buf, cap, "%s", k->sym_names[s]);
  /* A derived dimension prints without its outer parentheses: "past + n". */
  char inner[KILN_SHAPE_STRING];
  size_t n = format_operand(inner, sizeof inner, k, 0, s, 0);
  const kiln_derived_dim_t* d = &k->derived[s - k->num_sym];
  if (d->op != KILN_DIM_MIN && d->op != KILN_DIM_MAX && n >= 2 && n < sizeof inner - 1) {
    inner[n - 1] = 0;
    return kiln_format(buf, cap, "%s", inner + 1);
  }
  return kiln_format(buf, cap, "%s", inner);
}

void kiln_format_param_shape(char* buf, size_t cap, const kiln_kernel_info_t* k,
                             const int64_t* shape, int32_t ndim) {
  size_t n = kiln_format(buf, cap, "(");
  for (int32_t d = 0; d < ndim && n < cap; ++d) {
    if (d) n += kiln_format(buf + n, cap - n, ", ");
    if (n < cap) n += kiln_format_dim(buf + n, cap - n, k, shape[d]);
  }
  if (n < cap) kiln_format(buf + n, cap - n, ndim == 1 ? ",)" : ")");
}
