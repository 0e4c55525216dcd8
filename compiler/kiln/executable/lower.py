"""Lower graph functions to VM bytecode (``docs/executable-format.md``, BYTECODE).

Input: an IRModule after the passes, whose graph functions bind only ``call_tir``,
``call_dps_packed``, constants, tuples, tuple items and variable aliases. Output: an
``ExecutableSpec`` (kernels, externs, deduplicated constants, one ``FunctionSpec`` per graph
function) plus the memory plan of each function.

How one function becomes code:

- parameters take registers ``0..P-1``; every other value gets a fresh register (aliases
  ``y = x`` reuse ``x``'s, so they cost nothing);
- a constant is loaded once, where it is first used (``LOAD_CONST``); identical arrays share
  one pool entry across the whole module;
- ``call_tir(f, args)`` allocates each output, then ``CALL_KERNEL f, args + outputs``; a tuple
  result is ``MAKE_TUPLE`` of the outputs. ``call_dps_packed`` is the same with
  ``CALL_EXTERN``;
- an output lives in the arena (``ALLOC_ARENA`` at the offset ``plan.plan_memory`` chose) when
  its shape is static and it cannot escape the call; it is ``ALLOC_OUTPUT`` when it may be
  returned (directly, through an alias, or inside a returned tuple) or its shape is symbolic;
- tuples are ``MAKE_TUPLE`` / ``GET_ITEM``; the body ends with ``RET``;
- a register that may hold heap memory (an ``ALLOC_OUTPUT`` tensor or an ``IF`` result, or a
  tuple, item or alias of one) and is not returned is released with ``FREE`` right after the
  instruction that reads it last, so a symbolic-size intermediate is freed as soon as it is
  dead, not when the call returns;
- ``call_packed(f, args)`` is ``CALL_PACKED dst, f, args``: the external function allocates and
  returns its result (the string operators, docs/strings.md), which nothing plans; a string
  constant is its block (a uint8 constant) made a value by ``kiln_strings.from_block``;
- ``call_if(cond, then_f, else_f, args)`` is ``IF dst, cond, then_f, else_f, args``: the VM
  calls one of the two graph functions (marked private when their ``"private"`` attribute is
  set). The callee allocates its own results, and may return one of its arguments, so the
  result is treated as possibly aliasing every argument: those stay live (and escape) with it.
"""
from __future__ import annotations

import hashlib
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..ir.derived_dims import DimError, DimTable, upper_bound
from ..ir.expr import Var
from ..ir.function import IRModule, PrimFunc
from ..ir.graph import (BUILTIN_OPS, Call, Constant, ExternFunc, Function, GlobalVar, GraphExpr, GraphVar,
                        TensorType, Tuple as GTuple, TupleGetItem, TupleType)
from .format import (RESERVED_NAMES, ExecutableSpec, FunctionSpec, Instruction, Op, ParamSpec,
                     dtype_to_dl, tensor_nbytes)
from .views import plan_views
from .plan import Alloc, MemoryPlan, plan_memory


class LowerError(ValueError):
    """A graph function that cannot become bytecode; the message names the function and binding."""


BUILTINS = BUILTIN_OPS
# The string library's function that makes a string constant's block a value (docs/strings.md).
STRING_FROM_BLOCK = "kiln_strings.from_block"


