/* tensor.c — the reference-counted tensor: a DLTensor whose shape and strides live in the same
 * allocation as the header, and whose data is either in that allocation too (created tensors:
 * one malloc per tensor) or owned by someone else and returned through a deleter (wrapped). */
#include <stddef.h>
#include <string.h>

#include "internal.h"

struct kiln_tensor_t {
  DLTensor dl;
  int32_t refcount;
  uint32_t flags;          /* KILN_TENSOR_FLAG_* */
  kiln_deleter_fn deleter; /* NULL when the data is part of this allocation */
  void* deleter_ctx;
  int64_t dims[];          /* shape[ndim], then strides[ndim] */
};

/* Checks what every tensor must satisfy and computes its size in bytes:
 * ceil(prod(shape) * bits * lanes / 8), which is the DLPack size for byte-sized types and the
 * packed size for sub-byte ones. */
static kiln_status_t check_layout(const char* what, const int64_t* shape, int32_t ndim,
                                  DLDataType dtype, size_t* out_nbytes) {
  if (ndim < 0 || ndim > KILN_MAX_NDIM)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: ndim %d is outside [0, %d]", what,
                      (int)ndim, KILN_MAX_NDIM);
  if (ndim > 0 && !shape)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: shape is NULL with ndim %d", what, (int)ndim);
  if (dtype.bits == 0 || dtype.lanes == 0)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: dtype has bits %u and lanes %u (need >= 1)",
                      what, (unsigned)dtype.bits, (unsigned)dtype.lanes);
  int any_zero = 0;
  for (int32_t d = 0; d < ndim; ++d) {
    if (shape[d] < 0) {
      char s[KILN_SHAPE_STRING];
      kiln_format_shape(s, sizeof s, shape, ndim, NULL);
      return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: negative extent in shape %s", what, s);
    }
    any_zero |= shape[d] == 0;
  }
  uint64_t elem_bits = (uint64_t)dtype.bits * dtype.lanes;
  uint64_t limit = ((uint64_t)SIZE_MAX - 7) / elem_bits; /* most elements whose bits fit */
  uint64_t numel = 1; /* of the non-zero extents, so strides stay in range for empty tensors */
  for (int32_t d = 0; d < ndim; ++d) {
    if (shape[d] == 0) continue;
    if ((uint64_t)shape[d] > limit / numel)
      return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: tensor size overflows", what);
    numel *= (uint64_t)shape[d];
  }
  *out_nbytes = any_zero ? 0 : (size_t)((numel * elem_bits + 7) / 8);
  return KILN_OK;
}

static size_t header_size(int32_t ndim) {
  return offsetof(kiln_tensor_t, dims) + 2 * (size_t)ndim * sizeof(int64_t);
}

/* Fills everything but data, device and byte_offset. strides NULL means compact row-major. */
static void init_header(kiln_tensor_t* t, const int64_t* shape, const int64_t* strides,
                        int32_t ndim, DLDataType dtype) {
  int64_t* t_shape = t->dims;
  int64_t* t_strides = t->dims + ndim;
  int64_t stride = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    t_shape[d] = shape[d];
    t_strides[d] = strides ? strides[d] : stride;
    stride *= shape[d];
  }
  t->dl.ndim = ndim;
  t->dl.dtype = dtype;
  t->dl.shape = t_shape;
  t->dl.strides = t_strides;
  t->dl.byte_offset = 0;
  t->refcount = 1;
  t->flags = 0;
  t->deleter = NULL;
  t->deleter_ctx = NULL;
}

