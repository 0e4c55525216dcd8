/* Kiln string tensors and the string kernels ONNX needs (docs/strings.md).
 *
 * libkiln_strings.so is an optional library, like libkiln_cuda.so: it links against
 * libkiln_runtime.so, reports errors through kiln_set_last_error / kiln_last_error, and keeps the
 * string code out of the size-limited core runtime. Plain C99 plus POSIX regex.h (libc).
 *
 * A string tensor is ONE contiguous, position-independent block of bytes:
 *
 *     [ kiln_str_t record 0 | record 1 | ... | record count-1 | UTF-8 bytes ... ]
 *
 * record i = {offset, length}: element i is the `length` bytes at `block + offset` (offsets count
 * from the start of the block, so a copy of the block is a memcpy and freeing it is one free).
 * Elements are not NUL-terminated and may share bytes. A block is valid (kiln_str_validate) when
 * count * 16 <= nbytes, every element lies inside [count * 16, nbytes) and every element is
 * well-formed UTF-8. Every kernel below reads blocks that passed kiln_str_validate (the runtime
 * validates each block where it enters: an argument, a constant of a loaded artifact) and writes
 * a new block allocated with malloc, freed with kiln_str_free.
 *
 * Shapes are the caller's: a block holds elements in row-major order and nothing else.
 */
#ifndef KILN_STRINGS_H_
#define KILN_STRINGS_H_

#include "kiln_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  uint64_t offset; /* from the start of the block */
  uint64_t length; /* bytes, no terminator */
} kiln_str_t;

/* KILN_ERR_INVALID_FORMAT naming the element and byte at fault, or KILN_ERR_INVALID_ARGUMENT
 * (NULL block with count > 0, records overflowing nbytes). */
KILN_API kiln_status_t kiln_str_validate(const void* block, uint64_t nbytes, uint64_t count);
KILN_API void kiln_str_free(void* block);

/* Binary elementwise over a broadcast shape: element strides of a and b (0 on a broadcast
 * dimension), in elements. equal writes 1/0 bytes; concat a new block of prod(shape) elements. */
KILN_API kiln_status_t kiln_str_equal(const void* a, const int64_t* a_strides, const void* b,
                                      const int64_t* b_strides, int32_t ndim, const int64_t* shape,
                                      uint8_t* out);
KILN_API kiln_status_t kiln_str_concat(const void* a, const int64_t* a_strides, const void* b,
                                       const int64_t* b_strides, int32_t ndim, const int64_t* shape,
                                       void** out_block, uint64_t* out_nbytes);

/* RE2 pattern -> POSIX extended regex for a full match ("^(...)$"), or KILN_ERR_UNSUPPORTED
 * naming the RE2 construct ERE cannot express (lazy quantifiers, (?...) groups, \p classes,
 * \A \z \Q, back-references; \b \B outside glibc). out_cap bytes at most, NUL included. */
KILN_API kiln_status_t kiln_str_regex_translate(const char* re2, char* out, size_t out_cap);
/* out[i] = 1 when element i matches `re2` (RE2 syntax) in full. Matching is bytewise (the C
 * locale): a '.' or a bracket matches one byte of a multi-byte UTF-8 character. */
KILN_API kiln_status_t kiln_str_regex_full_match(const void* x, uint64_t count, const char* re2,
                                                 uint8_t* out);

/* ONNX StringNormalizer over `count` elements: case_action 0 NONE, 1 LOWER, 2 UPPER (ASCII
 * letters; other bytes unchanged), the elements equal to a stopword removed (compared ignoring
 * ASCII case unless case_sensitive). Keeps at least one element: all removed gives one "". */
KILN_API kiln_status_t kiln_str_normalize(const void* x, uint64_t count, int32_t case_action,
                                          int32_t case_sensitive, const void* stopwords,
                                          uint64_t num_stopwords, void** out_block,
                                          uint64_t* out_nbytes, uint64_t* out_count);

/* ONNX StringSplit: element i split at `delimiter` (NULL or "" : at runs of ASCII whitespace,
 * leading and trailing ones dropped), at most maxsplit splits (< 0: no limit); the output is
 * count x out_width, padded with "" (out_width = the most tokens of one element), and
 * num_splits[i] the tokens of element i. */
