/* vm_loader.c — reads an executable blob (docs/executable-format.md) into a kiln_vm_program_t.
 *
 * Nothing in the blob is trusted: every read goes through a cursor bounded by its section, every
 * count is checked against the bytes left before anything is allocated for it, every index
 * against its table, every instruction's operands against the function they belong to. Errors
 * say what and where: "executable: section 4 (CONSTANTS) entry 3: data_offset 0x1240 + nbytes
 * 400 exceeds blob size 4096". Reads are byte-wise little-endian, so neither the host's byte
 * order nor the blob's alignment matters for parsing. */
#include <stdlib.h>
#include <string.h>

#include "vm.h"

#define FORMAT_VERSION 4u /* 2 added IF and function flags; 3 derived dims and bounds; 4 CALL_PACKED
                            * and string parameters */
#define HEADER_SIZE 64u
#define SECTION_ENTRY_SIZE 24u
#define OPTIONAL_SECTION_BASE 0x100u
#define NUM_SECTIONS 6u
#define NO_ENTRY UINT32_MAX
#define BAD KILN_ERR_INVALID_FORMAT

enum { STRINGS = 1, KERNELS, EXTERNS, CONSTANTS, FUNCTIONS, BYTECODE };

static const char* section_name(uint32_t kind) {
  static const char* const names[] = {"?",         "STRINGS",   "KERNELS", "EXTERNS",
                                      "CONSTANTS", "FUNCTIONS", "BYTECODE"};
  if (kind >= 1 && kind <= NUM_SECTIONS) return names[kind];
  return kind >= OPTIONAL_SECTION_BASE ? "optional" : "unknown";
}

const char* kiln_vm_opcode_name(uint32_t op) {
  static const char* const names[] = {"opcode?",  "LOAD_CONST", "ALLOC_ARENA",
                                      "ALLOC_OUTPUT", "CALL_KERNEL", "CALL_EXTERN",
                                      "MAKE_TUPLE", "GET_ITEM",   "MOVE",      "RET",
                                      "IF",         "FREE",        "CALL_PACKED"};
  return op < KILN_NUM_OPCODES ? names[op] : "opcode?";
}

static uint64_t load_le(const uint8_t* p, unsigned n) {
  uint64_t v = 0;
  while (n--) v = v << 8 | p[n];
  return v;
}

int kiln_vm_shape_nbytes(const int64_t* shape, int64_t ndim, uint64_t elem_bits,
                         uint64_t* out_nbytes) {
  /* The product of the non-zero extents must fit even when an extent is zero: an empty
     tensor's strides are products of its other extents (tensor.c, init_header), and a shape
     of (0, 2^40, 2^40) would overflow them. */
  uint64_t n = elem_bits ? elem_bits : 1;
  int empty = elem_bits == 0;
  for (int64_t d = 0; d < ndim; ++d) {
    if (shape[d] == 0) {
      empty = 1;
      continue;
    }
    if ((uint64_t)shape[d] > (uint64_t)SIZE_MAX / n) return 0;
    n *= (uint64_t)shape[d];
  }
  *out_nbytes = empty ? 0 : (n + 7) / 8; /* sub-byte elements are packed */
  return 1;
}

static uint64_t elem_bytes(uint8_t bits, uint16_t lanes) {
  return ((uint64_t)bits * lanes + 7) / 8;
}

/* ---- cursors and messages -------------------------------------------------------------------- */

typedef struct {
  const uint8_t* blob;
  uint64_t pos, end;  /* absolute offsets, pos <= end <= blob size */
  uint32_t kind;      /* the section, for messages */
  uint32_t entry;     /* the entry being read, or NO_ENTRY */
} cursor_t;

static kiln_status_t fail(const cursor_t* c, kiln_status_t st, const char* fmt, ...)
    KILN_PRINTF_FORMAT(3, 4);

static kiln_status_t fail(const cursor_t* c, kiln_status_t st, const char* fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  kiln_vformat(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->entry == NO_ENTRY)
    return kiln_error(st, "executable: section %u (%s): %s", (unsigned)c->kind,
                      section_name(c->kind), msg);
  return kiln_error(st, "executable: section %u (%s) entry %u: %s", (unsigned)c->kind,
                    section_name(c->kind), (unsigned)c->entry, msg);
}

static kiln_status_t read_uint(cursor_t* c, unsigned bytes, const char* field, uint64_t* out) {
  *out = 0; /* also on failure: keeps the compiler's uninitialised-use analysis simple */
  if (c->end - c->pos < bytes)
    return fail(c, BAD, "%s (%u bytes at offset 0x%llx) runs past the end of the section at 0x%llx",
                field, bytes, (unsigned long long)c->pos, (unsigned long long)c->end);
  *out = load_le(c->blob + c->pos, bytes);
  c->pos += bytes;
  return KILN_OK;
}

#define TRY(call)                          \
  do {                                     \
    kiln_status_t st_ = (call);            \
    if (st_ != KILN_OK) return st_;        \
  } while (0)
#define READ(c, bytes, field, out) TRY(read_uint((c), (bytes), (field), &(out)))

/* Reads a u32 count of entries that take at least `min_entry` bytes each, refusing counts the
 * section cannot hold (so nothing is allocated for a count the bytes do not back). */
static kiln_status_t read_count(cursor_t* c, uint64_t min_entry, uint32_t* out) {
  uint64_t count;
  READ(c, 4, "count", count);
  *out = 0;
  if (count > (c->end - c->pos) / min_entry)
    return fail(c, BAD, "count %llu needs at least %llu bytes, but the section has %llu left",
                (unsigned long long)count, (unsigned long long)(count * min_entry),
                (unsigned long long)(c->end - c->pos));
  *out = (uint32_t)count;
  return KILN_OK;
}

static kiln_status_t read_string(cursor_t* c, const kiln_vm_program_t* p, const char* field,
                                 const char** out) {
  uint64_t index;
  READ(c, 4, field, index);
  if (index >= p->num_strings)
    return fail(c, BAD, "%s: string index %llu out of range (%u strings)", field,
                (unsigned long long)index, (unsigned)p->num_strings);
  *out = p->strings[index];
  return KILN_OK;
}

/* allow_vector 2: a graph function's parameter, which may also be a string tensor
 * (kiln_dtype_supported). */
