/* vm.c — the "vm" module kind: a validated executable (vm.h) run by a register interpreter.
 *
 * Functions: init(device), profile(name, ...), and one per graph function. A call checks its
 * arguments like a kernel call, allocates one frame (registers, scratch, the tensors that view
 * the arena, and the arena itself), runs the straight-line bytecode and returns the RET value.
 * The frame is reference counted: a view of the arena that outlives the call (returned, or kept
 * by an external function) keeps the frame alive, so no tensor ever points at freed memory.
 *
 * Thread safety: the program is immutable after load; init publishes a new, immutable state
 * (device and resolved external functions) with one atomic compare-and-swap, and a call reads
 * the newest state once. Old states are kept until the module goes, so a call never sees its
 * state freed. Calls share nothing mutable. */
#include <string.h>

#include "vm.h"

typedef struct vm_state_t {
  struct vm_state_t* next; /* the state init replaced, freed with the module */
  DLDevice device;
  uint32_t num_externs;
  kiln_function_t* externs[]; /* one reference each */
} vm_state_t;

typedef struct {
  kiln_module_t base;
  kiln_module_t* library; /* one reference: the kernels and the blob live there */
  kiln_vm_program_t* program;
  vm_state_t* state;      /* newest first; NULL before init; accessed atomically */
  int32_t num_threads;    /* kiln_vm_set_num_threads: at most this many tasks per loop; 0 none */
  int use_host_pool;      /* kiln_vm_set_thread_pool: run parallel loops on host_pool */
  kiln_kernel_ctx_t host_pool;
  /* kiln_vm_set_arena: calls take their frames and outputs from this caller-provided memory,
   * bump-allocated from arena_top, which each call of a graph function resets (outputs live
   * until the next call); arena_busy admits one call at a time. */
  uint8_t* arena;
  size_t arena_bytes, arena_top;
  int32_t arena_busy;
  /* The last heap frame no view holds any more, for the next call (frame_take): a frame of a
   * big model is tens of MB, which malloc maps and unmaps on every call, and whose first
   * touches then fault every page in again (DenseNet-121: 10,000 faults, 20 ms a call).
   * Accessed atomically; freed with the module. */
  void* spare;
} vm_module_t;

enum { FN_INIT = -1, FN_PROFILE = -2, NUM_BUILTINS = 2 };

typedef struct {
  kiln_function_t base;
  int32_t index; /* a graph function, or FN_INIT / FN_PROFILE */
} vm_function_t;

typedef struct {
  int32_t refcount; /* the call, plus one per live arena view */
  int32_t in_arena; /* in the caller's arena (kiln_vm_set_arena): never freed here */
  vm_module_t* vm;  /* a heap frame: one reference on the module, whose spare slot takes it back */
  size_t bytes;     /* a heap frame's size */
} frame_t;
typedef char frame_header_fits[sizeof(frame_t) <= KILN_VM_FRAME_HEADER ? 1 : -1];

typedef struct {
  uint64_t calls, ns;
} prof_slot_t;

/* A heap frame of at least `bytes` for a call: the module's spare one when it is big enough,
 * else a new one (the spare, too small, is freed). NULL when out of memory. */
static frame_t* frame_take(vm_module_t* vm, size_t bytes) {
  frame_t* spare = kiln_atomic_take(&vm->spare);
  if (spare && spare->bytes >= bytes) return spare;
  kiln_mem_free(spare);
  frame_t* frame = kiln_mem_alloc(bytes);
  if (frame) frame->bytes = bytes;
  return frame;
}

static void frame_release(void* frame) {
  frame_t* fr = (frame_t*)frame;
  if (KILN_ATOMIC_DEC(&fr->refcount) != 0 || fr->in_arena) return;
  /* Back to the module's spare slot when it is empty (another call's frame may be there); the
   * module's reference goes after, so the module (and its slot) outlives the store. */
  vm_module_t* vm = fr->vm;
  void* empty = NULL;
  if (!KILN_ATOMIC_CAS(&vm->spare, &empty, (void*)fr)) kiln_mem_free(fr);
  kiln_module_release(&vm->base);
}

/* "forward: instruction 3 (CALL_KERNEL): <the message the failing step left>". */
static kiln_status_t context_error(const kiln_vm_function_t* f, uint32_t pc, kiln_status_t st) {
  char inner[1024];
  kiln_format(inner, sizeof inner, "%s", kiln_last_error());
  return kiln_error(st, "%s: instruction %u (%s): %s", f->name, (unsigned)pc,
                    kiln_vm_opcode_name(f->code[pc].op), inner);
}

