/* format.c — message formatting without stdio (so a bare-metal build needs no printf), and the
 * names of dtypes, devices, shapes and value kinds used in error messages. */
#include <string.h>

#include "internal.h"

typedef struct {
  char* buf;
  size_t cap;
  size_t len; /* characters written, excluding the terminating NUL */
} sink_t;

static void put_char(sink_t* s, char c) {
  if (s->len + 1 < s->cap) s->buf[s->len++] = c;
}

static void put_str(sink_t* s, const char* str) {
  if (!str) str = "(null)";
  while (*str) put_char(s, *str++);
}

static void put_unsigned(sink_t* s, unsigned long long v, unsigned base) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  while (n) put_char(s, digits[--n]);
}

static void put_signed(sink_t* s, long long v) {
  if (v < 0) {
    put_char(s, '-');
    put_unsigned(s, 0ULL - (unsigned long long)v, 10); /* well-defined for LLONG_MIN too */
  } else {
    put_unsigned(s, (unsigned long long)v, 10);
  }
}

size_t kiln_vformat(char* buf, size_t cap, const char* fmt, va_list ap) {
  sink_t s = {buf, cap, 0};
  for (; *fmt; ++fmt) {
    if (*fmt != '%') {
      put_char(&s, *fmt);
      continue;
    }
    ++fmt;
    int longs = 0, is_size = 0;
    while (*fmt == 'l') ++longs, ++fmt;
    if (*fmt == 'z') is_size = 1, ++fmt;
    switch (*fmt) {
      case 'd':
        if (is_size) put_signed(&s, (long long)va_arg(ap, ptrdiff_t));
        else if (longs >= 2) put_signed(&s, va_arg(ap, long long));
        else if (longs == 1) put_signed(&s, va_arg(ap, long));
        else put_signed(&s, va_arg(ap, int));
        break;
      case 'u':
      case 'x': {
        unsigned base = *fmt == 'x' ? 16 : 10;
        if (is_size) put_unsigned(&s, va_arg(ap, size_t), base);
        else if (longs >= 2) put_unsigned(&s, va_arg(ap, unsigned long long), base);
        else if (longs == 1) put_unsigned(&s, va_arg(ap, unsigned long), base);
        else put_unsigned(&s, va_arg(ap, unsigned), base);
        break;
      }
      case 's': put_str(&s, va_arg(ap, const char*)); break;
      case 'c': put_char(&s, (char)va_arg(ap, int)); break;
      case '%': put_char(&s, '%'); break;
      case '\0': --fmt; break; /* a lone '%' at the end */
      default: put_char(&s, '%'); put_char(&s, *fmt); break;
    }
  }
  if (cap) buf[s.len] = '\0';
  return s.len;
}

size_t kiln_format(char* buf, size_t cap, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t n = kiln_vformat(buf, cap, fmt, ap);
  va_end(ap);
  return n;
}

void kiln_format_dtype(char* buf, size_t cap, DLDataType dtype) {
  /* Names of the 8/6/4-bit float codes kDLFloat8_e3m4 (7) .. kDLFloat4_e2m1fn (17). */
  static const char* const small_floats[] = {
      "float8_e3m4",    "float8_e4m3",   "float8_e4m3b11fnuz", "float8_e4m3fn",
      "float8_e4m3fnuz", "float8_e5m2",  "float8_e5m2fnuz",    "float8_e8m0fnu",
      "float6_e2m3fn",  "float6_e3m2fn", "float4_e2m1fn"};
  const char* base = NULL;
  size_t n;
  switch (dtype.code) {
    case kDLInt: base = "int"; break;
    case kDLUInt: base = "uint"; break;
    case kDLFloat: base = "float"; break;
    case kDLBfloat: base = "bfloat"; break;
    case kDLComplex: base = "complex"; break;
    case kDLOpaqueHandle: base = "handle"; break;
    default: break;
  }
  if (base) {
    n = kiln_format(buf, cap, "%s%u", base, (unsigned)dtype.bits);
  } else if (dtype.code == kDLBool && dtype.bits == 8) {
    n = kiln_format(buf, cap, "bool");
  } else if (dtype.code >= kDLFloat8_e3m4 && dtype.code <= kDLFloat4_e2m1fn) {
    n = kiln_format(buf, cap, "%s", small_floats[dtype.code - kDLFloat8_e3m4]);
  } else {
    kiln_format(buf, cap, "dtype(code=%u, bits=%u, lanes=%u)", (unsigned)dtype.code,
                (unsigned)dtype.bits, (unsigned)dtype.lanes);
    return;
  }
  if (dtype.lanes != 1 && n < cap) kiln_format(buf + n, cap - n, "x%u", (unsigned)dtype.lanes);
}

void kiln_format_device(char* buf, size_t cap, DLDevice device) {
  static const char* const names[] = {
      NULL,     "cpu",    "cuda",  "cuda_host", "opencl", NULL,      NULL,
      "vulkan", "metal",  "vpi",   "rocm",      "rocm_host", "ext_dev", "cuda_managed",
      "oneapi", "webgpu", "hexagon", "maia"};
  int type = (int)device.device_type;
  const char* name =
      type >= 0 && type < (int)(sizeof(names) / sizeof(names[0])) ? names[type] : NULL;
  if (!name) kiln_format(buf, cap, "device(type=%d):%d", type, (int)device.device_id);
  else if (type == kDLCPU && device.device_id == 0) kiln_format(buf, cap, "cpu");
  else kiln_format(buf, cap, "%s:%d", name, (int)device.device_id);
}

void kiln_format_shape(char* buf, size_t cap, const int64_t* shape, int32_t ndim,
                       const char* const* sym_names) {
  size_t n = kiln_format(buf, cap, "(");
  for (int32_t d = 0; d < ndim && n < cap; ++d) {
    const char* sep = d ? ", " : "";
    if (shape[d] < 0 && sym_names)
      n += kiln_format(buf + n, cap - n, "%s%s", sep, sym_names[-1 - shape[d]]);
    else
      n += kiln_format(buf + n, cap - n, "%s%lld", sep, (long long)shape[d]);
  }
  if (n < cap) kiln_format(buf + n, cap - n, ndim == 1 ? ",)" : ")");
}

const char* kiln_value_kind_name(int32_t kind) {
  static const char* const names[] = {"null",   "int",      "float", "string", "tensor",
                                      "module", "function", "tuple", "device"};
  return kind >= 0 && kind <= KILN_VALUE_DEVICE ? names[kind] : "unknown kind";
}
