/* String tensors (validation, a builder) and the string kernels of kiln_strings.h. */
#define _POSIX_C_SOURCE 200809L
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_strings.h"
#include "../src/ext_error.h"

#define REC ((uint64_t)sizeof(kiln_str_t))

static const kiln_str_t* recs(const void* block) { return (const kiln_str_t*)block; }
static const char* bytes_of(const void* block, uint64_t i) {
  return (const char*)block + recs(block)[i].offset;
}
static uint64_t len_of(const void* block, uint64_t i) { return recs(block)[i].length; }

/* The length of the UTF-8 sequence at s (n bytes left), 0 when malformed: overlong forms,
 * surrogates and code points past U+10FFFF are refused, as in RFC 3629. */
static unsigned utf8_seq(const unsigned char* s, uint64_t n) {
  unsigned need, i;
  uint32_t cp;
  if (s[0] < 0x80) return 1;
  if (s[0] >= 0xC2 && s[0] <= 0xDF) need = 2, cp = s[0] & 0x1F;
  else if (s[0] >= 0xE0 && s[0] <= 0xEF) need = 3, cp = s[0] & 0x0F;
  else if (s[0] >= 0xF0 && s[0] <= 0xF4) need = 4, cp = s[0] & 0x07;
  else return 0;
  if (n < need) return 0;
  for (i = 1; i < need; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if ((need == 3 && cp < 0x800) || (need == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return need;
}

kiln_status_t kiln_str_validate(const void* block, uint64_t nbytes, uint64_t count) {
  uint64_t i, j;
  if (count == 0) return KILN_OK;
  if (!block) return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "string tensor: NULL block with %llu elements",
                          (unsigned long long)count);
  if ((uintptr_t)block % 8)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "string tensor: block not 8-byte aligned");
  if (count > nbytes / REC)
    return kiln_ext_fail(KILN_ERR_INVALID_FORMAT,
                "string tensor: %llu elements need %llu bytes of records, the block has %llu",
                (unsigned long long)count, (unsigned long long)count * REC, (unsigned long long)nbytes);
  for (i = 0; i < count; i++) {
    uint64_t off = recs(block)[i].offset, len = recs(block)[i].length;
    const unsigned char* s;
    if (off < count * REC || off > nbytes || len > nbytes - off)
      return kiln_ext_fail(KILN_ERR_INVALID_FORMAT,
                  "string tensor: element %llu (offset %llu, length %llu) lies outside the "
                  "string bytes [%llu, %llu) of its block",
                  (unsigned long long)i, (unsigned long long)off, (unsigned long long)len,
                  (unsigned long long)(count * REC), (unsigned long long)nbytes);
    s = (const unsigned char*)block + off;
    for (j = 0; j < len;) {
      unsigned k = utf8_seq(s + j, len - j);
      if (!k)
        return kiln_ext_fail(KILN_ERR_INVALID_FORMAT,
                    "string tensor: element %llu is not UTF-8 (byte %llu of it, 0x%02x)",
                    (unsigned long long)i, (unsigned long long)j, s[j]);
      j += k;
    }
  }
  return KILN_OK;
}

void kiln_str_free(void* block) { free(block); }

/* A block under construction: records of `count` elements, then the bytes appended. */
typedef struct {
  kiln_str_t* rec;
  uint64_t count;
  char* data;
  uint64_t size, cap;
} builder_t;

static kiln_status_t builder_init(builder_t* b, uint64_t count) {
  memset(b, 0, sizeof *b);
  b->count = count;
  if (count > (UINT64_MAX / 2) / REC) return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "string tensor: too many elements");
  b->rec = calloc(count ? count : 1, sizeof(kiln_str_t));
  if (!b->rec) return kiln_ext_fail(KILN_ERR_OUT_OF_MEMORY, "string tensor: out of memory");
  return KILN_OK;
}