#define ALIGN_UP(n) (((n) + KILN_ALIGNMENT - 1) & ~(size_t)(KILN_ALIGNMENT - 1))

/* `nbytes` of the caller's arena, KILN_ALIGNMENT-aligned; NULL (with the error set) when it is
 * full, which kiln_vm_set_arena's size check rules out for every shape the VM accepts. */
static void* arena_take(vm_module_t* vm, const char* fn, size_t nbytes) {
  size_t at = ALIGN_UP(vm->arena_top);
  if (at > vm->arena_bytes || nbytes > vm->arena_bytes - at) {
    kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: the arena of %zu bytes (kiln_vm_set_arena) is full: "
               "%zu more bytes needed at offset %zu", fn, vm->arena_bytes, nbytes, at);
    return NULL;
  }
  vm->arena_top = at + nbytes;
  return vm->arena + at;
}

/* An output tensor in the arena owns nothing: the next call reuses its memory. */
static void arena_keep(void* ctx) { (void)ctx; }

static void set_reg(kiln_value_t* reg, kiln_value_t value) {
  kiln_value_release(reg);
  *reg = value;
}

/* ALLOC_ARENA and ALLOC_OUTPUT: the tensor for `in` with its symbolic dims bound. */
static kiln_status_t alloc_tensor(vm_module_t* vm, const kiln_vm_function_t* f, uint32_t pc,
                                  const int64_t* sym, uint8_t* frame, kiln_value_t* out) {
  const kiln_vm_instr_t* in = &f->code[pc];
  int arena = in->op == KILN_OP_ALLOC_ARENA;
  const int64_t* dt = in->ops + (arena ? 2 : 1);
  DLDataType dtype = {(uint8_t)dt[0], (uint8_t)dt[1], (uint16_t)dt[2]};
  int32_t ndim = (int32_t)dt[3];
  int64_t shape[KILN_MAX_NDIM];
  for (int32_t d = 0; d < ndim; ++d) shape[d] = dt[4 + d] >= 0 ? dt[4 + d] : sym[-1 - dt[4 + d]];
  kiln_tensor_t* t = NULL;
  if (!arena && vm->arena) {
    uint64_t nbytes = 0;
    size_t head = ALIGN_UP(kiln_tensor_embedded_size(ndim));
    if (!kiln_vm_shape_nbytes(shape, ndim, (uint64_t)dtype.bits * dtype.lanes, &nbytes) ||
        nbytes > SIZE_MAX - head)
      return kiln_error(KILN_ERR_SHAPE_MISMATCH, "%s: instruction %u (ALLOC_OUTPUT): the output's "
                        "size overflows", f->name, (unsigned)pc);
    uint8_t* mem = arena_take(vm, f->name, head + (size_t)nbytes);
    if (!mem) return KILN_ERR_OUT_OF_MEMORY;
    t = kiln_tensor_init_embedded(mem, shape, ndim, dtype, mem + head, arena_keep, NULL);
  } else if (!arena) {
    kiln_status_t st = kiln_tensor_create(shape, ndim, dtype, (DLDevice){kDLCPU, 0}, &t);
    if (st != KILN_OK) return context_error(f, pc, st);
  } else {
    uint64_t offset = (uint64_t)in->ops[1], nbytes = 0;
    if (in->symbolic &&
        (!kiln_vm_shape_nbytes(shape, ndim, (uint64_t)dtype.bits * dtype.lanes, &nbytes) ||
         offset > f->arena_size || nbytes > f->arena_size - offset)) {
      char s[KILN_SHAPE_STRING];
      kiln_format_shape(s, sizeof s, shape, ndim, NULL);
      return kiln_error(KILN_ERR_SHAPE_MISMATCH, "%s: instruction %u (ALLOC_ARENA): a view of shape "
                        "%s at offset %llu does not fit in the arena of %llu bytes", f->name,
                        (unsigned)pc, s, (unsigned long long)offset,
                        (unsigned long long)f->arena_size);
    }
    KILN_ATOMIC_INC(&((frame_t*)frame)->refcount);
    t = kiln_tensor_init_embedded(frame + in->slot, shape, ndim, dtype,
                                  frame + f->off_arena + offset, frame_release, frame);
  }
  out->kind = KILN_VALUE_TENSOR;
  out->u.tensor = t;
  return KILN_OK;
}

