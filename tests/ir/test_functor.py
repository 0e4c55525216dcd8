"""kiln.ir.functor's per-class children functions (written out per node class for speed)
list exactly what a plain walk over the dataclass fields finds, on every node of real
programs: a te conv2d before and after scheduling and lowering."""
import dataclasses

import kiln
from kiln import te
from kiln.ir import Node, collect
from kiln.ir.functor import children, is_leaf
from kiln.lower import lower_prim_func


def reference_children(node):
    if is_leaf(node) or not dataclasses.is_dataclass(node):
        return []
    out = []

    def add(v):
        if isinstance(v, Node):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            for x in v:
                add(x)
    for f in dataclasses.fields(node):
        add(getattr(node, f.name))
    return out


def conv2d():
    A = te.placeholder((1, 3, 10, 10), "float32", name="A")
    W = te.placeholder((8, 3, 3, 3), "float32", name="W")
    pad = te.compute((1, 3, 12, 12), lambda n, c, y, x: te.if_then_else(
        (y >= 1) & (y < 11) & (x >= 1) & (x < 11), A[n, c, y - 1, x - 1], 0.0), name="pad")
    rc, ry, rx = (te.reduce_axis((0, 3), name=n) for n in ("rc", "ry", "rx"))
    out = te.compute((1, 8, 10, 10), lambda n, f, y, x: te.sum(
        pad[n, rc, y + ry, x + rx] * W[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    return te.create_prim_func([A, W, out])


def test_children_equal_a_plain_field_walk_on_every_node():
    func = conv2d()
    sch = kiln.Schedule(func)
    sch.compute_inline(sch.get_block("pad"))
    programs = [func, sch.mod["main"], lower_prim_func(sch.mod["main"])]
    kinds = set()
    for prog in programs:
        for n in collect(prog, Node):
            got, want = list(children(n)), reference_children(n)
            assert len(got) == len(want) and all(a is b for a, b in zip(got, want)), type(n)
            kinds.add(type(n).__name__)
    assert {"For", "BlockRealize", "BufferLoad", "BufferStore", "Var", "IntImm"} <= kinds