class Tables:
    """The module-wide tables of the executable: kernels, externs, constants (deduplicated)."""

    def __init__(self):
        self.kernels: List[str] = []
        self.externs: List[str] = []
        self.constants: List[np.ndarray] = []
        self._const_keys: Dict[tuple, List[int]] = {}
        self.functions: Dict[str, int] = {}  # graph function name -> index in the executable

    @staticmethod
    def _index(table: List[str], name: str) -> int:
        if name not in table:
            table.append(name)
        return table.index(name)

    def kernel(self, name: str) -> int:
        return self._index(self.kernels, name)

    def extern(self, name: str) -> int:
        return self._index(self.externs, name)

    def constant(self, data: np.ndarray) -> int:
        """Pool index of ``data``; an identical array (dtype, shape, bytes) already pooled is reused."""
        arr = np.asarray(data, order="C")  # ascontiguousarray would turn 0-d into 1-d
        # Its bytes hashed in place (arr is C-ordered): tobytes would copy every weight.
        key = (arr.dtype.str, arr.shape, hashlib.sha256(arr.reshape(-1).view(np.uint8)).digest())
        for k in self._const_keys.get(key, []):
            if np.array_equal(self.constants[k], arr):
                return k
        self.constants.append(arr)
        self._const_keys.setdefault(key, []).append(len(self.constants) - 1)
        return len(self.constants) - 1


def _flatten(tree) -> frozenset:
    """All allocation ids a value may refer to (a tree: frozenset leaf or tuple of trees)."""
    if isinstance(tree, tuple):
        return frozenset().union(*[_flatten(t) for t in tree]) if tree else frozenset()
    return tree


def _tensor_types(ty, what: str) -> List[TensorType]:
    """The tensors a call writes: one for a TensorType, each field of a flat TupleType."""
    if isinstance(ty, TensorType):
        return [ty]
    if isinstance(ty, TupleType) and all(isinstance(f, TensorType) for f in ty.fields):
        return list(ty.fields)
    raise LowerError(f"{what}: output type must be a tensor or a tuple of tensors, got {ty!r}")


def _op_hint(op: str) -> str:
    return (f"operator call '{op}' must be legalized to call_tir before compiling; run a pipeline "
            f"first (kiln.get_pipeline('zero')(mod)) or pass kiln.compile(mod, pipeline='zero')")


