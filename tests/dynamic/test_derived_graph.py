"""Graph functions whose tensors have derived dimensions (past + n, b * s, 2 * n), compiled once
and run at several sizes against numpy; wrong inputs give errors naming the input, the dimension,
expected and given; bounds (``"kiln.bounds"``) plan symbolic intermediates in the arena."""

import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.ir import Var
from kiln.ir.function import IRModule
from kiln.ir.graph import Binding, BindingBlock, Function, GraphVar, TensorType
from kiln.runtime import KilnError

RNG = np.random.default_rng(0)


def graph(params, calls, attrs=None):
    """A one-block graph function: ``calls`` is a list of (name, op, args..., attrs-dict) built
    in order; each may refer to params and earlier results by name; the last is returned."""
    env = {p.name: p for p in params}
    bindings = []
    for name, op, args, kw in calls:
        value = ops.call(op, *[env[a] for a in args], **kw)
        var = GraphVar(name, value.ty)
        bindings.append(Binding(var, value))
        env[name] = var
    return IRModule({"main": Function(params, (BindingBlock(bindings),), bindings[-1].var, attrs)})


def build(mod):
    ex = kiln.compile(kiln.get_pipeline("default")(mod), "llvm")
    return ex, kiln.VirtualMachine(ex, kiln.cpu())


def f32(*shape):
    return RNG.standard_normal(shape).astype("float32")


def test_concat_of_two_symbolic_lengths():
    past, n = Var("past", "int64"), Var("n", "int64")
    a = GraphVar("a", TensorType((past, 4), "float32"))
    b = GraphVar("b", TensorType((n, 4), "float32"))
    mod = graph((a, b), [("c", "concat", ["a", "b"], {"axis": 0}), ("e", "exp", ["c"], {})])
    assert [str(d) for d in mod["main"].body.ty.shape] == ["past + n", "4"]
    _, vm = build(mod)
    for p, k in ((0, 1), (3, 2), (7, 5), (1, 0)):
        x, y = f32(p, 4), f32(k, 4)
        np.testing.assert_allclose(vm["main"](x, y).numpy(), np.exp(np.concatenate([x, y])), rtol=1e-5)


def test_a_parameter_with_a_derived_dimension_is_checked():
    n = Var("n", "int64")
    x = GraphVar("x", TensorType((n, 4), "float32"))
    y = GraphVar("y", TensorType((n * 2, 4), "float32"))
    mod = graph((x, y), [("c", "concat", ["x", "x"], {"axis": 0}), ("s", "add", ["c", "y"], {})])
    _, vm = build(mod)
    for k in (1, 3):
        u, v = f32(k, 4), f32(2 * k, 4)
        np.testing.assert_allclose(vm["main"](u, v).numpy(), np.concatenate([u, u]) + v, rtol=1e-6)
    with pytest.raises(KilnError) as e:
        vm["main"](f32(3, 4), f32(5, 4))
    assert "main: argument 1 'y' dimension 0 expected n * 2 = 6, got 5" in str(e.value), str(e.value)


def test_reshape_to_a_product_and_back():
    b, s = Var("b", "int64"), Var("s", "int64")
    x = GraphVar("x", TensorType((b, s, 8), "float32"))
    mod = graph((x,), [("f", "reshape", ["x"], {"shape": (b * s, 8)}), ("e", "exp", ["f"], {}),
                       ("w", "sum", ["e"], {"axis": [1], "keepdims": True}),
                       ("r", "reshape", ["w"], {"shape": (b, s, 1)})])
    _, vm = build(mod)
    for shape in ((1, 1, 8), (2, 3, 8), (4, 5, 8)):
        v = f32(*shape)
        np.testing.assert_allclose(vm["main"](v).numpy(), np.exp(v).sum(-1, keepdims=True), rtol=1e-5)


def test_bounds_plan_symbolic_intermediates_in_the_arena():
    past, n = Var("past", "int64"), Var("n", "int64")
    a = GraphVar("a", TensorType((past, 16), "float32"))
    b = GraphVar("b", TensorType((n, 16), "float32"))
    calls = [("c", "concat", ["a", "b"], {"axis": 0}), ("e", "exp", ["c"], {}), ("t", "tanh", ["e"], {}),
             ("s", "sum", ["t"], {"axis": [0]})]
    ex_heap, vm_heap = build(graph((a, b), calls))
    ex, vm = build(graph((a, b), calls, {"kiln.bounds": (("n", 8), ("past", 24))}))
    assert ex_heap.spec.function("main").arena_size == 0  # unbounded: intermediates on the heap
    # bounded: planned at past + n <= 32 rows of 16 floats (the fused chain may keep one buffer)
    assert ex.spec.function("main").arena_size >= 32 * 16 * 4
    for p, k in ((0, 1), (24, 8), (5, 3)):
        x, y = f32(p, 16), f32(k, 16)
        want = np.tanh(np.exp(np.concatenate([x, y]))).sum(0)
        np.testing.assert_allclose(vm["main"](x, y).numpy(), want, rtol=1e-5)
        np.testing.assert_allclose(vm_heap["main"](x, y).numpy(), want, rtol=1e-5)
    with pytest.raises(KilnError, match="symbolic dimension 'n' = 9 exceeds its bound 8"):
        vm["main"](f32(2, 16), f32(9, 16))


def test_nn_export_bounds():
    from kiln import nn
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    model.load_state_dict(model.init_params(seed=0))
    spec = {"forward": {"x": nn.spec.Tensor(("n", 16), "float32")}}
    with pytest.raises(nn.spec.SpecError, match="'m': no graph function has a symbolic dimension"):
        model.export(spec, bounds={"m": 8})
    mod, _ = model.export(spec, bounds={"n": 8})
    mod = kiln.transform.bind_params("forward", model.state_dict())(mod)
    ex = kiln.compile(kiln.get_pipeline("default")(mod), "llvm")
    assert ex.spec.function("forward").bounds == [8]
    assert ex.spec.function("forward").arena_size >= 8 * 32 * 4  # the hidden layer, at n = 8
    vm = kiln.VirtualMachine(ex, kiln.cpu())
    sd = {k: np.asarray(v) for k, v in model.state_dict().items()}
    for n in (1, 5, 8):
        x = f32(n, 16)
        h = np.maximum(x @ sd["0.weight"].T + sd["0.bias"], 0)
        np.testing.assert_allclose(vm["forward"](x).numpy(), h @ sd["2.weight"].T + sd["2.bias"],
                                   rtol=1e-4, atol=1e-5)
    with pytest.raises(KilnError, match="'n' = 9 exceeds its bound 8"):
        vm["forward"](f32(9, 16))