/* IF's condition: a one-element bool or integer tensor on the CPU; *out_true = it is nonzero. */
static kiln_status_t read_condition(const kiln_vm_function_t* f, uint32_t pc, const kiln_value_t* v,
                                    int* out_true) {
  const DLTensor* t = v->kind == KILN_VALUE_TENSOR ? kiln_tensor_dltensor(v->u.tensor) : NULL;
  int64_t n = 1;
  for (int32_t d = 0; t && d < t->ndim; ++d) n *= t->shape[d];
  int integral = t && (t->dtype.code == kDLInt || t->dtype.code == kDLUInt || t->dtype.code == kDLBool) &&
                 t->dtype.lanes == 1 && (t->dtype.bits == 8 || t->dtype.bits == 16 ||
                                         t->dtype.bits == 32 || t->dtype.bits == 64);
  if (!t || n != 1 || !integral || t->device.device_type != kDLCPU)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: instruction %u (IF): the condition must be a "
                      "one-element bool or integer tensor on the cpu, got %s", f->name, (unsigned)pc,
                      t ? "a tensor of another dtype, size or device" : kiln_value_kind_name(v->kind));
  const uint8_t* p = (const uint8_t*)t->data + t->byte_offset;
  int nonzero = 0;
  for (int b = 0; b < t->dtype.bits / 8; ++b) nonzero |= p[b] != 0;
  *out_true = nonzero;
  return KILN_OK;
}

/* The thread pool this VM's kernels get: the host's or the runtime's, capped at its count. */
static void vm_kernel_ctx(const vm_module_t* vm, kiln_kernel_ctx_t* ctx) {
  if (vm->use_host_pool) *ctx = vm->host_pool;
  else kiln_thread_pool_kernel_ctx(ctx);
  if (vm->num_threads > 0 && ctx->num_threads > vm->num_threads) ctx->num_threads = vm->num_threads;
}