/* Element i: the bytes s[0..n) then t[0..m) (t may be NULL). */
static kiln_status_t builder_set(builder_t* b, uint64_t i, const char* s, uint64_t n, const char* t,
                                 uint64_t m) {
  if (b->size + n + m > b->cap) {
    uint64_t cap = b->cap ? b->cap : 64;
    char* p;
    while (cap < b->size + n + m) cap *= 2;
    p = realloc(b->data, cap);
    if (!p) return kiln_ext_fail(KILN_ERR_OUT_OF_MEMORY, "string tensor: out of memory");
    b->data = p, b->cap = cap;
  }
  b->rec[i].offset = b->size;
  b->rec[i].length = n + m;
  if (n) memcpy(b->data + b->size, s, n);
  if (m) memcpy(b->data + b->size + n, t, m);
  b->size += n + m;
  return KILN_OK;
}

static void builder_drop(builder_t* b) {
  free(b->rec);
  free(b->data);
}

/* The block: records (offsets moved past them) then the bytes; the builder is consumed. */
static kiln_status_t builder_finish(builder_t* b, void** out_block, uint64_t* out_nbytes) {
  uint64_t head = b->count * REC, i;
  char* block = malloc(head + b->size ? head + b->size : 1);
  if (!block) {
    builder_drop(b);
    return kiln_ext_fail(KILN_ERR_OUT_OF_MEMORY, "string tensor: out of memory");
  }
  for (i = 0; i < b->count; i++) b->rec[i].offset += head;
  if (head) memcpy(block, b->rec, head);
  if (b->size) memcpy(block + head, b->data, b->size);
  *out_block = block;
  *out_nbytes = head + b->size;
  builder_drop(b);
  return KILN_OK;
}

/* Calls f(i, ia, ib) for every element i of the broadcast shape, ia/ib its elements of a, b. */
static int64_t numel(int32_t ndim, const int64_t* shape) {
  int64_t n = 1;
  int32_t d;
  for (d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

static void broadcast_index(int64_t i, int32_t ndim, const int64_t* shape, const int64_t* as,
                            const int64_t* bs, uint64_t* ia, uint64_t* ib) {
  int64_t oa = 0, ob = 0;
  int32_t d;
  for (d = ndim - 1; d >= 0; d--) {
    int64_t k = i % shape[d];
    i /= shape[d];
    oa += k * as[d];
    ob += k * bs[d];
  }
  *ia = (uint64_t)oa, *ib = (uint64_t)ob;
}

static kiln_status_t check_shape(const char* what, int32_t ndim, const int64_t* shape) {
  int32_t d;
  if (ndim < 0 || (ndim > 0 && !shape)) return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "%s: bad shape", what);
  for (d = 0; d < ndim; d++)
    if (shape[d] < 0) return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "%s: negative extent %lld", what,
                                  (long long)shape[d]);
  return KILN_OK;
}

kiln_status_t kiln_str_equal(const void* a, const int64_t* as, const void* b, const int64_t* bs,
                             int32_t ndim, const int64_t* shape, uint8_t* out) {
  int64_t i, n;
  kiln_status_t st = check_shape("kiln_str_equal", ndim, shape);
  if (st) return st;
  for (i = 0, n = numel(ndim, shape); i < n; i++) {
    uint64_t ia, ib;
    broadcast_index(i, ndim, shape, as, bs, &ia, &ib);
    out[i] = len_of(a, ia) == len_of(b, ib) &&
             memcmp(bytes_of(a, ia), bytes_of(b, ib), len_of(a, ia)) == 0;
  }
  return KILN_OK;
}