KILN_API kiln_status_t kiln_str_split(const void* x, uint64_t count, const char* delimiter,
                                      int64_t maxsplit, void** out_block, uint64_t* out_nbytes,
                                      uint64_t* out_width, int64_t* num_splits);

/* out[i] = the index of element i of x among the keys (the first equal key), or -1: string
 * keys of a LabelEncoder; the caller gathers its values (and default) by that index. */
KILN_API kiln_status_t kiln_str_index(const void* x, uint64_t count, const void* keys,
                                      uint64_t num_keys, int64_t* out);
/* A new block: element i = src[index[i]], or `dflt` (dflt_len bytes) where index[i] < 0;
 * KILN_ERR_INVALID_ARGUMENT for an index >= num_src. */
KILN_API kiln_status_t kiln_str_take(const void* src, uint64_t num_src, const int64_t* index,
                                     uint64_t count, const char* dflt, uint64_t dflt_len,
                                     void** out_block, uint64_t* out_nbytes);

/* ---- string tensors as runtime values (kiln_strings_vm.c) -----------------------------------
 *
 * A string tensor value is a kiln tensor (KILN_VALUE_TENSOR) of dtype {KILN_STR_DTYPE_CODE,
 * KILN_STR_DTYPE_BITS, 1}: DLPack's opaque-handle code with 128-bit elements, one kiln_str_t
 * record per element, so the tensor's shape is the string tensor's shape and its data the start
 * of a block that owns the string bytes after the records. The core runtime holds, copies and
 * frees it like any tensor; only this library reads it. It has no DLPack form (the bindings
 * refuse to export it), and a kernel of a compiled model refuses it (dtype mismatch). Make one
 * with kiln_str_tensor_from_block, which validates every byte; one wrapped by hand
 * (kiln_tensor_wrap with this dtype) must have its records inside its allocation, which, like
 * any DLTensor's data pointer, cannot be checked (its UTF-8 and record layout are). */
#define KILN_STR_DTYPE_CODE 3   /* kDLOpaqueHandle */
#define KILN_STR_DTYPE_BITS 128 /* one kiln_str_t record */

/* Non-zero when `t` (may be NULL) has the string dtype. */
KILN_API int32_t kiln_str_is_tensor(const DLTensor* t);

/* A new string tensor of `shape` (ndim entries, borrowed) holding a validated copy of `block`
 * (nbytes, borrowed). *out_tensor is one reference owned by the caller. Errors:
 * KILN_ERR_INVALID_ARGUMENT, KILN_ERR_INVALID_FORMAT (kiln_str_validate's), KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_str_tensor_from_block(const void* block, uint64_t nbytes,
                                                  const int64_t* shape, int32_t ndim,
                                                  kiln_tensor_t** out_tensor);

/* The block of a string tensor (borrowed: valid while the caller holds the tensor), its size
 * (up to the end of its furthest element) and its element count, after kiln_str_validate.
 * Errors: KILN_ERR_DTYPE_MISMATCH (not a string tensor), KILN_ERR_INVALID_ARGUMENT (not compact,
 * not on the cpu), KILN_ERR_INVALID_FORMAT. */
KILN_API kiln_status_t kiln_str_tensor_block(kiln_tensor_t* tensor, const void** out_block,
                                             uint64_t* out_nbytes, uint64_t* out_count);

/* Registers the external functions that compiled models with string operators call (format
 * version 4, CALL_PACKED): kiln_strings.from_block, .equal, .concat, .regex_full_match,
 * .normalize, .split, .index and .take, replacing earlier registrations. Call it once before
 * init of such a model's VM; without it init fails with "init: external function
 * 'kiln_strings.equal' is not registered". The Python binding calls it when it loads. Errors:
 * KILN_ERR_OUT_OF_MEMORY. */
KILN_API kiln_status_t kiln_strings_register(void);

#ifdef __cplusplus
}
#endif
#endif /* KILN_STRINGS_H_ */