class _FunctionLowering:
    """Lowers one graph function. ``analyse`` finds allocations, lifetimes and escapes;
    ``emit`` writes the code once the plan is known."""

    def __init__(self, name: str, func: Function, tables: Tables, prim_funcs: Dict[str, PrimFunc]):
        self.name, self.func, self.tables, self.prim_funcs = name, func, tables, prim_funcs
        # Plain symbolic dims first (bound from the arguments), so derived ones number after them.
        self.sym_names: List[str] = []
        for p in func.params:
            for d in (p.ty.shape or ()) if isinstance(p.ty, TensorType) else ():
                if isinstance(d, Var) and d.name not in self.sym_names:
                    self.sym_names.append(d.name)
        self.table = DimTable(self.sym_names)
        # Upper bounds of symbolic dims ("kiln.bounds" attribute: nn export bounds=, --bound):
        # symbolic-size intermediates are then planned in the arena at their largest size.
        self.bounds: Dict[str, int] = {k: int(v) for k, v in (func.attr("kiln.bounds") or ())}
        # Limits the frontend assumed (dim expression, largest value): checked, not planned for.
        self.limits = list(func.attr("kiln.limits") or ())
        self.params = [self._param(i, p) for i, p in enumerate(func.params)]
        self.inplace_src: Dict[GraphVar, GraphVar] = {}  # in-place results -> the parameter
        self.written: set = set()                          # indices of parameters written
        self.bindings = list(func.bindings())
        # Filled by analyse(): per call binding, the allocation ids of its outputs.
        self.outputs: Dict[int, List[int]] = {}
        self.alloc_types: Dict[int, TensorType] = {}
        self.plan: Optional[MemoryPlan] = None
        self.arena_ids: set = set()
        # Concats and slices the memory plan does (views.py): binding -> the view it becomes.
        self.elided: Dict[int, int] = {}

    def _where(self, i: int) -> str:
        if i >= len(self.bindings):
            return f"graph function '{self.name}', return value"
        return f"graph function '{self.name}', binding {i} '{self.bindings[i].var.name}'"

    # ---- signature ---------------------------------------------------------------------
    def _param(self, i: int, p: GraphVar) -> ParamSpec:
        ty = p.ty
        if not isinstance(ty, TensorType) or ty.shape is None:
            raise LowerError(f"graph function '{self.name}': parameter {i} '{p.name}' has type {ty!r}; "
                             "executable functions take tensors of known rank")
        names = self.table.names
        shape = []
        for axis, d in enumerate(ty.shape):
            try:
                code = self.table.code(d, f"graph function '{self.name}': parameter {i} '{p.name}' axis {axis}")
            except DimError as e:
                raise LowerError(str(e)) from None
            shape.append(code if code >= 0 else names()[-1 - code])
        return ParamSpec(p.name, ty.dtype, shape)

    def _dims(self, ty: TensorType, what: str) -> List[int]:
        """Shape of an allocation as bytecode dims (>= 0 fixed, -1-k symbolic k)."""
        if ty.shape is None:
            raise LowerError(f"{what}: output of unknown rank cannot be allocated")
        try:
            return [self.table.code(d, f"{what}: output") for d in ty.shape]
        except DimError as e:
            raise LowerError(f"{e}, so the VM cannot know it") from None

    def _inplace_arg(self, i: int, call: Call) -> int:
        """The index of the argument an in-place ``call_tir`` writes; marks the parameter it
        comes from (directly or through earlier in-place results) as written."""
        fields = call.args[1].fields if isinstance(call.args[1], GTuple) else ()
        k = int(call.attr("inplace"))
        if call.op != "call_tir" or not 0 <= k < len(fields):
            raise LowerError(f"{self._where(i)}: inplace={k} names no argument of the call_tir")
        src = fields[k]
        src = self.inplace_src.get(src, src)
        if src not in self.func.params:
            raise LowerError(f"{self._where(i)}: a call_tir writes argument {k} in place, which is not "
                             "a parameter of the function (only parameters may be updated in place)")
        self.inplace_src[self.bindings[i].var] = src
        self.written.add(list(self.func.params).index(src))
        return k

    def _bounds_table(self) -> List[int]:
        """One bound per dimension number (-1 none): the bounds given for symbolic dims, and
        the limits the frontend assumed (which the VM must enforce: the kernels rely on them)."""
        if not self.bounds and not self.limits:
            return []
        codes = [(self.table.code(self._sym(k), "bound"), v)
                 for k, v in self.bounds.items() if k in self.sym_names]
        for e, v in self.limits:
            try:
                codes.append((self.table.code(e, "limit"), int(v)))
            except DimError as err:
                raise LowerError(f"graph function '{self.name}': the import assumed {e} <= {v}, which "
                                 f"the runtime cannot check: {err}") from None
        out = [-1] * (len(self.sym_names) + len(self.table.derived))
        for code, v in codes:
            if code >= 0:  # a constant: the assumption holds or fails at compile time
                if code > v:
                    raise LowerError(f"graph function '{self.name}': a dimension of {code} exceeds its limit {v}")
                continue
            k = -1 - code
            out[k] = v if out[k] < 0 else min(out[k], v)
        return out

    def _sym(self, name: str):
        for p in self.func.params:
            for d in (p.ty.shape or ()) if isinstance(p.ty, TensorType) else ():
                if isinstance(d, Var) and d.name == name:
                    return d
        raise KeyError(name)

    # ---- analysis: allocations, live ranges, escapes -----------------------------------
    def analyse(self) -> None:
        trees: Dict[GraphVar, object] = {p: frozenset() for p in self.func.params}
        first: Dict[int, int] = {}
        last: Dict[int, int] = {}

        def tree(e: GraphExpr, i: int):
            if isinstance(e, GraphVar):
                if e not in trees:
                    raise LowerError(f"{self._where(i)}: uses '{e.name}' before it is defined")
                return trees[e]
            if isinstance(e, GTuple):
                return tuple(tree(f, i) for f in e.fields)
            if isinstance(e, TupleGetItem):
                t = tree(e.tuple_value, i)
                return t[e.index] if isinstance(t, tuple) and e.index < len(t) else _flatten(t)
            if isinstance(e, Constant):
                return frozenset()
            if isinstance(e, Call):
                raise LowerError(f"{self._where(i)}: nested call '{e.op}' in an argument; "
                                 "bind every call to a variable first (normalize the function)")
            raise LowerError(f"{self._where(i)}: cannot lower a {type(e).__name__} value")

        for i, b in enumerate(self.bindings):
            v = b.value
            if isinstance(v, Call):
                if v.op not in BUILTINS:
                    raise LowerError(f"{self._where(i)}: {_op_hint(v.op)}")
                if v.op == "call_if":
                    trees[b.var] = self._analyse_if(i, v, tree, last)
                    continue
                if v.op == "call_packed":
                    # The function allocates its result (a new heap value): nothing to plan.
                    for a in _flatten(tree(v.args[1], i)):
                        last[a] = i
                    self.outputs[i] = []
                    trees[b.var] = tuple(frozenset() for _ in v.ty.fields) \
                        if isinstance(v.ty, TupleType) else frozenset()
                    continue
                args = tree(v.args[1], i)
                for a in _flatten(args):
                    last[a] = i
                if v.attr("inplace") is not None:
                    # call_tir writing argument `inplace` in place: no output of its own; the
                    # result is that argument (an alias). A parameter written so is declared.
                    k = self._inplace_arg(i, v)
                    self.outputs[i] = []
                    trees[b.var] = tree(v.args[1].fields[k], i)
                    continue
                ids = []
                for ty in _tensor_types(v.ty, self._where(i)):
                    k = len(self.alloc_types)
                    self.alloc_types[k] = ty
                    first[k] = last[k] = i
                    ids.append(k)
                self.outputs[i] = ids
                trees[b.var] = frozenset(ids[:1]) if isinstance(v.ty, TensorType) else \
                    tuple(frozenset([k]) for k in ids)
            else:
                t = tree(v, i)
                for a in _flatten(t):
                    last[a] = max(last[a], i)
                trees[b.var] = t
        escaping = _flatten(tree(self.func.body, len(self.bindings)))
        # Concats and slices done in place: a container (a concat's result, a slice's input) is
        # live from its first member's kernel to the last read of it or of a member.
        views, self.elided = plan_views(self.bindings, self.outputs, self.alloc_types,
                                        self.prim_funcs, escaping)
        for k, (c, _) in views.items():
            first[c] = min(first[c], first[k])
            last[c] = max(last[c], last[k])

        allocs = []
        for k, ty in self.alloc_types.items():
            if k in views:
                continue
            shape = ty.static_shape()
            if shape is None and self.bounds and ty.shape is not None:
                # Planned at its largest size; the VM checks the view fits at run time.
                ub = [upper_bound(d, self.bounds) for d in ty.shape]
                shape = None if None in ub else tuple(ub)
            if k in escaping or shape is None:
                continue  # returned, or sized by unbounded symbolic dims: ALLOC_OUTPUT
            nbytes = tensor_nbytes(ty.dtype, shape)   # sub-byte dtypes packed
            allocs.append(Alloc(k, nbytes, first[k], last[k]))
        self.plan = plan_memory(allocs)
        for k, (c, off) in views.items():
            self.plan.offsets[k] = self.plan.offsets[c] + off
        self.arena_ids = {a.key for a in allocs} | set(views)

    def _analyse_if(self, i: int, call: Call, tree, last) -> object:
        """The alias tree of a ``call_if`` result: anything it returns may be one of its
        arguments (a branch may return an argument), so every field may alias all of them."""
        if len(call.args) != 4 or not isinstance(call.args[3], GTuple):
            raise LowerError(f"{self._where(i)}: call_if takes (cond, then_func, else_func, (args...))")
        cond, then_f, else_f, args = call.args
        for gv in (then_f, else_f):
            if not isinstance(gv, GlobalVar) or gv.name not in self.tables.functions:
                raise LowerError(f"{self._where(i)}: call_if branch {gv!r} is not a graph function of the "
                                 f"module (graph functions: {sorted(self.tables.functions)})")
        if not isinstance(cond.ty, TensorType):
            raise LowerError(f"{self._where(i)}: call_if condition must be a tensor, got {cond.ty!r}")
        used = _flatten((tree(cond, i), tree(args, i)))
        for a in used:
            last[a] = i
        if isinstance(call.ty, TupleType):
            return tuple(used for _ in call.ty.fields)
        return used

    # ---- emission -------------------------------------------------------------------------
    def emit(self) -> FunctionSpec:
        code: List[Instruction] = []
        regs: Dict[GraphVar, int] = {p: i for i, p in enumerate(self.func.params)}
        const_regs: Dict[int, int] = {}
        counter = [len(self.params)]

        def new_reg() -> int:
            counter[0] += 1
            return counter[0] - 1

        def value(e: GraphExpr, i: int) -> int:
            """The register holding ``e``, emitting what computes it (constants, tuples, items)."""
            if isinstance(e, GraphVar):
                return regs[e]
            if isinstance(e, Constant) and getattr(e.ty, "dtype", None) == "string":
                return self._string_constant(e, new_reg, code)
            if isinstance(e, Constant):
                k = self.tables.constant(e.data)
                if k not in const_regs:
                    const_regs[k] = new_reg()
                    code.append(Instruction(Op.LOAD_CONST, [const_regs[k], k]))
                return const_regs[k]
            if isinstance(e, GTuple):
                fields = [value(f, i) for f in e.fields]
                dst = new_reg()
                code.append(Instruction(Op.MAKE_TUPLE, [dst, len(fields), *fields]))
                return dst
            if isinstance(e, TupleGetItem):
                src = value(e.tuple_value, i)
                dst = new_reg()
                code.append(Instruction(Op.GET_ITEM, [dst, src, e.index]))
                return dst
            raise LowerError(f"{self._where(i)}: cannot lower a {type(e).__name__} value")  # pragma: no cover

        for i, b in enumerate(self.bindings):
            v = b.value
            if i in self.elided:
                # A concat whose parts are in place, a slice of its input: a view, no kernel.
                regs[b.var] = self._alloc(i, self.elided[i], new_reg, code)
            elif isinstance(v, Call):
                regs[b.var] = self._emit_call(i, v, value, new_reg, code)
            else:
                regs[b.var] = value(v, i)
        code.append(Instruction(Op.RET, [value(self.func.body, len(self.bindings))]))
        code = insert_frees(code)
        bounds = self._bounds_table()
        for k in self.written:
            self.params[k].written = True
        return FunctionSpec(self.name, self.params, list(self.sym_names), counter[0],
                            self.plan.arena_size, code, private=bool(self.func.attr("private", False)),
                            derived=list(self.table.derived), bounds=bounds)

    def _string_constant(self, e: Constant, new_reg, code) -> int:
        """A string constant: its block as a uint8 constant and its shape as an int64 one, made
        a string tensor (validated) by the string library at run time."""
        from ..runtime.strings import pack
        block = np.frombuffer(pack(e.data), np.uint8)
        regs = []
        for arr in (block, np.asarray(e.data.shape, np.int64)):
            regs.append(new_reg())
            code.append(Instruction(Op.LOAD_CONST, [regs[-1], self.tables.constant(arr)]))
        dst = new_reg()
        code.append(Instruction(Op.CALL_PACKED, [dst, self.tables.extern(STRING_FROM_BLOCK), 2, *regs]))
        return dst

    def _emit_call(self, i, call: Call, value, new_reg, code) -> int:
        if call.op == "call_if":
            cond, then_f, else_f, args = call.args
            regs = [value(cond, i)] + [value(f, i) for f in args.fields]
            dst = new_reg()
            code.append(Instruction(Op.IF, [dst, regs[0], self.tables.functions[then_f.name],
                                            self.tables.functions[else_f.name], len(regs) - 1, *regs[1:]]))
            return dst
        callee, args = call.args[0], call.args[1]
        fields = args.fields if isinstance(args, GTuple) else None
        if fields is None:
            raise LowerError(f"{self._where(i)}: {call.op} takes its arguments as a tuple expression")
        if call.op == "call_packed":
            if not isinstance(callee, ExternFunc):
                raise LowerError(f"{self._where(i)}: call_packed callee must be an ExternFunc, got {callee!r}")
            in_regs = [value(f, i) for f in fields]
            dst = new_reg()
            code.append(Instruction(Op.CALL_PACKED, [dst, self.tables.extern(callee.name), len(in_regs), *in_regs]))
            return dst
        if call.op == "call_tir":
            if not isinstance(callee, GlobalVar):
                raise LowerError(f"{self._where(i)}: call_tir callee must be a GlobalVar, got {callee!r}")
            prim = self.prim_funcs.get(callee.name)
            if prim is None:
                raise LowerError(f"{self._where(i)}: call_tir calls '{callee.name}', which is not a tensor "
                                 f"program of the module (PrimFuncs: {sorted(self.prim_funcs)})")
            for j, f in enumerate(fields):
                if not isinstance(f.ty, TensorType):
                    raise LowerError(f"{self._where(i)}: call_tir argument {j} is not a tensor ({f.ty!r})")
            n_out = len(self.outputs[i])
            if call.attr("inplace") is not None:
                if len(prim.params) != len(fields):
                    raise LowerError(f"{self._where(i)}: in-place call_tir '{callee.name}' with {len(fields)} "
                                     f"arguments, but the tensor program has {len(prim.params)} parameters")
                in_regs = [value(f, i) for f in fields]
                code.append(Instruction(Op.CALL_KERNEL, [self.tables.kernel(callee.name), len(in_regs), *in_regs]))
                return in_regs[int(call.attr("inplace"))]
            if len(prim.params) != len(fields) + n_out:
                raise LowerError(f"{self._where(i)}: call_tir '{callee.name}' with {len(fields)} inputs and "
                                 f"{n_out} outputs, but the tensor program has {len(prim.params)} parameters")
            op, index = Op.CALL_KERNEL, self.tables.kernel(callee.name)
        else:
            if not isinstance(callee, ExternFunc):
                raise LowerError(f"{self._where(i)}: call_dps_packed callee must be an ExternFunc, got {callee!r}")
            op, index = Op.CALL_EXTERN, self.tables.extern(callee.name)
        in_regs = [value(f, i) for f in fields]
        out_regs = [self._alloc(i, k, new_reg, code) for k in self.outputs[i]]
        code.append(Instruction(op, [index, len(in_regs) + len(out_regs), *in_regs, *out_regs]))
        if isinstance(call.ty, TensorType):
            return out_regs[0]
        dst = new_reg()
        code.append(Instruction(Op.MAKE_TUPLE, [dst, len(out_regs), *out_regs]))
        return dst

    def _alloc(self, i: int, k: int, new_reg, code) -> int:
        """A register holding allocation ``k`` (of binding ``i``): its arena view or a new output."""
        ty = self.alloc_types[k]
        dst = new_reg()
        dims = self._dims(ty, self._where(i))
        dtype = list(dtype_to_dl(ty.dtype))
        if k in self.arena_ids:
            code.append(Instruction(Op.ALLOC_ARENA, [dst, self.plan.offsets[k], *dtype, len(dims), *dims]))
        else:
            code.append(Instruction(Op.ALLOC_OUTPUT, [dst, *dtype, len(dims), *dims]))
        return dst