kiln_status_t kiln_str_concat(const void* a, const int64_t* as, const void* b, const int64_t* bs,
                              int32_t ndim, const int64_t* shape, void** out_block,
                              uint64_t* out_nbytes) {
  builder_t bl;
  int64_t i, n;
  kiln_status_t st = check_shape("kiln_str_concat", ndim, shape);
  if (st || (st = builder_init(&bl, (uint64_t)(n = numel(ndim, shape))))) return st;
  for (i = 0; i < n; i++) {
    uint64_t ia, ib;
    broadcast_index(i, ndim, shape, as, bs, &ia, &ib);
    st = builder_set(&bl, (uint64_t)i, bytes_of(a, ia), len_of(a, ia), bytes_of(b, ib), len_of(b, ib));
    if (st) {
      builder_drop(&bl);
      return st;
    }
  }
  return builder_finish(&bl, out_block, out_nbytes);
}

/* ---- RE2 -> POSIX ERE ---- */

typedef struct {
  char* out;
  size_t n, cap;
} sbuf_t;

static int put(sbuf_t* s, const char* t) {
  size_t k = strlen(t);
  if (s->n + k + 1 > s->cap) return 0;
  memcpy(s->out + s->n, t, k + 1);
  s->n += k;
  return 1;
}

/* The class a \x escape names, as bracket contents (NULL: not a class). */
static const char* escape_class(char c) {
  switch (c) {
    case 'd': return "[:digit:]";
    case 'w': return "[:alnum:]_";
    case 's': return "[:space:]";
    default: return NULL;
  }
}

static kiln_status_t refuse(const char* re2, size_t at, const char* what) {
  return kiln_ext_fail(KILN_ERR_UNSUPPORTED,
              "RegexFullMatch: pattern '%s' uses %s at byte %zu, which POSIX extended regular "
              "expressions (regex.h) cannot express", re2, what, at);
}

/* A bracket expression starting at re2[*i] == '['; advances *i past its ']'. RE2 escapes inside
 * brackets become POSIX forms: classes in place, and the characters POSIX brackets treat
 * specially (']' first, '-' last, '^' not first, '\' literal) placed where they are literal. */
static kiln_status_t translate_bracket(const char* re2, size_t* i, sbuf_t* s) {
  char mid[512];
  size_t m = 0, j = *i + 1;
  int negate = 0, close = 0, dash = 0, caret = 0;
  if (re2[j] == '^') negate = 1, j++;
  if (re2[j] == ']') close = 1, j++;
  mid[0] = 0;
  for (; re2[j] && re2[j] != ']'; j++) {
    char lit[2] = {0, 0};
    const char* add = lit;
    if (re2[j] == '[' && re2[j + 1] == ':') { /* [:alpha:] as RE2 has it */
      const char* end = strstr(re2 + j, ":]");
      if (!end) return refuse(re2, j, "an unterminated [: class");
      if ((size_t)(end + 2 - (re2 + j)) + m >= sizeof mid) return refuse(re2, j, "a too long bracket");
      memcpy(mid + m, re2 + j, (size_t)(end + 2 - (re2 + j)));
      m += (size_t)(end + 2 - (re2 + j));
      mid[m] = 0;
      j = (size_t)(end + 1 - re2);
      continue;
    }
    if (re2[j] == '\\') {
      char c = re2[++j];
      if (!c) return refuse(re2, j, "a trailing backslash");
      if (escape_class(c)) add = escape_class(c);
      else if (c == 'D' || c == 'W' || c == 'S') return refuse(re2, j - 1, "a negated class escape inside brackets");
      else if (c == 'n') lit[0] = '\n';
      else if (c == 't') lit[0] = '\t';
      else if (c == '-') { dash = 1; continue; }
      else if (c == ']') { close = 1; continue; }
      else if (c == '^') { caret = 1; continue; }
      else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return refuse(re2, j - 1, "an escape inside brackets");
      else lit[0] = c;
    } else if (re2[j] == '-' && (re2[j + 1] == ']' || m == 0)) {
      dash = 1;
      continue;
    } else if (re2[j] == '^') {
      caret = 1;
      continue;
    } else {
      lit[0] = re2[j];
    }
    if (m + strlen(add) >= sizeof mid) return refuse(re2, j, "a too long bracket");
    memcpy(mid + m, add, strlen(add) + 1);
    m += strlen(add);
  }
  if (!re2[j]) return refuse(re2, *i, "an unterminated bracket");
  if (!put(s, "[") || (negate && !put(s, "^")) || (close && !put(s, "]")) || !put(s, mid) ||
      (caret && !put(s, "^")) || (dash && !put(s, "-")) || !put(s, "]"))
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "RegexFullMatch: pattern too long");
  if (m == 0 && !close && !dash && !caret) return refuse(re2, *i, "an empty bracket");
  *i = j;
  return KILN_OK;
}