static kiln_status_t read_dtype(cursor_t* c, int allow_vector, DLDataType* out) {
  uint64_t code, bits, lanes;
  READ(c, 1, "dtype_code", code);
  READ(c, 1, "dtype_bits", bits);
  READ(c, 2, "dtype_lanes", lanes);
  DLDataType dt = {(uint8_t)code, (uint8_t)bits, (uint16_t)lanes};
  if (!kiln_dtype_supported(dt.code, dt.bits, dt.lanes, allow_vector)) {
    char name[KILN_SMALL_STRING];
    kiln_format_dtype(name, sizeof name, dt);
    return fail(c, BAD, "unsupported dtype %s", name);
  }
  *out = dt;
  return KILN_OK;
}

/* Index of the first byte that is not valid UTF-8 (or is NUL), or -1. */
static int64_t utf8_error(const uint8_t* s, uint64_t n) {
  uint64_t i = 0;
  while (i < n) {
    uint8_t b = s[i];
    if (b == 0) return (int64_t)i;
    if (b < 0x80) {
      ++i;
      continue;
    }
    unsigned need;
    uint32_t cp, min;
    if ((b & 0xE0) == 0xC0) need = 1, cp = b & 0x1Fu, min = 0x80;
    else if ((b & 0xF0) == 0xE0) need = 2, cp = b & 0x0Fu, min = 0x800;
    else if ((b & 0xF8) == 0xF0) need = 3, cp = b & 0x07u, min = 0x10000;
    else return (int64_t)i;
    if (n - i <= need) return (int64_t)i;
    for (unsigned k = 1; k <= need; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return (int64_t)i;
      cp = cp << 6 | (s[i + k] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return (int64_t)i;
    i += need + 1;
  }
  return -1;
}

/* ---- header and section table ---------------------------------------------------------------- */

typedef struct {
  uint64_t offset[NUM_SECTIONS + 1], size[NUM_SECTIONS + 1]; /* by kind */
  uint32_t target;
  uint32_t version;
} layout_t;

typedef struct {
  uint64_t lo, hi;
  int64_t entry; /* section table entry, or -1 for the header, -2 for the table itself */
} range_t;

static int compare_ranges(const void* a, const void* b) {
  const range_t* x = a;
  const range_t* y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : 0;
}

static void describe_range(char* buf, size_t cap, const range_t* r, const uint8_t* table) {
  if (r->entry == -1) {
    kiln_format(buf, cap, "the header");
  } else if (r->entry == -2) {
    kiln_format(buf, cap, "the section table");
  } else {
    uint32_t kind = (uint32_t)load_le(table + r->entry * SECTION_ENTRY_SIZE, 4);
    kiln_format(buf, cap, "entry %u (section %u %s)", (unsigned)r->entry, (unsigned)kind,
                section_name(kind));
  }
}

static kiln_status_t check_sections(const uint8_t* blob, uint64_t size, uint32_t num_sections,
                                    uint64_t table_offset, layout_t* out) {
  if (table_offset < HEADER_SIZE || table_offset > size ||
      num_sections > (size - table_offset) / SECTION_ENTRY_SIZE)
    return kiln_error(BAD, "executable: section table (%u entries of %u bytes at offset 0x%llx) "
                      "does not fit between the header and the end of the blob (%llu bytes)",
                      (unsigned)num_sections, SECTION_ENTRY_SIZE, (unsigned long long)table_offset,
                      (unsigned long long)size);
  const uint8_t* table = blob + table_offset;
  int64_t seen[NUM_SECTIONS + 1];
  for (unsigned k = 0; k <= NUM_SECTIONS; ++k) seen[k] = -1;
  range_t* ranges = kiln_mem_alloc(((size_t)num_sections + 2) * sizeof *ranges);
  if (!ranges) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory checking the section table");
  uint32_t n = 0;
  kiln_status_t st = KILN_OK;
  ranges[n++] = (range_t){0, HEADER_SIZE, -1};
  ranges[n++] = (range_t){table_offset, table_offset + (uint64_t)num_sections * SECTION_ENTRY_SIZE, -2};
  for (uint32_t i = 0; i < num_sections && st == KILN_OK; ++i) {
    const uint8_t* e = table + (uint64_t)i * SECTION_ENTRY_SIZE;
    uint32_t kind = (uint32_t)load_le(e, 4), flags = (uint32_t)load_le(e + 4, 4);
    uint64_t offset = load_le(e + 8, 8), sz = load_le(e + 16, 8);
    if (flags != 0) {
      st = kiln_error(BAD, "executable: section table entry %u (section %u %s): flags 0x%x must be 0",
                      (unsigned)i, (unsigned)kind, section_name(kind), (unsigned)flags);
    } else if (offset > size || sz > size - offset) {
      st = kiln_error(BAD, "executable: section table entry %u (section %u %s): offset 0x%llx + size "
                      "%llu exceeds blob size %llu", (unsigned)i, (unsigned)kind, section_name(kind),
                      (unsigned long long)offset, (unsigned long long)sz, (unsigned long long)size);
    } else if (kind >= 1 && kind <= NUM_SECTIONS && seen[kind] >= 0) {
      st = kiln_error(BAD, "executable: section table entry %u: section %u (%s) appears twice "
                      "(also entry %u)", (unsigned)i, (unsigned)kind, section_name(kind),
                      (unsigned)seen[kind]);
    } else if ((kind < 1 || kind > NUM_SECTIONS) && kind < OPTIONAL_SECTION_BASE) {
      st = kiln_error(BAD, "executable: section table entry %u: unknown section kind %u (kinds "
                      "below 0x100 are required to be known)", (unsigned)i, (unsigned)kind);
    } else {
      if (kind <= NUM_SECTIONS) {
        seen[kind] = i;
        out->offset[kind] = offset;
        out->size[kind] = sz;
      }
      if (sz) ranges[n++] = (range_t){offset, offset + sz, i};
    }
  }
  for (unsigned k = 1; k <= NUM_SECTIONS && st == KILN_OK; ++k)
    if (seen[k] < 0)
      st = kiln_error(BAD, "executable: missing section %u (%s)", k, section_name(k));
  if (st == KILN_OK) {
    qsort(ranges, n, sizeof *ranges, compare_ranges);
    for (uint32_t i = 1; i < n && st == KILN_OK; ++i) {
      if (ranges[i].lo >= ranges[i - 1].hi) continue;
      char a[96], b[96];
      describe_range(a, sizeof a, &ranges[i - 1], table);
      describe_range(b, sizeof b, &ranges[i], table);
      st = kiln_error(BAD, "executable: %s [0x%llx, 0x%llx) overlaps %s [0x%llx, 0x%llx)", b,
                      (unsigned long long)ranges[i].lo, (unsigned long long)ranges[i].hi, a,
                      (unsigned long long)ranges[i - 1].lo, (unsigned long long)ranges[i - 1].hi);
    }
  }
  kiln_mem_free(ranges);
  return st;
}

/* The WRITER section's text ("kiln 0.1.0", optional kind 0x100: u32 length + bytes) of a blob
 * this runtime cannot otherwise read, copied into out (printable ASCII only), or "a newer Kiln". */
static const char* writer_of(const uint8_t* blob, uint64_t size, char* out, size_t cap) {
  if (size >= HEADER_SIZE) {
    uint64_t table = load_le(blob + 32, 8), n = load_le(blob + 24, 4);
    for (uint64_t i = 0; i < n && i < 64 && table <= size && i < (size - table) / SECTION_ENTRY_SIZE; ++i) {
      const uint8_t* e = blob + table + i * SECTION_ENTRY_SIZE;
      uint64_t off = load_le(e + 8, 8), len;
      if (load_le(e, 4) != OPTIONAL_SECTION_BASE || off > size || size - off < 4) continue;
      len = load_le(blob + off, 4);
      if (len >= cap || len > size - off - 4) continue;
      for (uint64_t k = 0; k < len; ++k)
        out[k] = (blob[off + 4 + k] >= 0x20 && blob[off + 4 + k] < 0x7f) ? (char)blob[off + 4 + k] : '?';
      out[len] = 0;
      return out;
    }
  }
  return "a newer Kiln";
}

static kiln_status_t check_header(const uint8_t* blob, uint64_t size, layout_t* out) {
  static const uint8_t kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'X', 'E', 0};
  if ((uintptr_t)blob % KILN_ALIGNMENT)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "executable: the blob at address 0x%llx is not "
                      "%d-byte aligned", (unsigned long long)(uintptr_t)blob, KILN_ALIGNMENT);
  if (size < 12 || memcmp(blob, kMagic, 8) != 0)
    return kiln_error(BAD, "executable: %s (not a Kiln executable)",
                      size < 12 ? "blob too small for a header" : "bad magic at offset 0");
  uint32_t version = (uint32_t)load_le(blob + 8, 4);
  char who[72];
  if (version > FORMAT_VERSION)
    return kiln_error(KILN_ERR_VERSION_MISMATCH, "executable format version %u is newer than this "
                      "runtime supports (%u): written by %s, this is kiln %s", (unsigned)version,
                      FORMAT_VERSION, writer_of(blob, size, who, sizeof who), KILN_VERSION);
  if (version == 0)
    return kiln_error(BAD, "executable: format_version 0 at offset 0x8 is invalid");
  if (size < HEADER_SIZE)
    return kiln_error(BAD, "executable: blob of %llu bytes is shorter than its %u-byte header",
                      (unsigned long long)size, HEADER_SIZE);
  uint32_t header_size = (uint32_t)load_le(blob + 12, 4);
  if (header_size != HEADER_SIZE)
    return kiln_error(BAD, "executable: header_size %u at offset 0xc (expected %u)",
                      (unsigned)header_size, HEADER_SIZE);
  uint64_t blob_size = load_le(blob + 16, 8);
  if (blob_size != size)
    return kiln_error(BAD, "executable: header blob_size %llu at offset 0x10 does not match the "
                      "%llu bytes given (truncated?)", (unsigned long long)blob_size,
                      (unsigned long long)size);
  for (unsigned i = 40; i < HEADER_SIZE; ++i)
    if (blob[i])
      return kiln_error(BAD, "executable: reserved header byte %u is 0x%x (must be 0)", i,
                        (unsigned)blob[i]);
  out->target = (uint32_t)load_le(blob + 28, 4);
  out->version = version;
  return check_sections(blob, size, (uint32_t)load_le(blob + 24, 4), load_le(blob + 32, 8), out);
}