# Which operands an instruction reads as registers, and which register it defines.
def _reads(ins: Instruction) -> List[int]:
    op, o = Op(ins.opcode), [int(x) for x in ins.operands]
    if op in (Op.CALL_KERNEL, Op.CALL_EXTERN, Op.MAKE_TUPLE):
        return o[2:]
    if op == Op.CALL_PACKED:
        return o[3:]
    if op in (Op.GET_ITEM, Op.MOVE):
        return [o[1]]
    if op == Op.IF:
        return [o[1]] + o[5:]
    if op == Op.RET:
        return [o[0]]
    return []


def _heap_and_returned(code: List[Instruction]):
    """Registers that may hold heap memory (ALLOC_OUTPUT, IF, and tuples / items / aliases of
    them; arena views and constants free nothing), and registers whose value may be returned."""
    heap, sources = set(), {}
    for ins in code:
        op, o = Op(ins.opcode), [int(x) for x in ins.operands]
        if op in (Op.ALLOC_OUTPUT, Op.IF, Op.CALL_PACKED):
            heap.add(o[0])
        elif op in (Op.MAKE_TUPLE, Op.GET_ITEM, Op.MOVE):
            sources[o[0]] = o[2:] if op == Op.MAKE_TUPLE else [o[1]]
            if heap.intersection(sources[o[0]]):
                heap.add(o[0])
    todo = [int(ins.operands[0]) for ins in code if Op(ins.opcode) == Op.RET]
    returned = set()
    while todo:
        r = todo.pop()
        if r not in returned:
            returned.add(r)
            todo += sources.get(r, [])
    return heap, returned


