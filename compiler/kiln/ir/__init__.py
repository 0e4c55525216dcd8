"""Kiln's IR: tensor programs (this issue) and, later, graph functions.

Everything a pass or schedule needs is importable from here: node classes, ``IRModule``,
structural equality/hash, traversal helpers.
"""
from . import dtype
from .expr import (Add, And, Buffer, BufferLoad, Call, Cast, CmpOp, BinaryOp, Div, EQ, FloatImm,
                   FloorDiv, FloorMod, GE, GT, INTRINSICS, IntImm, LE, LT, Max, Min, Mul, NE, Node,
                   Not, Or, PrimExpr, Range, Select, Sub, Var, conjuncts, const, convert,
                   is_const_int)
from .stmt import (Block, BlockRealize, BufferRegion, BufferStore, Evaluate, For, FOR_KINDS,
                   IfThenElse, IterVar, PARALLEL_MIN_EXTENT, SeqStmt, Stmt, THREAD_TAGS, seq)
from .function import IRModule, PrimFunc, root_realize
from .structural import assert_structural_equal, structural_equal, structural_hash
from .functor import (children, collect, post_order_visit, pre_order_visit, replace_stmts,
                      substitute, substitute_buffers, transform, uses_var)
from .verify import VerifyError, verify
from .analysis import infer_access_regions
from . import graph
from .graph import (Binding, BindingBlock, Call as GraphCall, Constant, ExternFunc, Function,
                    GlobalVar, GraphExpr, GraphVar, TensorType, Tuple as GraphTuple, TupleGetItem,
                    TupleType, Type, call_dps_packed, call_if, call_tir)
from .graph_builder import FunctionBuilder