static cursor_t section(const uint8_t* blob, const layout_t* l, uint32_t kind) {
  cursor_t c = {blob, l->offset[kind], l->offset[kind] + l->size[kind], kind, NO_ENTRY};
  return c;
}

/* ---- tables ------------------------------------------------------------------------------------ */

static kiln_status_t load_strings(kiln_vm_program_t* p, const uint8_t* blob, const layout_t* l) {
  cursor_t c = section(blob, l, STRINGS);
  uint32_t count;
  TRY(read_count(&c, 4, &count));
  /* Each string's bytes plus a NUL: no more than the section size plus one byte per string. */
  uint64_t chars = l->size[STRINGS] + count;
  if (chars > SIZE_MAX / 2)
    return fail(&c, KILN_ERR_OUT_OF_MEMORY, "%llu bytes of strings do not fit in memory",
                (unsigned long long)chars);
  p->strings = kiln_mem_alloc((size_t)count * sizeof *p->strings);
  p->strings_block = kiln_mem_alloc((size_t)chars);
  if (!p->strings || !p->strings_block)
    return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading %u strings", (unsigned)count);
  char* next = p->strings_block;
  for (uint32_t i = 0; i < count; ++i) {
    c.entry = i;
    uint64_t len;
    READ(&c, 4, "length", len);
    if (len > c.end - c.pos)
      return fail(&c, BAD, "string of %llu bytes at offset 0x%llx runs past the end of the section "
                  "at 0x%llx", (unsigned long long)len, (unsigned long long)c.pos,
                  (unsigned long long)c.end);
    int64_t bad = utf8_error(blob + c.pos, len);
    if (bad >= 0)
      return fail(&c, BAD, "byte %lld of the string (offset 0x%llx) %s", (long long)bad,
                  (unsigned long long)(c.pos + (uint64_t)bad),
                  blob[c.pos + (uint64_t)bad] ? "is not valid UTF-8" : "is NUL");
    memcpy(next, blob + c.pos, (size_t)len);
    next[len] = '\0';
    p->strings[i] = next;
    next += len + 1;
    c.pos += len;
    p->num_strings = i + 1;
  }
  if (l->target >= p->num_strings)
    return kiln_error(BAD, "executable: header target (offset 0x1c): string index %u out of range "
                      "(%u strings)", (unsigned)l->target, (unsigned)p->num_strings);
  p->target = p->strings[l->target];
  return KILN_OK;
}

static kiln_status_t load_kernels(kiln_vm_program_t* p, const uint8_t* blob, const layout_t* l,
                                  const kiln_library_info_t* info, const char* library_name) {
  cursor_t c = section(blob, l, KERNELS);
  uint32_t count;
  TRY(read_count(&c, 4, &count));
  p->kernels = kiln_mem_alloc((size_t)count * sizeof *p->kernels);
  if (!p->kernels) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading %u kernels", (unsigned)count);
  for (uint32_t i = 0; i < count; ++i) {
    c.entry = i;
    const char* name;
    TRY(read_string(&c, p, "name", &name));
    const kiln_kernel_info_t* found = NULL;
    for (int32_t k = 0; k < info->num_kernels && !found; ++k)
      if (strcmp(info->kernels[k].name, name) == 0) found = &info->kernels[k];
    if (!found)
      return fail(&c, KILN_ERR_NOT_FOUND, "kernel '%s' is not in the kernel library '%s'", name,
                  library_name);
    p->kernels[i] = found;
    p->num_kernels = i + 1;
  }
  return KILN_OK;
}