/* Runs graph function `f`; with `prof`, accumulates per-kernel / extern / opcode times. */
static kiln_status_t run(vm_module_t* vm, const vm_state_t* state,
                         const kiln_vm_function_t* f, const kiln_value_t* args, int32_t num_args,
                         prof_slot_t* prof, kiln_value_t* out_result) {
  const kiln_vm_program_t* prog = vm->program;
  int64_t sym[KILN_MAX_KERNEL_SYMS];
  kiln_status_t st = kiln_kernel_check_args(&f->sig, args, num_args, sym);
  if (st == KILN_OK) st = kiln_check_written_args(&f->sig, args, num_args);
  if (st != KILN_OK) return st;
  for (int32_t s = 0; f->bounds && s < f->sig.num_sym + f->sig.num_derived; ++s)
    if (f->bounds[s] >= 0 && sym[s] > f->bounds[s]) {
      /* A bound `c - n <= 0` is how Kiln records a lower bound n >= c (a torch.export Dim's min,
       * 1 <= t of a KV-cache decode): reported as one, of n. */
      const kiln_derived_dim_t* d = s < f->sig.num_sym ? NULL : &f->sig.derived[s - f->sig.num_sym];
      int lower = d && f->bounds[s] == 0 && d->op == KILN_DIM_SUB && d->flags == KILN_DIM_A_CONST;
      int64_t k = lower ? d->b : s;
      char dim[KILN_SHAPE_STRING];
      kiln_format_dim(dim, sizeof dim, &f->sig, -1 - k);
      return kiln_error(KILN_ERR_SHAPE_MISMATCH, "%s: symbolic dimension '%s' = %lld %s %lld (the %s "
                        "the model was compiled for)", f->name, dim, (long long)sym[k],
                        lower ? "is below its minimum" : "exceeds its bound",
                        (long long)(lower ? d->a : f->bounds[s]), lower ? "smallest" : "largest");
    }
  uint8_t* frame = vm->arena ? arena_take(vm, f->name, f->frame_size)
                            : (uint8_t*)frame_take(vm, f->frame_size);
  if (!frame && vm->arena) return KILN_ERR_OUT_OF_MEMORY;
  if (!frame)
    return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory allocating the call's %zu bytes "
                      "(registers and an arena of %llu bytes)", f->name, f->frame_size,
                      (unsigned long long)f->arena_size);
  ((frame_t*)frame)->refcount = 1;
  ((frame_t*)frame)->in_arena = vm->arena != NULL;
  ((frame_t*)frame)->vm = vm;
  if (!vm->arena) kiln_module_retain(&vm->base);
  kiln_value_t* regs = (kiln_value_t*)(frame + f->off_regs);
  kiln_value_t* scratch = (kiln_value_t*)(frame + f->off_scratch);
  memset(regs, 0, (size_t)f->num_registers * sizeof *regs); /* KILN_VALUE_NULL */
  for (int32_t i = 0; i < num_args; ++i) {
    regs[i] = args[i]; /* tensors (checked): the registers own a reference */
    kiln_tensor_retain(args[i].u.tensor);
  }
  uint32_t op_base = prog->num_kernels + prog->num_externs;
  kiln_kernel_ctx_t kctx;
  vm_kernel_ctx(vm, &kctx);
  int done = 0;
  for (uint32_t pc = 0; pc < f->num_instrs && !done && st == KILN_OK; ++pc) {
    const kiln_vm_instr_t* in = &f->code[pc];
    const int64_t* o = in->ops;
    uint64_t start = prof ? kiln_platform_now_ns() : 0;
    uint32_t slot = op_base + in->op;
    kiln_value_t v = {KILN_VALUE_NULL, {0}};
    switch (in->op) {
      case KILN_OP_LOAD_CONST:
        kiln_tensor_retain(prog->constants[o[1]]);
        v.kind = KILN_VALUE_TENSOR;
        v.u.tensor = prog->constants[o[1]];
        set_reg(&regs[o[0]], v);
        break;
      case KILN_OP_ALLOC_ARENA:
      case KILN_OP_ALLOC_OUTPUT:
        st = alloc_tensor(vm, f, pc, sym, frame, &v);
        if (st == KILN_OK) set_reg(&regs[o[0]], v);
        break;
      case KILN_OP_CALL_KERNEL: {
        const kiln_kernel_info_t* k = prog->kernels[o[0]];
        int32_t n = (int32_t)o[1];
        for (int32_t j = 0; j < n; ++j) scratch[j] = regs[o[2 + j]];
        slot = (uint32_t)o[0];
        /* The checked call refuses read-only tensors (constants) for written parameters. */
        st = kiln_kernel_call_checked(k, scratch, n, &kctx);
        if (st != KILN_OK) st = context_error(f, pc, st);
        break;
      }
      case KILN_OP_CALL_EXTERN:
      case KILN_OP_CALL_PACKED: { /* CALL_PACKED: dst first; the function's result goes there */
        int packed = in->op == KILN_OP_CALL_PACKED;
        o += packed;
        int32_t n = (int32_t)o[1];
        for (int32_t j = 0; j < n; ++j) scratch[j] = regs[o[2 + j]];
        slot = prog->num_kernels + (uint32_t)o[0];
        st = kiln_function_call(state->externs[o[0]], scratch, n, &v);
        if (st != KILN_OK) st = context_error(f, pc, st);
        /* CALL_EXTERN is destination-passing style: its result (null on failure) is dropped. */
        if (packed) set_reg(&regs[in->ops[0]], v);
        else kiln_value_release(&v);
        break;
      }
      case KILN_OP_MAKE_TUPLE: {
        int32_t n = (int32_t)o[1];
        /* In a caller's arena the tuple is too, and borrows its items (arena tensors and the
         * caller's arguments), which live as long as the call's outputs. */
        void* mem = vm->arena ? arena_take(vm, f->name, kiln_tuple_embedded_size(n)) : NULL;
        kiln_tuple_t* t = mem ? kiln_tuple_init_borrowed(mem, n) : vm->arena ? NULL : kiln_tuple_alloc(n);
        if (!t) {
          st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: instruction %u (MAKE_TUPLE): out of memory",
                          f->name, (unsigned)pc);
          break;
        }
        kiln_value_t* items = kiln_tuple_items(t);
        for (int32_t j = 0; j < n && st == KILN_OK; ++j)
          if (mem) items[j] = regs[o[2 + j]];
          else st = kiln_value_copy(&regs[o[2 + j]], &items[j]);
        v.kind = KILN_VALUE_TUPLE;
        v.u.tuple = t;
        if (st == KILN_OK) set_reg(&regs[o[0]], v);
        else kiln_value_release(&v);
        break;
      }
      case KILN_OP_GET_ITEM: {
        const kiln_value_t* src = &regs[o[1]];
        if (src->kind != KILN_VALUE_TUPLE || o[2] >= kiln_tuple_size(src->u.tuple)) {
          st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: instruction %u (GET_ITEM): register %lld "
                          "holds %s %s, which has no item %lld", f->name, (unsigned)pc,
                          (long long)o[1], src->kind == KILN_VALUE_TUPLE ? "a" : "a value of kind",
                          kiln_value_kind_name(src->kind), (long long)o[2]);
          break;
        }
        st = kiln_tuple_get_item(src->u.tuple, (int32_t)o[2], &v);
        if (st == KILN_OK) set_reg(&regs[o[0]], v);
        break;
      }
      case KILN_OP_MOVE:
        st = kiln_value_copy(&regs[o[1]], &v);
        if (st == KILN_OK) set_reg(&regs[o[0]], v);
        break;
      case KILN_OP_FREE: /* the value's last use is past: drop this register's reference */
        kiln_value_release(&regs[o[0]]);
        break;
      case KILN_OP_IF: {
        /* Recursion is bounded: the loader checked the IF call graph (no cycles, depth <= 64). */
        int taken = 0;
        st = read_condition(f, pc, &regs[o[1]], &taken);
        if (st != KILN_OK) break;
        int32_t n = (int32_t)o[4];
        for (int32_t j = 0; j < n; ++j) scratch[j] = regs[o[5 + j]];
        st = run(vm, state, &prog->functions[taken ? o[2] : o[3]], scratch, n, prof, &v);
        if (st == KILN_OK) set_reg(&regs[o[0]], v);
        else st = context_error(f, pc, st);
        break;
      }
      default: /* RET */
        *out_result = regs[o[0]];
        regs[o[0]].kind = KILN_VALUE_NULL;
        done = 1;
        break;
    }
    if (prof) {
      prof[slot].calls += 1;
      prof[slot].ns += kiln_platform_now_ns() - start;
    }
  }
  for (uint32_t r = 0; r < f->num_registers; ++r) kiln_value_release(&regs[r]);
  frame_release(frame);
  return st;
}

