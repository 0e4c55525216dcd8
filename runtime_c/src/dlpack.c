/* dlpack.c — zero-copy exchange with other frameworks through DLPack managed tensors. An
 * exported managed tensor holds one reference to the kiln tensor; an imported one is wrapped
 * with a deleter that hands it back to its producer. */
#include "internal.h"

static void versioned_deleter(DLManagedTensorVersioned* self) {
  kiln_tensor_release((kiln_tensor_t*)self->manager_ctx);
  kiln_mem_free(self);
}

static void legacy_deleter(DLManagedTensor* self) {
  kiln_tensor_release((kiln_tensor_t*)self->manager_ctx);
  kiln_mem_free(self);
}

kiln_status_t kiln_tensor_to_dlpack(kiln_tensor_t* tensor, DLManagedTensorVersioned** out_managed) {
  if (!tensor || !out_managed)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_to_dlpack: tensor and out_managed must not be NULL");
  DLManagedTensorVersioned* m = kiln_mem_alloc(sizeof *m);
  if (!m) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory exporting a tensor to DLPack");
  kiln_tensor_retain(tensor);
  m->version.major = DLPACK_MAJOR_VERSION;
  m->version.minor = DLPACK_MINOR_VERSION;
  m->manager_ctx = tensor;
  m->deleter = versioned_deleter;
  m->flags = kiln_tensor_is_read_only(tensor) ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  m->dl_tensor = *kiln_tensor_dltensor(tensor);
  *out_managed = m;
  return KILN_OK;
}

kiln_status_t kiln_tensor_to_dlpack_legacy(kiln_tensor_t* tensor, DLManagedTensor** out_managed) {
  if (!tensor || !out_managed)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_to_dlpack_legacy: tensor and out_managed must not be NULL");
  DLManagedTensor* m = kiln_mem_alloc(sizeof *m);
  if (!m) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory exporting a tensor to DLPack");
  kiln_tensor_retain(tensor);
  m->manager_ctx = tensor;
  m->deleter = legacy_deleter;
  m->dl_tensor = *kiln_tensor_dltensor(tensor);
  *out_managed = m;
  return KILN_OK;
}

static void release_versioned(void* ctx) {
  DLManagedTensorVersioned* m = ctx;
  if (m->deleter) m->deleter(m);
}

static void release_legacy(void* ctx) {
  DLManagedTensor* m = ctx;
  if (m->deleter) m->deleter(m);
}

kiln_status_t kiln_tensor_from_dlpack(DLManagedTensorVersioned* managed, kiln_tensor_t** out_tensor) {
  if (!managed || !out_tensor)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_from_dlpack: managed and out_tensor must not be NULL");
  /* Another major version has another layout: only version and deleter may be touched. */
  if (managed->version.major != DLPACK_MAJOR_VERSION)
    return kiln_error(KILN_ERR_VERSION_MISMATCH, "DLPack version %u.%u is not supported (need %d.x)",
                      (unsigned)managed->version.major, (unsigned)managed->version.minor,
                      DLPACK_MAJOR_VERSION);
  if ((managed->flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) && managed->dl_tensor.dtype.bits < 8)
    return kiln_error(KILN_ERR_UNSUPPORTED, "padded sub-byte DLPack tensors are not supported");
  uint32_t flags = (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) ? KILN_TENSOR_FLAG_READ_ONLY : 0;
  return kiln_tensor_wrap_with_flags(&managed->dl_tensor, release_versioned, managed, flags, out_tensor);
}

kiln_status_t kiln_tensor_from_dlpack_legacy(DLManagedTensor* managed, kiln_tensor_t** out_tensor) {
  if (!managed || !out_tensor)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_from_dlpack_legacy: managed and out_tensor must not be NULL");
  return kiln_tensor_wrap_with_flags(&managed->dl_tensor, release_legacy, managed, 0, out_tensor);
}