kiln_status_t kiln_str_regex_translate(const char* re2, char* out, size_t out_cap) {
  sbuf_t s = {out, 0, out_cap};
  size_t i;
  if (!re2 || !out || out_cap == 0) return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "RegexFullMatch: NULL pattern");
  out[0] = 0;
  if (!put(&s, "^(")) return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "RegexFullMatch: pattern too long");
  for (i = 0; re2[i]; i++) {
    char c = re2[i], lit[3] = {0, 0, 0};
    char cls[16];
    const char* add = lit;
    kiln_status_t st;
    if (c == '[') {
      if ((st = translate_bracket(re2, &i, &s))) return st;
      continue;
    }
    if (c == '(' && re2[i + 1] == '?') return refuse(re2, i, "a (?...) group or flag");
    if ((c == '*' || c == '+' || c == '?' || c == '}') && re2[i + 1] == '?')
      return refuse(re2, i, "a lazy quantifier");
    if (c == '\\') {
      char e = re2[++i];
      if (!e) return refuse(re2, i - 1, "a trailing backslash");
      if (escape_class(e)) {
        snprintf(cls, sizeof cls, "[%s]", escape_class(e));
        add = cls;
      } else if (e == 'D' || e == 'W' || e == 'S') {
        snprintf(cls, sizeof cls, "[^%s]", escape_class((char)(e - 'A' + 'a')));
        add = cls;
      } else if (e == 'b' || e == 'B') {
#ifdef __GLIBC__
        lit[0] = '\\', lit[1] = e; /* glibc's ERE has \b and \B (GNU extensions) */
#else
        return refuse(re2, i - 1, "a word boundary (\\b, \\B)");
#endif
      } else if (e == 'n') lit[0] = '\n';
      else if (e == 't') lit[0] = '\t';
      else if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
        return refuse(re2, i - 1, e == 'p' || e == 'P' ? "a Unicode class (\\p)"
                                  : e >= '0' && e <= '9' ? "a back-reference or octal escape"
                                                         : "an escape (\\A, \\z, \\Q, ...)");
      else
        lit[0] = '\\', lit[1] = e; /* an escaped metacharacter stays escaped */
    } else {
      lit[0] = c;
    }
    if (!put(&s, add)) return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "RegexFullMatch: pattern too long");
  }
  if (!put(&s, ")$")) return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "RegexFullMatch: pattern too long");
  return KILN_OK;
}

kiln_status_t kiln_str_regex_full_match(const void* x, uint64_t count, const char* re2, uint8_t* out) {
  char ere[4096], *tmp = NULL;
  regex_t rx;
  uint64_t i, cap = 0;
  int rc;
  kiln_status_t st = kiln_str_regex_translate(re2, ere, sizeof ere);
  if (st) return st;
  if ((rc = regcomp(&rx, ere, REG_EXTENDED | REG_NOSUB))) {
    char why[256];
    regerror(rc, &rx, why, sizeof why);
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "RegexFullMatch: pattern '%s' (as POSIX '%s'): %s", re2,
                ere, why);
  }
  for (i = 0; i < count; i++) { /* regexec wants NUL-terminated text */
    uint64_t n = len_of(x, i);
    if (n + 1 > cap) {
      char* p = realloc(tmp, n + 1);
      if (!p) {
        free(tmp);
        regfree(&rx);
        return kiln_ext_fail(KILN_ERR_OUT_OF_MEMORY, "RegexFullMatch: out of memory");
      }
      tmp = p, cap = n + 1;
    }
    memcpy(tmp, bytes_of(x, i), n);
    tmp[n] = 0;
    /* an element with a NUL byte cannot match in full: regexec stops at the NUL */
    out[i] = memchr(tmp, 0, n) == NULL && regexec(&rx, tmp, 0, NULL, 0) == 0;
  }
  free(tmp);
  regfree(&rx);
  return KILN_OK;
}