/* ---- init, profile, graph functions ------------------------------------------------------------ */

static void free_state(vm_state_t* s) {
  for (uint32_t i = 0; i < s->num_externs; ++i) kiln_function_release(s->externs[i]);
  kiln_mem_free(s);
}

static kiln_status_t vm_init(vm_module_t* vm, const kiln_value_t* args, int32_t num_args) {
  DLDevice device = {kDLCPU, 0};
  if (num_args > 1)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "init: expected a device (or no argument), got %d "
                      "arguments", (int)num_args);
  if (num_args == 1) {
    if (args[0].kind != KILN_VALUE_DEVICE)
      return kiln_error(KILN_ERR_INVALID_ARGUMENT, "init: argument 0 expected a device, got %s",
                        kiln_value_kind_name(args[0].kind));
    device = args[0].u.device;
  }
  if (device.device_type != kDLCPU) {
    char name[KILN_SMALL_STRING];
    kiln_format_device(name, sizeof name, device);
    return kiln_error(KILN_ERR_UNSUPPORTED, "init: device %s is not supported; this runtime runs "
                      "executables on cpu", name);
  }
  const kiln_vm_program_t* prog = vm->program;
  vm_state_t* s = kiln_mem_calloc(sizeof *s + (size_t)prog->num_externs * sizeof s->externs[0]);
  if (!s) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "init: out of memory");
  s->device = device;
  for (uint32_t i = 0; i < prog->num_externs; ++i) {
    kiln_status_t st = kiln_get_registered_function(prog->externs[i], &s->externs[i]);
    if (st != KILN_OK) {
      if (st == KILN_ERR_NOT_FOUND)
        kiln_error(st, "init: external function '%s' is not registered", prog->externs[i]);
      free_state(s);
      return st;
    }
    s->num_externs = i + 1;
  }
  s->next = KILN_ATOMIC_LOAD(&vm->state);
  while (!KILN_ATOMIC_CAS(&vm->state, &s->next, s)) {
  }
  return KILN_OK;
}

/* A function the module exposes (private ones are reached only through IF). */
static int32_t find_function(const kiln_vm_program_t* prog, const char* name) {
  for (uint32_t i = 0; i < prog->num_public; ++i)
    if (strcmp(prog->functions[prog->public_functions[i]].name, name) == 0)
      return (int32_t)prog->public_functions[i];
  return -1;
}

static kiln_status_t not_initialized(const char* name) {
  return kiln_error(KILN_ERR_INVALID_STATE, "%s: the virtual machine is not initialized; call "
                    "init(device) first", name);
}

/* One profile row: (name, kind, calls, total_us). */
static kiln_status_t make_row(const char* name, const char* kind, const prof_slot_t* s,
                              kiln_value_t* out) {
  kiln_value_t items[4];
  items[0].kind = items[1].kind = KILN_VALUE_STRING;
  items[0].u.s = name;
  items[1].u.s = kind;
  items[2].kind = KILN_VALUE_INT;
  items[2].u.i = (int64_t)s->calls;
  items[3].kind = KILN_VALUE_FLOAT;
  items[3].u.f = (double)s->ns / 1000.0;
  out->kind = KILN_VALUE_TUPLE;
  return kiln_tuple_create(items, 4, &out->u.tuple);
}

