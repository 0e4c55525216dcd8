"""The memoized buffer summaries of kiln.schedule.scope and replace_stmts' ``within``: the
shortcuts that scheduling takes must answer as the full walks they replace."""
import dataclasses

from kiln import te
from kiln.ir import Block, Buffer, BufferLoad, BufferStore, collect, replace_stmts
from kiln.ir import assert_structural_equal, substitute_buffers
from kiln.schedule.scope import _accessed, names_buffer, sites


def two_stage():
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    return te.create_prim_func([A, C])


def walked(node, cls):
    return {id(x.buffer) for x in collect(node, cls)}


def test_summaries_equal_full_walks_and_follow_rewrites():
    func = two_stage()
    root = func.body.block
    bufs = {b.name: b for b in collect(func.body, Buffer)}
    for blk in collect(func.body, Block):
        assert _accessed(blk, BufferLoad) == walked(blk, BufferLoad)
        assert _accessed(blk, BufferStore) == walked(blk, BufferStore)
    for name, buf in bufs.items():
        assert names_buffer(root.body, buf), name
    # B is named by the root block's allocation alone when the body is left out
    assert names_buffer(root, bufs["B"])
    # after a rewrite the new statements are summarized afresh; the old ones keep theirs
    fresh = Buffer("B2", bufs["B"].shape, bufs["B"].dtype)
    body = substitute_buffers(root.body, {bufs["B"]: fresh})
    assert names_buffer(body, fresh) and not names_buffer(body, bufs["B"])
    assert names_buffer(root.body, bufs["B"]) and not names_buffer(root.body, fresh)


def test_replace_stmts_within_the_ancestors_equals_the_full_walk():
    func = two_stage()
    root = func.body.block
    site = [s for s in sites(root) if s.name == "C"][0]
    new = dataclasses.replace(site.realize,
                              block=dataclasses.replace(site.block, name_hint="C2"))
    full = replace_stmts(root.body, {id(site.realize): new})
    fast = replace_stmts(root.body, {id(site.realize): new}, {id(a) for a in site.ancestors})
    assert_structural_equal(full, fast)
    assert "C2" in fast.script()
    # a statement outside the given ancestors is not entered: nothing there is replaced
    assert replace_stmts(root.body, {id(site.realize): new}, set()) is root.body