static kiln_status_t load_externs(kiln_vm_program_t* p, const uint8_t* blob, const layout_t* l) {
  cursor_t c = section(blob, l, EXTERNS);
  uint32_t count;
  TRY(read_count(&c, 4, &count));
  p->externs = kiln_mem_alloc((size_t)count * sizeof *p->externs);
  if (!p->externs) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading %u externs", (unsigned)count);
  for (uint32_t i = 0; i < count; ++i) {
    c.entry = i;
    TRY(read_string(&c, p, "name", &p->externs[i]));
    p->num_externs = i + 1;
  }
  return KILN_OK;
}

static void release_library(void* library) { kiln_module_release(library); }

static kiln_status_t load_constants(kiln_vm_program_t* p, const uint8_t* blob, uint64_t size,
                                    const layout_t* l, kiln_module_t* library) {
  cursor_t c = section(blob, l, CONSTANTS);
  uint32_t count;
  TRY(read_count(&c, 24, &count));
  p->constants = kiln_mem_calloc((size_t)count * sizeof *p->constants);
  if (!p->constants) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading %u constants", (unsigned)count);
  for (uint32_t i = 0; i < count; ++i) {
    c.entry = i;
    DLDataType dtype;
    uint64_t ndim, offset, nbytes, expected;
    int64_t shape[KILN_MAX_NDIM];
    TRY(read_dtype(&c, 0, &dtype));
    READ(&c, 4, "ndim", ndim);
    if (ndim > KILN_MAX_NDIM) return fail(&c, BAD, "ndim %llu exceeds the limit of %d", (unsigned long long)ndim, KILN_MAX_NDIM);
    for (uint64_t d = 0; d < ndim; ++d) {
      uint64_t v;
      READ(&c, 8, "shape", v);
      shape[d] = (int64_t)v;
      if (shape[d] < 0) return fail(&c, BAD, "dimension %u is negative (%lld)", (unsigned)d, (long long)shape[d]);
    }
    READ(&c, 8, "data_offset", offset);
    READ(&c, 8, "nbytes", nbytes);
    if (offset % KILN_ALIGNMENT)
      return fail(&c, BAD, "data_offset 0x%llx is not %d-byte aligned", (unsigned long long)offset,
                  KILN_ALIGNMENT);
    if (offset > size || nbytes > size - offset)
      return fail(&c, BAD, "data_offset 0x%llx + nbytes %llu exceeds blob size %llu",
                  (unsigned long long)offset, (unsigned long long)nbytes, (unsigned long long)size);
    if (!kiln_vm_shape_nbytes(shape, (int64_t)ndim, (uint64_t)dtype.bits * dtype.lanes, &expected) ||
        expected != nbytes) {
      char s[KILN_SHAPE_STRING], t[KILN_SMALL_STRING];
      kiln_format_shape(s, sizeof s, shape, (int32_t)ndim, NULL);
      kiln_format_dtype(t, sizeof t, dtype);
      return fail(&c, BAD, "nbytes %llu does not match shape %s of %s", (unsigned long long)nbytes, s, t);
    }
    DLTensor dl = {(void*)(uintptr_t)(blob + offset), {kDLCPU, 0}, (int32_t)ndim, dtype, shape, NULL, 0};
    kiln_module_retain(library); /* the tensor's memory is the library's */
    kiln_status_t st = kiln_tensor_wrap_with_flags(&dl, release_library, library,
                                                   KILN_TENSOR_FLAG_READ_ONLY, &p->constants[i]);
    if (st != KILN_OK) {
      kiln_module_release(library);
      return st;
    }
    p->num_constants = i + 1;
  }
  return KILN_OK;
}

/* ---- functions and their code ------------------------------------------------------------------ */

typedef struct {
  const kiln_vm_program_t* p;
  const kiln_vm_function_t* f;
  uint32_t index;      /* of the function */
  uint32_t pc;         /* instruction number */
  uint32_t op;
  uint64_t offset;     /* of the instruction in the blob */
  uint32_t version;    /* of the blob's format */
} where_t;

static kiln_status_t code_fail(const where_t* w, const char* fmt, ...) KILN_PRINTF_FORMAT(2, 3);

