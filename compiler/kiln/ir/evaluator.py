"""The reference evaluator: runs any PrimFunc on numpy arrays. It is the executable spec of the
tensor IR; codegen and every schedule primitive are tested against it.

It translates the program into Python source (one nested loop per IR loop) and executes that,
which is slow but simple and obviously faithful. Loop kinds (parallel, vectorized, thread
bindings) run serially. A reduction block's ``init`` runs before its reduction loops
(``reduce_init.hoist_reduction_inits``), so an empty reduction yields its start value; an init
that cannot be separated from the loops runs when all its reduction iterators are at their
first value. Scratch buffers start filled with NaN (floats) or a sentinel (ints) so that a
program that reads before it writes shows it.

>>> evaluate(func, a, b)        # doctest: +SKIP   (writes the outputs into a, b in place)
"""
from __future__ import annotations

import math
import re

import numpy as np

from . import dtype as dt
from .expr import (Add, And, Buffer, BufferLoad, Call, Cast, Div, EQ, FloatImm, FloorDiv, FloorMod,
                   GE, GT, IntImm, LE, LT, Max, Min, Mul, NE, Not, Or, PrimExpr, Select, Sub, Var)
from .function import IRModule, PrimFunc
from .reduce_init import hoist_reduction_inits
from .stmt import (Block, BlockRealize, BufferStore, Evaluate, For, IfThenElse, SeqStmt)

_BINARY = {Add: "+", Sub: "-", Mul: "*", FloorDiv: "//", FloorMod: "%",
           EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}

_INTRINSIC = {
    "exp": "_np.exp({0})", "log": "_np.log({0})", "sqrt": "_np.sqrt({0})",
    "rsqrt": "(1.0 / _np.sqrt({0}))", "tanh": "_np.tanh({0})",
    "sigmoid": "(1.0 / (1.0 + _np.exp(-({0}))))", "erf": "_erf({0})", "pow": "_np.power({0}, {1})",
    "abs": "abs({0})", "floor": "_np.floor({0})", "ceil": "_np.ceil({0})", "round": "_np.round({0})",
    "sin": "_np.sin({0})", "cos": "_np.cos({0})",
    "bitwise_and": "_np.bitwise_and({0}, {1})", "bitwise_or": "_np.bitwise_or({0}, {1})",
    "bitwise_xor": "_np.bitwise_xor({0}, {1})", "bitwise_not": "_np.invert({0})",
    "shift_left": "_shift({0}, {1}, True)", "shift_right": "_shift({0}, {1}, False)",
}