kiln_status_t kiln_tensor_create(const int64_t* shape, int32_t ndim, DLDataType dtype,
                                 DLDevice device, kiln_tensor_t** out_tensor) {
  if (!out_tensor)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_create: out_tensor is NULL");
  if (device.device_type != kDLCPU) {
    char dev[KILN_SMALL_STRING];
    kiln_format_device(dev, sizeof dev, device);
    return kiln_error(KILN_ERR_UNSUPPORTED,
                      "kiln_tensor_create: cannot allocate on device %s (only cpu)", dev);
  }
  size_t nbytes;
  kiln_status_t st = check_layout("kiln_tensor_create", shape, ndim, dtype, &nbytes);
  if (st != KILN_OK) return st;
  /* Data follows the header at the next alignment boundary. */
  size_t data_offset = (header_size(ndim) + KILN_ALIGNMENT - 1) & ~(size_t)(KILN_ALIGNMENT - 1);
  if (nbytes > SIZE_MAX - data_offset)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_create: tensor size overflows");
  kiln_tensor_t* t = kiln_mem_alloc(data_offset + nbytes);
  if (!t)
    return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory allocating a tensor of %zu bytes",
                      nbytes);
  init_header(t, shape, NULL, ndim, dtype);
  t->dl.data = (char*)t + data_offset;
  t->dl.device = device;
  *out_tensor = t;
  return KILN_OK;
}

kiln_status_t kiln_tensor_wrap_with_flags(const DLTensor* dl, kiln_deleter_fn deleter,
                                          void* deleter_ctx, uint32_t flags,
                                          kiln_tensor_t** out_tensor) {
  if (!dl || !out_tensor)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_wrap: dl and out_tensor must not be NULL");
  size_t nbytes;
  kiln_status_t st = check_layout("kiln_tensor_wrap", dl->shape, dl->ndim, dl->dtype, &nbytes);
  if (st != KILN_OK) return st;
  if (nbytes && !dl->data)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_wrap: data is NULL for a non-empty tensor");
  kiln_tensor_t* t = kiln_mem_alloc(header_size(dl->ndim));
  if (!t) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory wrapping a tensor");
  init_header(t, dl->shape, dl->strides, dl->ndim, dl->dtype);
  t->dl.data = dl->data;
  t->dl.device = dl->device;
  t->dl.byte_offset = dl->byte_offset;
  t->flags = flags;
  t->deleter = deleter;
  t->deleter_ctx = deleter_ctx;
  *out_tensor = t;
  return KILN_OK;
}

kiln_status_t kiln_tensor_wrap(const DLTensor* dl, kiln_deleter_fn deleter, void* deleter_ctx,
                               kiln_tensor_t** out_tensor) {
  return kiln_tensor_wrap_with_flags(dl, deleter, deleter_ctx, 0, out_tensor);
}

void kiln_tensor_retain(kiln_tensor_t* tensor) {
  if (tensor) KILN_ATOMIC_INC(&tensor->refcount);
}

void kiln_tensor_release(kiln_tensor_t* tensor) {
  if (!tensor || KILN_ATOMIC_DEC(&tensor->refcount) != 0) return;
  if (tensor->flags & KILN_TENSOR_FLAG_EMBEDDED) {
    tensor->deleter(tensor->deleter_ctx); /* may free the memory the tensor lives in: last */
    return;
  }
  if (tensor->deleter) tensor->deleter(tensor->deleter_ctx);
  kiln_mem_free(tensor);
}

size_t kiln_tensor_embedded_size(int32_t ndim) {
  return (header_size(ndim) + 7) & ~(size_t)7;
}

kiln_tensor_t* kiln_tensor_init_embedded(void* storage, const int64_t* shape, int32_t ndim,
                                         DLDataType dtype, void* data, kiln_deleter_fn deleter,
                                         void* deleter_ctx) {
  kiln_tensor_t* t = storage;
  init_header(t, shape, NULL, ndim, dtype);
  t->dl.data = data;
  t->dl.device.device_type = kDLCPU;
  t->dl.device.device_id = 0;
  t->flags = KILN_TENSOR_FLAG_EMBEDDED;
  t->deleter = deleter;
  t->deleter_ctx = deleter_ctx;
  return t;
}

DLTensor* kiln_tensor_dltensor(kiln_tensor_t* tensor) { return tensor ? &tensor->dl : NULL; }

size_t kiln_tensor_nbytes(const kiln_tensor_t* tensor) {
  size_t nbytes = 0;
  if (tensor) check_layout("", tensor->dl.shape, tensor->dl.ndim, tensor->dl.dtype, &nbytes);
  return nbytes;
}

int32_t kiln_tensor_is_read_only(const kiln_tensor_t* tensor) {
  return tensor && (tensor->flags & KILN_TENSOR_FLAG_READ_ONLY) ? 1 : 0;
}
