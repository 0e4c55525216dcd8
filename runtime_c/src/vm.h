/*
 * vm.h — the bytecode VM's program: an executable blob (docs/executable-format.md) after
 * validation, decoded into tables the interpreter uses without further checks. Shared by
 * vm_loader.c (blob -> program) and vm.c (the "vm" module kind and the interpreter). Not API.
 */
#ifndef KILN_VM_H_
#define KILN_VM_H_

#include "internal.h"

enum {
  KILN_OP_LOAD_CONST = 1,
  KILN_OP_ALLOC_ARENA = 2,
  KILN_OP_ALLOC_OUTPUT = 3,
  KILN_OP_CALL_KERNEL = 4,
  KILN_OP_CALL_EXTERN = 5,
  KILN_OP_MAKE_TUPLE = 6,
  KILN_OP_GET_ITEM = 7,
  KILN_OP_MOVE = 8,
  KILN_OP_RET = 9,
  KILN_OP_IF = 10,   /* format version 2 */
  KILN_OP_FREE = 11, /* format version 2 */
  KILN_OP_CALL_PACKED = 12, /* format version 4: CALL_EXTERN that keeps the function's result */
  KILN_NUM_OPCODES = 13 /* opcodes are 1..12 */
};

/* FUNCTIONS entry flags (format version 2). */
#define KILN_VM_FUNCTION_PRIVATE 1u
/* IF calls nest at most this deep (the interpreter recurses on IF; no recursion is allowed). */
#define KILN_VM_MAX_CALL_DEPTH 64

/* Limits beyond the format's own fields, so that a call frame stays allocatable. */
#define KILN_VM_MAX_REGISTERS (1u << 20)

/* One decoded instruction. The loader has checked every operand: registers < num_registers,
 * table indices in range, counts consistent, dtypes supported, dims >= 0 or symbolic numbers
 * < num_sym + num_derived, fixed-size arena views inside the arena. */
typedef struct {
  uint32_t op;
  uint32_t num_ops;
  const int64_t* ops;
  size_t slot;      /* ALLOC_ARENA: frame offset of the view's embedded tensor */
  int symbolic;     /* ALLOC_*: some dim is symbolic (size checked at run time) */
} kiln_vm_instr_t;

/* One graph function. Its call frame (one allocation per call, KILN_ALIGNMENT-aligned) is
 *   [refcount | registers[num_registers] | scratch[max call arguments] | arena view tensors |
 *    arena (arena_size bytes, at off_arena, 64-byte aligned)]                                 */
typedef struct {
  const char* name;
  uint32_t flags;         /* KILN_VM_FUNCTION_PRIVATE: reachable only through IF */
  kiln_kernel_info_t sig; /* name, params and symbolic dims, for kiln_kernel_check_args */
  const int64_t* bounds;   /* format >= 3: num_sym + num_derived upper bounds (< 0 none) */
  uint32_t num_registers;
  uint64_t arena_size;
  uint32_t num_instrs;
  kiln_vm_instr_t* code;  /* owned: instructions then their operands, one block */
  size_t off_regs, off_scratch, off_arena, frame_size;
} kiln_vm_function_t;

/* Bytes at the start of a call's frame for its header (vm.c's frame_t); the registers follow. */
#define KILN_VM_FRAME_HEADER 32

typedef struct {
  const char* target;
  char* strings_block;           /* owned: every string, NUL-terminated */
  const char** strings;          /* owned */
  uint32_t num_strings;
  const kiln_kernel_info_t** kernels; /* owned array; entries point into the library's table */
  uint32_t num_kernels;
  const char** externs;          /* owned array of names (into strings_block) */
  uint32_t num_externs;
  kiln_tensor_t** constants;     /* owned array, one reference each (read-only blob views) */
  uint32_t num_constants;
  kiln_vm_function_t* functions; /* owned */
  uint32_t num_functions;
  uint32_t* public_functions;    /* owned: indices of the functions the VM module exposes */
  uint32_t num_public;
  kiln_kernel_param_t* params_pool; /* owned: every function's parameters */
  int64_t* dims_pool;               /* owned: their shapes */
  const char** names_pool;          /* owned: symbolic dimension names */
  kiln_derived_dim_t* derived_pool; /* owned: derived dimensions (format >= 3) */
  int64_t* bounds_pool;             /* owned: symbolic dimensions' upper bounds (format >= 3) */
} kiln_vm_program_t;

/* Validates the blob completely and decodes it; kernels are resolved in `info`, constants wrap
 * the blob and each holds a reference to `library` (which keeps the blob mapped). Errors name
 * what and where: KILN_ERR_INVALID_FORMAT, KILN_ERR_VERSION_MISMATCH, KILN_ERR_NOT_FOUND (a
 * kernel missing from the library), KILN_ERR_OUT_OF_MEMORY. */
kiln_status_t kiln_vm_program_load(kiln_module_t* library, const kiln_library_info_t* info,
                                   const uint8_t* blob, uint64_t blob_size,
                                   kiln_vm_program_t** out_program);
void kiln_vm_program_free(kiln_vm_program_t* program);

/* "LOAD_CONST" ... "FREE", or "opcode?" for others. */
const char* kiln_vm_opcode_name(uint32_t op);

/* Sets *out_nbytes to the bytes of a compact tensor of `shape` (extents >= 0) whose elements
 * are `elem_bits` wide (bits * lanes), ceil(numel * elem_bits / 8): sub-byte elements (int4,
 * int2) are packed. Returns 1; returns 0 when the size in bits does not fit in size_t. */
int kiln_vm_shape_nbytes(const int64_t* shape, int64_t ndim, uint64_t elem_bits,
                         uint64_t* out_nbytes);

#endif /* KILN_VM_H_ */