class _Emitter:
    def __init__(self):
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.buffers: dict[int, Buffer] = {}

    def name(self, node) -> str:
        key = id(node)
        if key not in self.names:
            base = re.sub(r"\W", "_", getattr(node, "name", "v")) or "v"
            self.names[key] = f"{base}_{len(self.names)}"
            if isinstance(node, Buffer):
                self.buffers[key] = node
        return self.names[key]

    def line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    # ---- expressions -------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> str:
        if isinstance(e, Var):
            return self.name(e)
        if isinstance(e, IntImm):
            return "True" if (e.dtype == "bool" and e.value) else ("False" if e.dtype == "bool" else str(e.value))
        if isinstance(e, FloatImm):
            # repr of inf/nan is not a Python literal; float('inf') is.
            v = repr(e.value) if math.isfinite(e.value) else f"float('{e.value}')"
            return f"_np.{dt.element(e.dtype)}({v})"
        if isinstance(e, BufferLoad):
            return f"{self.name(e.buffer)}[{self.indices(e.indices)}]"
        if type(e) in _BINARY:
            return f"({self.expr(e.a)} {_BINARY[type(e)]} {self.expr(e.b)})"
        if isinstance(e, Div):
            return f"_div({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, (Min, Max)):
            return f"{type(e).__name__.lower()}({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, And):
            return f"({self.expr(e.a)} and {self.expr(e.b)})"
        if isinstance(e, Or):
            return f"({self.expr(e.a)} or {self.expr(e.b)})"
        if isinstance(e, Not):
            return f"(not {self.expr(e.a)})"
        if isinstance(e, Select):
            return f"({self.expr(e.true_value)} if {self.expr(e.condition)} else {self.expr(e.false_value)})"
        if isinstance(e, Cast):
            return f"_cast({self.expr(e.value)}, {e.dtype!r})"
        if isinstance(e, Call) and e.op == "reinterpret":
            return f"_reinterpret({self.expr(e.args[0])}, {e.args[0].dtype!r}, {e.dtype!r})"
        if isinstance(e, Call) and e.op == "prefetch":
            return "0"       # a cache hint: nothing to compute (its address may pass a dimension)
        if isinstance(e, Call):
            return _INTRINSIC[e.op].format(*(self.expr(a) for a in e.args))
        raise TypeError(f"evaluator: unsupported expression {type(e).__name__}")

    def indices(self, idx) -> str:
        return ", ".join(self.expr(i) for i in idx) + ("," if len(idx) == 1 else "") if idx else "()"

    # ---- statements --------------------------------------------------------------------
    def stmt(self, s, d: int) -> None:
        if isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x, d)
        elif isinstance(s, For):
            lo = self.expr(s.min)
            self.line(d, f"for {self.name(s.loop_var)} in range({lo}, {lo} + {self.expr(s.extent)}):")
            self.stmt(s.body, d + 1)
        elif isinstance(s, BufferStore):
            self.line(d, f"{self.name(s.buffer)}[{self.indices(s.indices)}] = {self.expr(s.value)}")
        elif isinstance(s, IfThenElse):
            self.line(d, f"if {self.expr(s.condition)}:")
            self.stmt(s.then_case, d + 1)
            if s.else_case is not None:
                self.line(d, "else:")
                self.stmt(s.else_case, d + 1)
        elif isinstance(s, BlockRealize):
            self.realize(s, d)
        elif isinstance(s, Evaluate):
            self.line(d, self.expr(s.value))
        else:
            raise TypeError(f"evaluator: unsupported statement {type(s).__name__}")
        self.line(d, "pass")

    def realize(self, r: BlockRealize, d: int) -> None:
        block: Block = r.block
        self.line(d, f"if {self.expr(r.predicate)}:")
        d += 1
        for iv, value in zip(block.iter_vars, r.iter_values):
            self.line(d, f"{self.name(iv.var)} = {self.expr(value)}")
        for buf in block.alloc_buffers:
            shape = "".join(self.expr(s) + ", " for s in buf.shape)  # "()" for a 0-d buffer
            self.line(d, f"{self.name(buf)} = _scratch(({shape}), {buf.dtype!r})")
        if block.init is not None:
            first = [f"{self.name(iv.var)} == {self.expr(iv.dom.min)}"
                     for iv in block.iter_vars if iv.kind == "reduce"]
            self.line(d, f"if {' and '.join(first) or 'True'}:")
            self.stmt(block.init, d + 1)
        self.stmt(block.body, d)


def _cast(x, dtype: str):
    e = dt.element(dtype)
    if e == "bool":
        return bool(x)
    if dt.is_int(e):
        v = int(x) if not isinstance(x, (float, np.floating)) or math.isfinite(x) else 0
        return int(np.array(v).astype(e))  # wrap around like the machine does
    return dt.to_numpy(e).type(x)   # (bfloat16 and float8: ml_dtypes' scalar types)


def _div(a, b):
    with np.errstate(all="ignore"):
        return np.float64(a) / np.float64(b) if not isinstance(a, np.floating) else a / b


def _erf(x):
    return type(x)(math.erf(float(x))) if isinstance(x, np.floating) else math.erf(x)


def _reinterpret(x, src: str, dst: str):
    """The bits of scalar ``x`` (of dtype ``src``) as ``dst`` (same width; bool is one byte)."""
    return np.asarray(x, dtype=dt.to_numpy(src)).view(dt.to_numpy(dst))[()]