static kiln_status_t vm_profile(vm_module_t* vm, const kiln_value_t* args, int32_t num_args,
                                kiln_value_t* out_result) {
  const kiln_vm_program_t* prog = vm->program;
  if (num_args < 1 || args[0].kind != KILN_VALUE_STRING)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "profile: argument 0 must be the name of a "
                      "function (a string), got %s", num_args < 1 ? "nothing" : kiln_value_kind_name(args[0].kind));
  int32_t index = find_function(prog, args[0].u.s);
  if (index < 0) return kiln_error(KILN_ERR_NOT_FOUND, "profile: no function '%s'", args[0].u.s);
  const vm_state_t* state = KILN_ATOMIC_LOAD(&vm->state);
  if (!state) return not_initialized("profile");
  uint32_t num_slots = prog->num_kernels + prog->num_externs + KILN_NUM_OPCODES;
  prof_slot_t* prof = kiln_mem_calloc((size_t)(num_slots + 1) * sizeof *prof);
  if (!prof) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "profile: out of memory");
  kiln_value_t result = {KILN_VALUE_NULL, {0}};
  /* A call like any other for the thread pool (its workers' in-call spin), so that the profile
   * times what a plain call runs. */
  kiln_thread_pool_call_begin();
  uint64_t start = kiln_platform_now_ns();
  kiln_status_t st = run(vm, state, &prog->functions[index], args + 1, num_args - 1, prof, &result);
  prof[num_slots].calls = 1;
  prof[num_slots].ns = kiln_platform_now_ns() - start;
  kiln_thread_pool_call_end();
  kiln_value_release(&result);
  uint32_t rows = 0;
  for (uint32_t i = 0; i <= num_slots; ++i) rows += prof[i].calls > 0;
  kiln_tuple_t* table = st == KILN_OK ? kiln_tuple_alloc((int32_t)rows) : NULL;
  if (st == KILN_OK && !table) st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "profile: out of memory");
  for (uint32_t i = 0, r = 0; i <= num_slots && st == KILN_OK; ++i) {
    if (!prof[i].calls) continue;
    uint32_t op = i - prog->num_kernels - prog->num_externs;
    if (i < prog->num_kernels)
      st = make_row(prog->kernels[i]->name, "kernel", &prof[i], &kiln_tuple_items(table)[r++]);
    else if (i < prog->num_kernels + prog->num_externs)
      st = make_row(prog->externs[i - prog->num_kernels], "extern", &prof[i], &kiln_tuple_items(table)[r++]);
    else if (i < num_slots)
      st = make_row(kiln_vm_opcode_name(op), "vm", &prof[i], &kiln_tuple_items(table)[r++]);
    else
      st = make_row("total", "total", &prof[i], &kiln_tuple_items(table)[r++]);
  }
  kiln_mem_free(prof);
  if (st != KILN_OK) {
    kiln_tuple_release(table);
    return st;
  }
  out_result->kind = KILN_VALUE_TUPLE;
  out_result->u.tuple = table;
  return KILN_OK;
}

static kiln_status_t vm_call(kiln_function_t* function, const kiln_value_t* args,
                             int32_t num_args, kiln_value_t* out_result) {
  vm_module_t* vm = (vm_module_t*)function->module;
  int32_t index = ((vm_function_t*)function)->index;
  if (index == FN_INIT) return vm_init(vm, args, num_args);
  if (index == FN_PROFILE) return vm_profile(vm, args, num_args, out_result);
  const kiln_vm_function_t* f = &vm->program->functions[index];
  const vm_state_t* state = KILN_ATOMIC_LOAD(&vm->state);
  if (!state) return not_initialized(f->name);
  if (!vm->arena) {
    kiln_thread_pool_call_begin();
    kiln_status_t st = run(vm, state, f, args, num_args, NULL, out_result);
    kiln_thread_pool_call_end();
    return st;
  }
  /* An earlier call's output as an argument: this call would overwrite it while reading it. */
  for (int32_t i = 0; i < num_args; ++i)
    if (args[i].kind == KILN_VALUE_TENSOR &&
        (uintptr_t)kiln_tensor_dltensor(args[i].u.tensor)->data - (uintptr_t)vm->arena < vm->arena_bytes)
      return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: argument %d is an earlier call's output in "
                        "the VM's arena", f->name, (int)i);
  int32_t idle = 0;
  if (!KILN_ATOMIC_CAS(&vm->arena_busy, &idle, 1))
    return kiln_error(KILN_ERR_INVALID_STATE, "%s: another call is running in this VM's arena "
                      "(kiln_vm_set_arena admits one call at a time)", f->name);
  vm->arena_top = 0;
  kiln_status_t st = run(vm, state, f, args, num_args, NULL, out_result);
  int32_t busy = 1;
  KILN_ATOMIC_CAS(&vm->arena_busy, &busy, 0);
  return st;
}