static kiln_status_t code_fail(const where_t* w, const char* fmt, ...) {
  char msg[640];
  va_list ap;
  va_start(ap, fmt);
  kiln_vformat(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kiln_error(BAD, "executable: function %u '%s': instruction %u (%s) at offset 0x%llx: %s",
                    (unsigned)w->index, w->f->name, (unsigned)w->pc, kiln_vm_opcode_name(w->op),
                    (unsigned long long)w->offset, msg);
}

/* Operand counts: fixed ones, and for variable ones the fixed prefix (whose last operand counts
 * the rest: ndim or nargs). */
static const uint8_t kFixedOperands[KILN_NUM_OPCODES] = {0, 2, 0, 0, 0, 0, 0, 3, 2, 1, 0, 1, 0};
static const uint8_t kPrefixOperands[KILN_NUM_OPCODES] = {0, 0, 6, 5, 2, 2, 2, 0, 0, 0, 5, 0, 3};

static kiln_status_t check_reg(const where_t* w, int64_t r, const char* what) {
  if (r < 0 || (uint64_t)r >= w->f->num_registers)
    return code_fail(w, "%s register %lld out of range (the function has %u registers)", what,
                     (long long)r, (unsigned)w->f->num_registers);
  return KILN_OK;
}

static kiln_status_t check_index(const where_t* w, int64_t i, uint32_t n, const char* table) {
  if (i < 0 || (uint64_t)i >= n)
    return code_fail(w, "%s index %lld out of range (%u %ss)", table, (long long)i, (unsigned)n, table);
  return KILN_OK;
}

/* ALLOC_ARENA / ALLOC_OUTPUT: dtype, dims; fixed-size arena views must fit the arena. */
static kiln_status_t check_alloc(const where_t* w, kiln_vm_instr_t* in, size_t* views_size) {
  const int64_t* o = in->ops;
  int arena = in->op == KILN_OP_ALLOC_ARENA;
  const int64_t* dt = o + (arena ? 2 : 1);
  int64_t ndim = dt[3];
  const int64_t* dims = dt + 4;
  if (dt[0] < 0 || dt[0] > 255 || dt[1] < 0 || dt[1] > 255 || dt[2] < 0 || dt[2] > 65535 ||
      !kiln_dtype_supported((uint8_t)dt[0], (uint8_t)dt[1], (uint16_t)dt[2], 1))
    return code_fail(w, "unsupported dtype (code %lld, bits %lld, lanes %lld)", (long long)dt[0],
                     (long long)dt[1], (long long)dt[2]);
  for (int64_t d = 0; d < ndim; ++d) {
    if (dims[d] < 0 && -1 - dims[d] >= (int64_t)w->f->sig.num_sym + w->f->sig.num_derived)
      return code_fail(w, "dimension %lld refers to symbolic dimension %lld, but the function has %d "
                       "(and %d derived)", (long long)d, (long long)(-1 - dims[d]),
                       (int)w->f->sig.num_sym, (int)w->f->sig.num_derived);
    in->symbolic |= dims[d] < 0;
  }
  uint64_t esize = elem_bytes((uint8_t)dt[1], (uint16_t)dt[2]), nbytes = 0;
  if (!in->symbolic && !kiln_vm_shape_nbytes(dims, ndim, (uint64_t)dt[1] * (uint64_t)dt[2], &nbytes))
    return code_fail(w, "the tensor's size overflows");
  if (!arena) return KILN_OK;
  int64_t offset = o[1];
  if (offset < 0 || (uint64_t)offset % esize)
    return code_fail(w, "arena offset %lld is not a non-negative multiple of the element size %llu",
                     (long long)offset, (unsigned long long)esize);
  if (!in->symbolic && ((uint64_t)offset > w->f->arena_size || nbytes > w->f->arena_size - (uint64_t)offset))
    return code_fail(w, "arena view at offset %lld of %llu bytes exceeds arena_size %llu",
                     (long long)offset, (unsigned long long)nbytes,
                     (unsigned long long)w->f->arena_size);
  in->slot = *views_size;
  *views_size += kiln_tensor_embedded_size((int32_t)ndim);
  return KILN_OK;
}

static kiln_status_t check_instr(const where_t* w, kiln_vm_instr_t* in, size_t* views_size,
                                 uint64_t* max_args) {
  const int64_t* o = in->ops;
  uint32_t n = in->num_ops, op = in->op;
  if (op == 0 || op >= KILN_NUM_OPCODES) return code_fail(w, "unknown opcode %u", (unsigned)op);
  if ((op == KILN_OP_IF || op == KILN_OP_FREE) && w->version < 2)
    return code_fail(w, "%s needs format version 2, the blob says %u", kiln_vm_opcode_name(op),
                     (unsigned)w->version);
  if (kFixedOperands[op] && n != kFixedOperands[op])
    return code_fail(w, "takes %u operands, got %u", (unsigned)kFixedOperands[op], (unsigned)n);
  if (kPrefixOperands[op]) {
    uint32_t prefix = kPrefixOperands[op];
    if (n < prefix) return code_fail(w, "takes at least %u operands, got %u", (unsigned)prefix, (unsigned)n);
    int64_t count = o[prefix - 1];
    if (count < 0 || (uint64_t)count != n - prefix || count > INT32_MAX)
      return code_fail(w, "count operand %lld does not match its %u operands", (long long)count, (unsigned)n);
    if ((op == KILN_OP_ALLOC_ARENA || op == KILN_OP_ALLOC_OUTPUT) && count > KILN_MAX_NDIM)
      return code_fail(w, "ndim %lld exceeds the limit of %d", (long long)count, KILN_MAX_NDIM);
  }
  switch (op) {
    case KILN_OP_LOAD_CONST:
      TRY(check_reg(w, o[0], "dst"));
      return check_index(w, o[1], w->p->num_constants, "constant");
    case KILN_OP_ALLOC_ARENA:
    case KILN_OP_ALLOC_OUTPUT:
      TRY(check_reg(w, o[0], "dst"));
      return check_alloc(w, in, views_size);
    case KILN_OP_CALL_PACKED: /* dst, then CALL_EXTERN's operands */
      TRY(check_reg(w, o[0], "dst"));
      o++;
      n--;
      /* fall through */
    case KILN_OP_CALL_KERNEL:
    case KILN_OP_CALL_EXTERN: {
      int kernel = op == KILN_OP_CALL_KERNEL;
      TRY(check_index(w, o[0], kernel ? w->p->num_kernels : w->p->num_externs, kernel ? "kernel" : "extern"));
      if (kernel && o[1] != w->p->kernels[o[0]]->num_params)
        return code_fail(w, "kernel '%s' takes %d arguments, the instruction passes %lld",
                         w->p->kernels[o[0]]->name, (int)w->p->kernels[o[0]]->num_params, (long long)o[1]);
      for (uint32_t j = 2; j < n; ++j) TRY(check_reg(w, o[j], "argument"));
      if ((uint64_t)o[1] > *max_args) *max_args = (uint64_t)o[1];
      return KILN_OK;
    }
    case KILN_OP_MAKE_TUPLE:
      TRY(check_reg(w, o[0], "dst"));
      for (uint32_t j = 2; j < n; ++j) TRY(check_reg(w, o[j], "item"));
      return KILN_OK;
    case KILN_OP_GET_ITEM:
      TRY(check_reg(w, o[0], "dst"));
      TRY(check_reg(w, o[1], "src"));
      if (o[2] < 0 || o[2] > INT32_MAX) return code_fail(w, "tuple index %lld out of range", (long long)o[2]);
      return KILN_OK;
    case KILN_OP_MOVE:
      TRY(check_reg(w, o[0], "dst"));
      return check_reg(w, o[1], "src");
    case KILN_OP_IF:
      /* dst, cond, then, else, nargs, args: the callees are checked once all functions are
       * loaded (check_calls). */
      TRY(check_reg(w, o[0], "dst"));
      TRY(check_reg(w, o[1], "cond"));
      for (uint32_t j = 5; j < n; ++j) TRY(check_reg(w, o[j], "argument"));
      if ((uint64_t)o[4] > *max_args) *max_args = (uint64_t)o[4];
      return KILN_OK;
    case KILN_OP_FREE:
      return check_reg(w, o[0], "freed");
    default: /* RET */
      return check_reg(w, o[0], "src");
  }
}

/* Decodes and checks [code_offset, code_offset + code_size) and lays out the call frame. */
static kiln_status_t load_code(kiln_vm_program_t* p, kiln_vm_function_t* f, uint32_t index,
                               const uint8_t* blob, uint64_t start, uint64_t end, uint32_t version) {
  where_t w = {p, f, index, 0, 0, start, version};
  /* Pass 1: framing. Every instruction takes >= 8 bytes, so the counts below are bounded. */
  uint64_t pos = start, count = 0, total_ops = 0;
  uint32_t last = 0;
  while (pos < end) {
    w.pc = (uint32_t)count;
    w.offset = pos;
    w.op = 0;
    if (end - pos < 8) return code_fail(&w, "truncated: %llu bytes left in the function's code", (unsigned long long)(end - pos));
    w.op = last = (uint32_t)load_le(blob + pos, 4);
    uint64_t n = load_le(blob + pos + 4, 4);
    if (n > (end - pos - 8) / 8)
      return code_fail(&w, "%llu operands run past the end of the function's code at 0x%llx",
                       (unsigned long long)n, (unsigned long long)end);
    pos += 8 + 8 * n;
    ++count;
    total_ops += n;
  }
  if (count == 0 || last != KILN_OP_RET)
    return kiln_error(BAD, "executable: function %u '%s': code at offset 0x%llx (%llu bytes) does not "
                      "end with RET", (unsigned)index, f->name, (unsigned long long)start,
                      (unsigned long long)(end - start));
  f->code = kiln_mem_alloc((size_t)count * sizeof *f->code + (size_t)total_ops * sizeof(int64_t));
  if (!f->code) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading function '%s'", f->name);
  int64_t* operands = (int64_t*)(f->code + count);
  /* Pass 2: decode and check every operand. */
  size_t views_size = 0;
  uint64_t max_args = 0;
  pos = start;
  for (uint32_t i = 0; i < count; ++i) {
    kiln_vm_instr_t* in = &f->code[i];
    w.pc = i;
    w.offset = pos;
    in->op = w.op = (uint32_t)load_le(blob + pos, 4);
    in->num_ops = (uint32_t)load_le(blob + pos + 4, 4);
    in->ops = operands;
    in->slot = 0;
    in->symbolic = 0;
    pos += 8;
    for (uint32_t j = 0; j < in->num_ops; ++j, pos += 8) *operands++ = (int64_t)load_le(blob + pos, 8);
    f->num_instrs = i + 1;
    TRY(check_instr(&w, in, &views_size, &max_args));
  }
  /* The frame: see kiln_vm_function_t. Registers are bounded, views and scratch by the code. */
  f->off_regs = KILN_VM_FRAME_HEADER;
  f->off_scratch = f->off_regs + (size_t)f->num_registers * sizeof(kiln_value_t);
  size_t off_views = f->off_scratch + (size_t)max_args * sizeof(kiln_value_t);
  for (uint32_t i = 0; i < count; ++i) f->code[i].slot += off_views;
  f->off_arena = (off_views + views_size + KILN_ALIGNMENT - 1) & ~(size_t)(KILN_ALIGNMENT - 1);
  if (f->arena_size > (uint64_t)(SIZE_MAX - f->off_arena))
    return kiln_error(BAD, "executable: function %u '%s': arena_size %llu does not fit in memory",
                      (unsigned)index, f->name, (unsigned long long)f->arena_size);
  f->frame_size = f->off_arena + (size_t)f->arena_size;
  return KILN_OK;
}

/* Version 3: the derived dimensions (kiln_derived_dim_t, 24 bytes each) and one upper bound per
 * symbolic and derived dimension (< 0: none), after sym_names. Validated with the parameters. */
static kiln_status_t load_derived(kiln_vm_program_t* p, cursor_t* c, kiln_vm_function_t* f,
                                  size_t* derived_used, size_t* bounds_used) {
  uint64_t num_derived;
  READ(c, 4, "num_derived", num_derived);
  if (num_derived > (uint64_t)(KILN_MAX_KERNEL_SYMS - f->sig.num_sym) || num_derived > (c->end - c->pos) / 24)
    return fail(c, BAD, "function '%s': num_derived %llu exceeds the limit of %d dimensions in all "
                "or the section", f->name, (unsigned long long)num_derived, KILN_MAX_KERNEL_SYMS);
  kiln_derived_dim_t* derived = p->derived_pool + *derived_used;
  *derived_used += (size_t)num_derived;
  f->sig.num_derived = (int32_t)num_derived;
  f->sig.derived = derived;
  for (uint64_t j = 0; j < num_derived; ++j) {
    uint64_t op, flags, a, b;
    READ(c, 4, "derived op", op);
    READ(c, 4, "derived flags", flags);
    READ(c, 8, "derived a", a);
    READ(c, 8, "derived b", b);
    derived[j].op = (uint32_t)op;
    derived[j].flags = (uint32_t)flags;
    derived[j].a = (int64_t)a;
    derived[j].b = (int64_t)b;
  }
  int32_t num_dims = f->sig.num_sym + f->sig.num_derived;
  if ((uint64_t)num_dims > (c->end - c->pos) / 8)
    return fail(c, BAD, "function '%s': %d bounds exceed the section", f->name, (int)num_dims);
  int64_t* bounds = p->bounds_pool + *bounds_used;
  *bounds_used += (size_t)num_dims;
  f->bounds = bounds;
  for (int32_t s = 0; s < num_dims; ++s) {
    uint64_t v;
    READ(c, 8, "bound", v);
    bounds[s] = (int64_t)v;
  }
  return KILN_OK;
}

static kiln_status_t load_function(kiln_vm_program_t* p, cursor_t* c, uint32_t k,
                                   const layout_t* l, size_t* params_used, size_t* dims_used,
                                   size_t* names_used, size_t* derived_used, size_t* bounds_used) {
  kiln_vm_function_t* f = &p->functions[k];
  uint64_t num_params, num_regs, num_sym, code_offset, code_size;
  TRY(read_string(c, p, "name", &f->name));
  if (l->version >= 2) {
    uint64_t flags;
    READ(c, 4, "flags", flags);
    if (flags & ~(uint64_t)KILN_VM_FUNCTION_PRIVATE)
      return fail(c, BAD, "function '%s': unknown flags 0x%llx", f->name, (unsigned long long)flags);
    f->flags = (uint32_t)flags;
  }
  READ(c, 4, "num_params", num_params);
  READ(c, 4, "num_registers", num_regs);
  READ(c, 4, "num_sym", num_sym);
  if (num_regs > KILN_VM_MAX_REGISTERS || num_params > num_regs)
    return fail(c, BAD, "function '%s': num_registers %llu must be at least num_params %llu and at "
                "most %u", f->name, (unsigned long long)num_regs, (unsigned long long)num_params,
                KILN_VM_MAX_REGISTERS);
  if (num_sym > KILN_MAX_KERNEL_SYMS || num_sym > (c->end - c->pos) / 4)
    return fail(c, BAD, "function '%s': num_sym %llu exceeds the limit of %d or the section", f->name,
                (unsigned long long)num_sym, KILN_MAX_KERNEL_SYMS);
  f->num_registers = (uint32_t)num_regs;
  f->sig.name = f->name;
  f->sig.fn = NULL;
  f->sig.num_sym = (int32_t)num_sym;
  f->sig.sym_names = p->names_pool + *names_used;
  for (uint64_t s = 0; s < num_sym; ++s) {
    const char** name = &p->names_pool[(*names_used)++];
    TRY(read_string(c, p, "sym_names", name));
    for (uint64_t t = 0; t < s; ++t)
      if (strcmp(f->sig.sym_names[t], *name) == 0)
        return fail(c, BAD, "function '%s': symbolic dimensions %u and %u are both named '%s'",
                    f->name, (unsigned)t, (unsigned)s, *name);
  }
  if (l->version >= 3) TRY(load_derived(p, c, f, derived_used, bounds_used));
  READ(c, 8, "arena_size", f->arena_size);
  READ(c, 8, "code_offset", code_offset);
  READ(c, 8, "code_size", code_size);
  if (f->arena_size % KILN_ALIGNMENT)
    return fail(c, BAD, "function '%s': arena_size %llu is not a multiple of %d", f->name,
                (unsigned long long)f->arena_size, KILN_ALIGNMENT);
  uint64_t bc_lo = l->offset[BYTECODE], bc_hi = bc_lo + l->size[BYTECODE];
  if (code_offset < bc_lo || code_offset > bc_hi || code_size > bc_hi - code_offset)
    return fail(c, BAD, "function '%s': code_offset 0x%llx + code_size %llu lies outside section 6 "
                "(BYTECODE) [0x%llx, 0x%llx)", f->name, (unsigned long long)code_offset,
                (unsigned long long)code_size, (unsigned long long)bc_lo, (unsigned long long)bc_hi);
  if (num_params > (c->end - c->pos) / 12)
    return fail(c, BAD, "function '%s': %llu parameters need at least %llu bytes, but the section "
                "has %llu left", f->name, (unsigned long long)num_params,
                (unsigned long long)(num_params * 12), (unsigned long long)(c->end - c->pos));
  kiln_kernel_param_t* params = p->params_pool + *params_used;
  f->sig.num_params = (int32_t)num_params;
  f->sig.params = params;
  *params_used += (size_t)num_params;
  for (uint64_t i = 0; i < num_params; ++i) {
    kiln_kernel_param_t* param = &params[i];
    DLDataType dtype;
    uint64_t ndim;
    TRY(read_string(c, p, "parameter name", &param->name));
    TRY(read_dtype(c, 2, &dtype));
    READ(c, 4, "ndim", ndim);
    if (ndim > KILN_MAX_NDIM)
      return fail(c, BAD, "function '%s': parameter %u '%s': ndim %llu exceeds the limit of %d",
                  f->name, (unsigned)i, param->name, (unsigned long long)ndim, KILN_MAX_NDIM);
    param->dtype_code = dtype.code;
    param->dtype_bits = dtype.bits;
    param->dtype_lanes = dtype.lanes;
    param->ndim = (int32_t)ndim;
    param->flags = 0; /* graph-function parameters are only read */
    int64_t* shape = p->dims_pool + *dims_used;
    param->shape = shape;
    for (uint64_t d = 0; d < ndim; ++d) {
      uint64_t v;
      READ(c, 8, "shape", v);
      shape[d] = (int64_t)v;
      ++*dims_used;
      if (shape[d] < 0 && -1 - shape[d] >= (int64_t)num_sym + f->sig.num_derived)
        return fail(c, BAD, "function '%s': parameter %u '%s' dimension %u refers to symbolic "
                    "dimension %lld, but the function has %u (and %d derived)", f->name, (unsigned)i,
                    param->name, (unsigned)d, (long long)(-1 - shape[d]), (unsigned)num_sym,
                    (int)f->sig.num_derived);
    }
  }
  if (l->version >= 3) /* which parameters the function updates in place */
    for (uint64_t i = 0; i < num_params; ++i) {
      uint64_t flags;
      READ(c, 4, "parameter flags", flags);
      if (flags & ~(uint64_t)KILN_PARAM_WRITTEN)
        return fail(c, BAD, "function '%s': parameter %u '%s' has unknown flags 0x%llx", f->name,
                    (unsigned)i, params[i].name, (unsigned long long)flags);
      params[i].flags = (uint32_t)flags;
    }
  /* Symbolic dimensions are bound from the arguments: one no parameter has is never bound. */
  for (int32_t s = 0; s < f->sig.num_sym; ++s) {
    int bound = 0;
    for (int32_t i = 0; i < f->sig.num_params && !bound; ++i)
      for (int32_t d = 0; d < f->sig.params[i].ndim && !bound; ++d)
        bound = f->sig.params[i].shape[d] == -1 - (int64_t)s;
    if (!bound)
      return fail(c, BAD, "function '%s': symbolic dimension %d '%s' appears in no parameter's "
                  "shape, so no argument binds it", f->name, (int)s, f->sig.sym_names[s]);
  }
  char why[KILN_SHAPE_STRING];
  if (kiln_derived_validate(&f->sig, why, sizeof why) != KILN_OK)
    return fail(c, BAD, "function '%s': %s", f->name, why);
  if (strcmp(f->name, "init") == 0 || strcmp(f->name, "profile") == 0)
    return fail(c, BAD, "function name '%s' is reserved by the VM", f->name);
  for (uint32_t j = 0; j < k; ++j)
    if (strcmp(p->functions[j].name, f->name) == 0)
      return fail(c, BAD, "function name '%s' is used twice (also entry %u)", f->name, (unsigned)j);
  return load_code(p, f, k, c->blob, code_offset, code_offset + code_size, l->version);
}

/* IF targets: in range, called with their parameter count, and nested at most
 * KILN_VM_MAX_CALL_DEPTH deep, which also rules out recursion (the interpreter recurses on IF).
 * depth[k]: 0 unknown, -1 being visited, else 1 + the deepest callee. */
static kiln_status_t check_callees(const kiln_vm_program_t* p, uint32_t k, int32_t* depth,
                                   int32_t level) {
  const kiln_vm_function_t* f = &p->functions[k];
  if (level > KILN_VM_MAX_CALL_DEPTH)
    return kiln_error(BAD, "executable: IF calls nest deeper than %d functions (at '%s')",
                      KILN_VM_MAX_CALL_DEPTH, f->name);
  depth[k] = -1;
  int32_t deepest = 0;
  for (uint32_t i = 0; i < f->num_instrs; ++i) {
    const kiln_vm_instr_t* in = &f->code[i];
    if (in->op != KILN_OP_IF) continue;
    for (int b = 2; b <= 3; ++b) {
      int64_t g = in->ops[b];
      if (g < 0 || (uint64_t)g >= p->num_functions)
        return kiln_error(BAD, "executable: function %u '%s': instruction %u (IF): function index "
                          "%lld out of range (%u functions)", (unsigned)k, f->name, (unsigned)i,
                          (long long)g, (unsigned)p->num_functions);
      const kiln_vm_function_t* callee = &p->functions[g];
      if (in->ops[4] != callee->sig.num_params)
        return kiln_error(BAD, "executable: function %u '%s': instruction %u (IF): passes %lld "
                          "arguments to '%s', which takes %d", (unsigned)k, f->name, (unsigned)i,
                          (long long)in->ops[4], callee->name, (int)callee->sig.num_params);
      if (depth[g] == -1)
        return kiln_error(BAD, "executable: function '%s' reaches itself through IF ('%s' calls "
                          "'%s'); recursion is not allowed", callee->name, f->name, callee->name);
      if (depth[g] == 0) TRY(check_callees(p, (uint32_t)g, depth, level + 1));
      if (depth[g] > deepest) deepest = depth[g];
    }
  }
  depth[k] = deepest + 1;
  if (level + deepest > KILN_VM_MAX_CALL_DEPTH)
    return kiln_error(BAD, "executable: IF calls nest deeper than %d functions (at '%s')",
                      KILN_VM_MAX_CALL_DEPTH, f->name);
  return KILN_OK;
}

static kiln_status_t check_calls(kiln_vm_program_t* p) {
  int32_t* depth = kiln_mem_calloc((size_t)p->num_functions * sizeof *depth + 1);
  p->public_functions = kiln_mem_alloc((size_t)p->num_functions * sizeof *p->public_functions + 1);
  if (!depth || !p->public_functions) {
    kiln_mem_free(depth);
    return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading %u functions", (unsigned)p->num_functions);
  }
  kiln_status_t st = KILN_OK;
  for (uint32_t k = 0; k < p->num_functions && st == KILN_OK; ++k)
    if (depth[k] == 0) st = check_callees(p, k, depth, 1);
  kiln_mem_free(depth);
  for (uint32_t k = 0; k < p->num_functions; ++k)
    if (!(p->functions[k].flags & KILN_VM_FUNCTION_PRIVATE)) p->public_functions[p->num_public++] = k;
  return st;
}

static kiln_status_t load_functions(kiln_vm_program_t* p, const uint8_t* blob, const layout_t* l) {
  cursor_t c = section(blob, l, FUNCTIONS);
  uint32_t count;
  TRY(read_count(&c, 40, &count));
  /* Pools for every function's parameters, shapes and symbolic names, bounded by the section:
   * a parameter takes >= 12 bytes, a dimension 8, a name 4. */
  size_t sz = (size_t)l->size[FUNCTIONS];
  p->functions = kiln_mem_calloc((size_t)count * sizeof *p->functions);
  p->params_pool = kiln_mem_alloc(sz / 12 * sizeof *p->params_pool);
  p->dims_pool = kiln_mem_alloc(sz / 8 * sizeof *p->dims_pool);
  p->names_pool = kiln_mem_alloc(sz / 4 * sizeof *p->names_pool);
  p->derived_pool = kiln_mem_alloc(sz / 24 * sizeof *p->derived_pool + 1);
  p->bounds_pool = kiln_mem_alloc(sz / 8 * sizeof *p->bounds_pool);
  if (!p->functions || !p->params_pool || !p->dims_pool || !p->names_pool || !p->derived_pool ||
      !p->bounds_pool)
    return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading %u functions", (unsigned)count);
  size_t params_used = 0, dims_used = 0, names_used = 0, derived_used = 0, bounds_used = 0;
  for (uint32_t k = 0; k < count; ++k) {
    c.entry = k;
    p->num_functions = k + 1; /* so that a failure frees what this one allocated */
    TRY(load_function(p, &c, k, l, &params_used, &dims_used, &names_used, &derived_used,
                      &bounds_used));
  }
  return check_calls(p);
}

/* ---- the whole blob ---------------------------------------------------------------------------- */

void kiln_vm_program_free(kiln_vm_program_t* p) {
  if (!p) return;
  for (uint32_t i = 0; i < p->num_constants; ++i) kiln_tensor_release(p->constants[i]);
  for (uint32_t i = 0; i < p->num_functions; ++i) kiln_mem_free(p->functions[i].code);
  kiln_mem_free(p->constants);
  kiln_mem_free(p->functions);
  kiln_mem_free(p->public_functions);
  kiln_mem_free(p->params_pool);
  kiln_mem_free(p->dims_pool);
  kiln_mem_free(p->names_pool);
  kiln_mem_free(p->derived_pool);
  kiln_mem_free(p->bounds_pool);
  kiln_mem_free(p->kernels);
  kiln_mem_free(p->externs);
  kiln_mem_free(p->strings);
  kiln_mem_free(p->strings_block);
  kiln_mem_free(p);
}

kiln_status_t kiln_vm_program_load(kiln_module_t* library, const kiln_library_info_t* info,
                                   const uint8_t* blob, uint64_t blob_size,
                                   kiln_vm_program_t** out_program) {
  layout_t layout;
  memset(&layout, 0, sizeof layout);
  if (!blob) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "executable: the library has no executable blob");
  kiln_status_t st = check_header(blob, blob_size, &layout);
  if (st != KILN_OK) return st;
  kiln_vm_program_t* p = kiln_mem_calloc(sizeof *p);
  if (!p) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading an executable");
  st = load_strings(p, blob, &layout);
  if (st == KILN_OK) st = load_kernels(p, blob, &layout, info, library->name);
  if (st == KILN_OK) st = load_externs(p, blob, &layout);
  if (st == KILN_OK) st = load_constants(p, blob, blob_size, &layout, library);
  if (st == KILN_OK) st = load_functions(p, blob, &layout);
  if (st != KILN_OK) {
    kiln_vm_program_free(p);
    return st;
  }
  *out_program = p;
  return KILN_OK;
}