def _shift(a, b, left: bool):
    """a << b or a >> b (arithmetic for signed a, logical for unsigned); an amount that is
    negative or at least a's width shifts every bit out: 0, or a's sign for a signed right
    shift (compiled code does the same)."""
    a = np.asarray(a)[()]
    width = np.asarray(a).dtype.itemsize * 8
    if int(b) < 0 or int(b) >= width:
        if not left and np.issubdtype(np.asarray(a).dtype, np.signedinteger):
            return np.right_shift(a, np.asarray(width - 1).astype(np.asarray(a).dtype)[()])
        return type(a)(0) if isinstance(a, np.generic) else 0
    s = np.asarray(b).astype(np.asarray(a).dtype)[()]
    return np.left_shift(a, s) if left else np.right_shift(a, s)


def _scratch(shape, dtype: str):
    arr = np.empty(shape, dtype=dt.to_numpy(dtype))
    if dt.is_float(dtype):
        arr.fill(np.nan)
    elif not dt.is_bool(dtype):
        arr.fill(np.iinfo(arr.dtype).max // 3)
    return arr


def to_python(func: PrimFunc) -> str:
    """The Python source the evaluator runs for ``func`` (useful when debugging a program)."""
    func = hoist_reduction_inits(func)
    em = _Emitter()
    params = [em.name(p) for p in func.params]
    body_start = len(em.lines)
    # Bind symbolic dimensions from the arguments' shapes (and check the fixed ones).
    for p in func.params:
        if not isinstance(p, Buffer):
            continue
        for axis, extent in enumerate(p.shape):
            if isinstance(extent, Var):
                em.line(1, f"{em.name(extent)} = {em.name(p)}.shape[{axis}]")
    em.stmt(func.body, 1)
    header = [f"def _kernel({', '.join(params)}):"]
    return "\n".join(header + em.lines[body_start:] + ["    return None"])


def evaluate(func, *args):
    """Run ``func`` (a PrimFunc, or an IRModule with one function or a ``main``) on numpy arrays.
    Outputs are written into the given arrays in place, as in compiled code.

    >>> A = np.arange(8, dtype="float32"); B = np.empty(8, "float32")
    >>> evaluate(MyModule, A, B)     # doctest: +SKIP
    """
    if isinstance(func, IRModule):
        names = list(func.functions)
        func = func["main"] if "main" in func else (func[names[0]] if len(names) == 1 else None)
        if func is None:
            raise ValueError(f"evaluate: module has several functions {names}; pass one")
    if len(args) != len(func.params):
        raise TypeError(f"evaluate: the function takes {len(func.params)} arguments, got {len(args)}")
    for i, (p, a) in enumerate(zip(func.params, args)):
        if isinstance(p, Buffer):
            if not isinstance(a, np.ndarray):
                raise TypeError(f"evaluate: argument {i} '{p.name}' must be a numpy array")
            if a.ndim != p.ndim or a.dtype != dt.to_numpy(p.dtype):
                raise TypeError(f"evaluate: argument {i} '{p.name}' expected {p.dtype} with ndim {p.ndim},"
                                f" got {a.dtype} with ndim {a.ndim}")
            for axis, extent in enumerate(p.shape):
                if isinstance(extent, IntImm) and a.shape[axis] != extent.value:
                    raise ValueError(f"evaluate: argument {i} '{p.name}' expected shape "
                                     f"{tuple(getattr(s, 'value', s) for s in p.shape)}, got {a.shape}")
    src = to_python(func)
    env = {"_np": np, "_cast": _cast, "_div": _div, "_erf": _erf, "_shift": _shift,
           "_reinterpret": _reinterpret,
           "_scratch": _scratch}
    exec(compile(src, "<kiln-evaluator>", "exec"), env)
    with np.errstate(all="ignore"):
        env["_kernel"](*args)