static void vm_function_destroy(kiln_function_t* function) { kiln_mem_free(function); }

static const kiln_function_vtable_t kVmFunctionVtable = {vm_call, vm_function_destroy};

/* ---- the module ------------------------------------------------------------------------------- */

static void vm_destroy(kiln_module_t* module) {
  vm_module_t* vm = (vm_module_t*)module;
  for (vm_state_t* s = vm->state; s;) {
    vm_state_t* next = s->next;
    free_state(s);
    s = next;
  }
  kiln_mem_free(vm->spare);
  kiln_vm_program_free(vm->program);
  kiln_module_release(vm->library);
  kiln_mem_free(vm);
}

static int32_t vm_num_functions(const kiln_module_t* module) {
  return NUM_BUILTINS + (int32_t)((const vm_module_t*)module)->program->num_public;
}

static const char* vm_function_name(const kiln_module_t* module, int32_t index) {
  if (index == 0) return "init";
  if (index == 1) return "profile";
  const kiln_vm_program_t* prog = ((const vm_module_t*)module)->program;
  return prog->functions[prog->public_functions[index - NUM_BUILTINS]].name;
}

static kiln_status_t vm_get_function(kiln_module_t* module, const char* name,
                                     kiln_function_t** out_function) {
  vm_module_t* vm = (vm_module_t*)module;
  int32_t index;
  if (strcmp(name, "init") == 0) index = FN_INIT;
  else if (strcmp(name, "profile") == 0) index = FN_PROFILE;
  else if ((index = find_function(vm->program, name)) < 0) return KILN_ERR_NOT_FOUND;
  vm_function_t* fn = kiln_mem_alloc(sizeof *fn);
  if (!fn) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory looking up '%s'", name);
  kiln_function_init(&fn->base, &kVmFunctionVtable,
                     index >= 0 ? vm->program->functions[index].name
                                : index == FN_INIT ? "init" : "profile",
                     module);
  fn->index = index;
  *out_function = &fn->base;
  return KILN_OK;
}

static const kiln_module_vtable_t kVmVtable = {"vm", vm_destroy, vm_num_functions,
                                               vm_function_name, vm_get_function};

kiln_status_t kiln_vm_module_create(kiln_module_t* library, const kiln_library_info_t* info,
                                    const uint8_t* blob, uint64_t blob_size,
                                    kiln_module_t** out_module) {
  kiln_vm_program_t* program = NULL;
  kiln_status_t st = kiln_vm_program_load(library, info, blob, blob_size, &program);
  if (st != KILN_OK) return st;
  vm_module_t* vm = kiln_mem_alloc(sizeof *vm);
  if (!vm) {
    kiln_vm_program_free(program);
    return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory loading an executable");
  }
  kiln_module_init(&vm->base, &kVmVtable, library->name);
  kiln_module_retain(library);
  vm->library = library;
  vm->program = program;
  vm->state = NULL;
  vm->num_threads = 0;
  vm->use_host_pool = 0;
  memset(&vm->host_pool, 0, sizeof vm->host_pool);
  vm->arena = NULL;
  vm->arena_bytes = vm->arena_top = 0;
  vm->arena_busy = 0;
  vm->spare = NULL;
  *out_module = &vm->base;
  return KILN_OK;
}

static vm_module_t* as_vm(kiln_module_t* module, const char* what) {
  if (module == NULL || module->vtable != &kVmVtable) {
    kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: expected a VM module (from load_executable), got %s",
               what, module ? kiln_module_kind(module) : "NULL");
    return NULL;
  }
  return (vm_module_t*)module;
}

kiln_status_t kiln_vm_set_num_threads(kiln_module_t* module, int32_t num_threads) {
  vm_module_t* vm = as_vm(module, "kiln_vm_set_num_threads");
  if (vm == NULL) return KILN_ERR_INVALID_ARGUMENT;
  if (num_threads < 0)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_vm_set_num_threads: %d is negative",
                      (int)num_threads);
  vm->num_threads = num_threads;
  return KILN_OK;
}