def insert_frees(code: List[Instruction]) -> List[Instruction]:
    """``code`` with ``FREE r`` after the last instruction reading ``r``, for every register
    that may hold heap memory and is not returned (see the module docstring)."""
    last_read: Dict[int, int] = {}
    for i, ins in enumerate(code):
        for r in _reads(ins):
            last_read[r] = i
    heap, returned = _heap_and_returned(code)
    frees: Dict[int, List[int]] = {}
    for r in sorted(heap - returned):
        if r in last_read:
            frees.setdefault(last_read[r], []).append(r)
    out: List[Instruction] = []
    for i, ins in enumerate(code):
        out.append(ins)
        out += [Instruction(Op.FREE, [r]) for r in frees.get(i, [])]
    return out


def lower_function(name: str, func: Function, tables: Tables,
                   prim_funcs: Dict[str, PrimFunc]) -> Tuple[FunctionSpec, MemoryPlan]:
    """Bytecode for one graph function; its kernels, externs and constants go into ``tables``."""
    fl = _FunctionLowering(name, func, tables, prim_funcs)
    fl.analyse()
    return fl.emit(), fl.plan


def check_lowerable(mod: IRModule) -> None:
    """Raise ``LowerError`` if a graph function still calls an operator (legalize first)."""
    for name, func in mod.items():
        if isinstance(func, Function):
            for b in func.bindings():
                if isinstance(b.value, Call) and b.value.op not in BUILTINS:
                    raise LowerError(f"graph function '{name}', binding '{b.var.name}': {_op_hint(b.value.op)}")


def lower_module(mod: IRModule, target: str) -> Tuple[ExecutableSpec, Dict[str, MemoryPlan]]:
    """The executable spec of every graph function of ``mod``, and each function's memory plan."""
    check_lowerable(mod)
    prims = {n: f for n, f in mod.items() if isinstance(f, PrimFunc)}
    tables = Tables()
    tables.functions = {name: k for k, (name, _) in
                        enumerate((n, f) for n, f in mod.items() if isinstance(f, Function))}
    functions, plans = [], {}
    for name, func in mod.items():
        if isinstance(func, Function):
            if name in RESERVED_NAMES:
                # The VM module's own functions: a graph function of that name could not be called.
                raise LowerError(f"a graph function may not be named '{name}': the VM module has its "
                                 f"own function of that name ({', '.join(RESERVED_NAMES)} are reserved)")
            spec, plans[name] = lower_function(name, func, tables, prims)
            functions.append(spec)
    if not functions:
        raise LowerError("the module has no graph functions to compile; kiln.build compiles a module "
                         "of tensor programs alone")
    return ExecutableSpec(target, tables.kernels, tables.externs, tables.constants, functions), plans
