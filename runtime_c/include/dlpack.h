/*
 * dlpack.h — DLPack 1.1, the common in-memory tensor structure (https://github.com/dmlc/dlpack).
 *
 * Written for Kiln from the DLPack 1.1 specification. Struct layouts, enum values, flag bits and
 * version numbers are those of the spec, so tensors cross into and out of numpy, PyTorch and any
 * other DLPack framework without conversion. The Python-level exchange-API tables of later
 * versions are not included (Kiln does not use them).
 */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version of a DLManagedTensorVersioned. A different major version means a different
 * layout: the consumer may only call the deleter. A newer minor version only adds enum values. */
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

/* Where a tensor's memory lives. (The spec fixes the enum to int32_t in C++; in C an enum whose
 * values fit an int is an int, which has the same size on every platform Kiln targets.) */
typedef enum {
  kDLCPU = 1,          /* plain host memory */
  kDLCUDA = 2,         /* CUDA device memory */
  kDLCUDAHost = 3,     /* pinned host memory from cudaMallocHost */
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,          /* Verilog simulator buffer */
  kDLROCM = 10,
  kDLROCMHost = 11,    /* pinned host memory from hipMallocHost */
  kDLExtDev = 12,      /* reserved for extension devices */
  kDLCUDAManaged = 13, /* cudaMallocManaged memory */
  kDLOneAPI = 14,      /* oneAPI unified shared memory */
  kDLWebGPU = 15,
  kDLHexagon = 16,     /* Qualcomm Hexagon DSP */
  kDLMAIA = 17         /* Microsoft MAIA */
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;   /* 0 for plain, pinned or managed host memory */
} DLDevice;

/* DLDataType.code values. */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U, /* reserved for testing */
  kDLBfloat = 4U,
  kDLComplex = 5U,      /* compact struct of two floats per element */
  kDLBool = 6U,         /* stored as 8 bits */
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  kDLFloat6_e2m3fn = 15U, /* bits must be 6 */
  kDLFloat6_e3m2fn = 16U, /* bits must be 6 */
  kDLFloat4_e2m1fn = 17U  /* bits must be 4 */
} DLDataTypeCode;

/* Element type, native endianness. Examples: float32 = {kDLFloat, 32, 1}; bool = {kDLBool, 8, 1};
 * a 4-wide float32 vector = {kDLFloat, 32, 4}. Sub-byte types are packed little-bit-endian unless
 * DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED is set. */
typedef struct {
  uint8_t code;    /* a DLDataTypeCode; uint8_t to keep the struct 4 bytes */
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/* A tensor view; it manages no memory. Bytes of data: prod(shape) * ((bits * lanes + 7) / 8),
 * starting at (char*)data + byte_offset. strides count elements, not bytes; NULL means compact
 * row-major. */
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;

/* Legacy (pre-1.0) managed tensor, still what the "dltensor" Python capsule carries. The
 * consumer calls deleter(self) when done; the deleter frees self too. deleter may be NULL. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

/* DLManagedTensorVersioned.flags bits. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)  /* the consumer must not write */
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)  /* the producer made a copy for the consumer */
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

/* The managed tensor of DLPack >= 1.0 ("dltensor_versioned" capsule). Fields up to and including
 * flags keep their layout in every future version, so the deleter can always be called. */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#ifdef __cplusplus
}
#endif
#endif /* DLPACK_DLPACK_H_ */