kiln_status_t kiln_vm_set_thread_pool(kiln_module_t* module, const kiln_thread_pool_t* pool) {
  vm_module_t* vm = as_vm(module, "kiln_vm_set_thread_pool");
  if (vm == NULL) return KILN_ERR_INVALID_ARGUMENT;
  if (pool == NULL) {
    vm->use_host_pool = 0;
    return KILN_OK;
  }
  if (pool->num_threads < 1 || pool->parallel_launch == NULL)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_vm_set_thread_pool: the pool needs "
                      "num_threads >= 1 (got %d) and a parallel_launch function%s",
                      (int)pool->num_threads, pool->parallel_launch ? "" : " (got NULL)");
  vm->host_pool.abi_version = KILN_KERNEL_ABI_VERSION;
  vm->host_pool.num_threads = pool->num_threads;
  vm->host_pool.pool = pool->pool;
  vm->host_pool.parallel_launch = pool->parallel_launch;
  vm->use_host_pool = 1;
  return KILN_OK;
}

/* ---- a caller-provided arena ------------------------------------------------------------------- */

/* What one call of `f` takes from the arena: its frame, every output it allocates, and for each
 * IF the larger of its branches' needs (nothing is given back before the call ends). Output
 * shapes must be static; recursion is bounded by the loader's IF depth check. */
static kiln_status_t arena_need(const kiln_vm_program_t* prog, const kiln_vm_function_t* f,
                                uint64_t* out) {
  uint64_t n = ALIGN_UP(f->frame_size) + KILN_ALIGNMENT;
  for (uint32_t pc = 0; pc < f->num_instrs; ++pc) {
    const kiln_vm_instr_t* in = &f->code[pc];
    if (in->op == KILN_OP_ALLOC_OUTPUT) {
      const int64_t* dt = in->ops + 1;
      uint64_t nbytes = 0;
      if (in->symbolic ||
          !kiln_vm_shape_nbytes(dt + 4, (int32_t)dt[3], (uint64_t)dt[1] * (uint64_t)dt[2], &nbytes))
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: an output of symbolic shape cannot be placed "
                          "in a caller's arena", f->name);
      n += ALIGN_UP(kiln_tensor_embedded_size((int32_t)dt[3])) + ALIGN_UP(nbytes) + KILN_ALIGNMENT;
    } else if (in->op == KILN_OP_MAKE_TUPLE) {
      n += ALIGN_UP(kiln_tuple_embedded_size((int32_t)in->ops[1])) + KILN_ALIGNMENT;
    } else if (in->op == KILN_OP_IF) {
      uint64_t a = 0, b = 0;
      kiln_status_t st = arena_need(prog, &prog->functions[in->ops[2]], &a);
      if (st == KILN_OK) st = arena_need(prog, &prog->functions[in->ops[3]], &b);
      if (st != KILN_OK) return st;
      n += a > b ? a : b;
    }
  }
  *out = n;
  return KILN_OK;
}

kiln_status_t kiln_vm_arena_bytes(kiln_module_t* module, uint64_t* out_nbytes) {
  vm_module_t* vm = as_vm(module, "kiln_vm_arena_bytes");
  if (vm == NULL) return KILN_ERR_INVALID_ARGUMENT;
  if (out_nbytes == NULL)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_vm_arena_bytes: out_nbytes is NULL");
  const kiln_vm_program_t* prog = vm->program;
  uint64_t most = 0;
  for (uint32_t i = 0; i < prog->num_public; ++i) {
    uint64_t n = 0;
    kiln_status_t st = arena_need(prog, &prog->functions[prog->public_functions[i]], &n);
    if (st != KILN_OK) return st;
    if (n > most) most = n;
  }
  *out_nbytes = most;
  return KILN_OK;
}

kiln_status_t kiln_vm_set_arena(kiln_module_t* module, void* arena, size_t nbytes) {
  vm_module_t* vm = as_vm(module, "kiln_vm_set_arena");
  if (vm == NULL) return KILN_ERR_INVALID_ARGUMENT;
  if (arena == NULL) {
    vm->arena = NULL;
    vm->arena_bytes = 0;
    return KILN_OK;
  }
  if ((uintptr_t)arena % KILN_ALIGNMENT != 0)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_vm_set_arena: the arena must be %d-byte "
                      "aligned", KILN_ALIGNMENT);
  uint64_t need = 0;
  kiln_status_t st = kiln_vm_arena_bytes(module, &need);
  if (st != KILN_OK) return st;
  if ((uint64_t)nbytes < need)
    return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_vm_set_arena: the arena has %zu bytes, the "
                      "executable's functions need %llu", nbytes, (unsigned long long)need);
  vm->arena = arena;
  vm->arena_bytes = nbytes;
  vm->arena_top = 0;
  return KILN_OK;
}