/* ---- StringNormalizer ---- */

static char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }
static char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c; }

static int same(const char* s, uint64_t n, const char* t, uint64_t m, int case_sensitive) {
  uint64_t k;
  if (n != m) return 0;
  if (case_sensitive) return memcmp(s, t, n) == 0;
  for (k = 0; k < n; k++)
    if (ascii_lower(s[k]) != ascii_lower(t[k])) return 0;
  return 1;
}

kiln_status_t kiln_str_normalize(const void* x, uint64_t count, int32_t case_action,
                                 int32_t case_sensitive, const void* stop, uint64_t num_stop,
                                 void** out_block, uint64_t* out_nbytes, uint64_t* out_count) {
  builder_t b;
  uint64_t i, k, kept = 0;
  kiln_status_t st;
  if (case_action < 0 || case_action > 2)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "StringNormalizer: case_change_action %d (0 NONE, 1 LOWER, 2 UPPER)",
                (int)case_action);
  if ((st = builder_init(&b, count ? count : 1))) return st;
  for (i = 0; i < count; i++) {
    const char* s = bytes_of(x, i);
    uint64_t n = len_of(x, i);
    int drop = 0;
    for (k = 0; k < num_stop && !drop; k++)
      drop = same(s, n, bytes_of(stop, k), len_of(stop, k), case_sensitive);
    if (drop) continue;
    if ((st = builder_set(&b, kept, s, n, NULL, 0))) {
      builder_drop(&b);
      return st;
    }
    if (case_action)
      for (k = 0; k < n; k++) {
        char* p = b.data + b.rec[kept].offset + k;
        *p = case_action == 1 ? ascii_lower(*p) : ascii_upper(*p);
      }
    kept++;
  }
  /* ONNX: when every element is removed the output is one empty string */
  b.count = kept ? kept : 1;
  if (!kept) b.rec[0].offset = 0, b.rec[0].length = 0;
  *out_count = b.count;
  return builder_finish(&b, out_block, out_nbytes);
}

/* ---- StringSplit ---- */

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* The tokens of s[0..n): calls emit(ctx, token, length) for each, returns their number. */
typedef kiln_status_t (*emit_fn)(void* ctx, const char* t, uint64_t n);

static kiln_status_t split_one(const char* s, uint64_t n, const char* delim, int64_t maxsplit,
                               emit_fn emit, void* ctx, int64_t* tokens) {
  uint64_t dl = delim ? strlen(delim) : 0, p = 0;
  int64_t splits = 0;
  kiln_status_t st;
  *tokens = 0;
  if (!dl) { /* runs of whitespace; none at the ends */
    while (p < n) {
      uint64_t q;
      while (p < n && is_space(s[p])) p++;
      if (p >= n) break;
      q = p;
      if (maxsplit >= 0 && splits >= maxsplit) {
        q = n;
        while (q > p && is_space(s[q - 1])) q--;
      } else {
        while (q < n && !is_space(s[q])) q++;
      }
      if ((st = emit(ctx, s + p, q - p))) return st;
      ++*tokens, ++splits, p = q;
      if (maxsplit >= 0 && splits > maxsplit) break;
    }
    return KILN_OK;
  }
  for (;;) {
    uint64_t q = p;
    int found = 0;
    if (maxsplit < 0 || splits < maxsplit)
      for (; q + dl <= n; q++)
        if (memcmp(s + q, delim, dl) == 0) {
          found = 1;
          break;
        }
    if (!found) q = n;
    if ((st = emit(ctx, s + p, q - p))) return st;
    ++*tokens;
    if (!found) return KILN_OK;
    splits++, p = q + dl;
  }
}

static kiln_status_t count_only(void* ctx, const char* t, uint64_t n) {
  (void)ctx, (void)t, (void)n;
  return KILN_OK;
}

typedef struct {
  builder_t* b;
  uint64_t next;
} fill_t;

static kiln_status_t fill(void* ctx, const char* t, uint64_t n) {
  fill_t* f = ctx;
  return builder_set(f->b, f->next++, t, n, NULL, 0);
}

kiln_status_t kiln_str_split(const void* x, uint64_t count, const char* delim, int64_t maxsplit,
                             void** out_block, uint64_t* out_nbytes, uint64_t* out_width,
                             int64_t* num_splits) {
  uint64_t i, width = 0;
  builder_t b;
  kiln_status_t st;
  for (i = 0; i < count; i++) { /* the width first: the most tokens of one element */
    split_one(bytes_of(x, i), len_of(x, i), delim, maxsplit, count_only, NULL, &num_splits[i]);
    if ((uint64_t)num_splits[i] > width) width = (uint64_t)num_splits[i];
  }
  if (width && count > UINT64_MAX / REC / width)
    return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "StringSplit: %llu x %llu tokens overflow",
                (unsigned long long)count, (unsigned long long)width);
  if ((st = builder_init(&b, count * width))) return st; /* calloc: the padding is "" */
  for (i = 0; i < count; i++) {
    fill_t f = {&b, i * width};
    int64_t t;
    if ((st = split_one(bytes_of(x, i), len_of(x, i), delim, maxsplit, fill, &f, &t))) {
      builder_drop(&b);
      return st;
    }
  }
  *out_width = width;
  return builder_finish(&b, out_block, out_nbytes);
}

/* ---- LabelEncoder ---- */

kiln_status_t kiln_str_index(const void* x, uint64_t count, const void* keys, uint64_t num_keys,
                             int64_t* out) {
  uint64_t i, k;
  /* a linear scan per element: LabelEncoder key sets are small; a sorted index is future work */
  for (i = 0; i < count; i++) {
    out[i] = -1;
    for (k = 0; k < num_keys; k++)
      if (same(bytes_of(x, i), len_of(x, i), bytes_of(keys, k), len_of(keys, k), 1)) {
        out[i] = (int64_t)k;
        break;
      }
  }
  return KILN_OK;
}

kiln_status_t kiln_str_take(const void* src, uint64_t num_src, const int64_t* index, uint64_t count,
                            const char* dflt, uint64_t dflt_len, void** out_block, uint64_t* out_nbytes) {
  builder_t b;
  uint64_t i;
  kiln_status_t st;
  for (i = 0; i < count; i++)
    if (index[i] >= (int64_t)num_src)
      return kiln_ext_fail(KILN_ERR_INVALID_ARGUMENT, "kiln_str_take: index %lld of element %llu >= %llu strings",
                  (long long)index[i], (unsigned long long)i, (unsigned long long)num_src);
  if ((st = builder_init(&b, count))) return st;
  for (i = 0; i < count; i++) {
    st = index[i] < 0 ? builder_set(&b, i, dflt, dflt_len, NULL, 0)
                      : builder_set(&b, i, bytes_of(src, (uint64_t)index[i]),
                                    len_of(src, (uint64_t)index[i]), NULL, 0);
    if (st) {
      builder_drop(&b);
      return st;
    }
  }
  return builder_finish(&b, out_block, out_nbytes);
}
