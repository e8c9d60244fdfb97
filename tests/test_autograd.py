"""Engine 1 (the native tape): backward, autograd.grad, grad modes, hooks, views,
in-place semantics and PyTorch's error contract."""
import threading

import numpy as np
import pytest
import torch

import dynajax as dj
from helpers import assert_close, compare


def leaf(values, dtype=dj.float64):
    return dj.tensor(values, dtype=dtype, requires_grad=True)


# ---------------------------------------------------------------- backward basics
def test_grad_accumulates_across_backward_calls():
    x = leaf([1.0, 2.0])
    (x * x).sum().backward()
    (3 * x).sum().backward()
    assert x.grad.tolist() == [5.0, 7.0]
    assert x.grad.grad_fn is None and not x.grad.requires_grad


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph")
def test_a_later_backward_adds_into_the_same_grad_tensor_as_torchs():
    """PyTorch's AccumulateGrad: the first backward sets ``.grad``; a later one adds into that tensor in place,
    so a reference held to it (gradient buckets, a list of grads) sees the sum; ``zero_grad(set_to_none=False)``
    (the optimizer's and the module's) zeroes it in place too; with ``create_graph`` the sum is a new tensor."""
    for lib in (dj, torch):
        w = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        (w * w).sum().backward()
        held = w.grad
        (3 * w).sum().backward()
        assert held is w.grad
        assert held.tolist() == [5.0, 7.0]
        opt = (dj.optim if lib is dj else torch.optim).SGD([w], lr=0.1)
        opt.zero_grad(set_to_none=False)
        assert held is w.grad and held.tolist() == [0.0, 0.0]
        (w * 4).sum().backward()
        assert held is w.grad and held.tolist() == [4.0, 4.0]
        m = (dj.nn if lib is dj else torch.nn).Linear(2, 1)
        m(w.detach().float()[None]).sum().backward()
        gw = m.weight.grad
        m.zero_grad(set_to_none=False)
        assert gw is m.weight.grad and gw.tolist() == [[0.0, 0.0]]
        (w * w).sum().backward(create_graph=True)   # out of place: the sum stays differentiable
        assert held is not w.grad and held.tolist() == [4.0, 4.0] and w.grad.tolist() == [6.0, 8.0]
        assert w.grad.requires_grad
        opt.zero_grad(set_to_none=False)   # a differentiable grad: detached, then zeroed
        assert not w.grad.requires_grad and w.grad.tolist() == [0.0, 0.0]


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph")
def test_leaves_given_one_gradient_tensor_accumulate_apart_and_hooks_run_as_torchs():
    """``a + b`` hands both leaves the same gradient: each ``.grad`` is its own tensor, so adding a later
    backward into one leaves the other alone. A tensor hook returning another shape raises; ``retain_grad``
    keeps the gradient after every hook, differentiable under ``create_graph``; ``materialize_grads`` with
    ``allow_unused=False`` is a ValueError -- all as in PyTorch."""
    def run(lib):
        out = {}
        a, b = (lib.ones(3, dtype=lib.float64, requires_grad=True) for _ in range(2))
        (a + b).sum().backward()
        (a * 2).sum().backward()
        out["grads"] = a.grad.tolist(), b.grad.tolist()
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        y = x * 3
        y.retain_grad()
        y.register_hook(lambda g: g * 10)
        (y * y).sum().backward(create_graph=True)
        out["retained"] = y.grad.tolist(), y.grad.requires_grad, x.grad.tolist()
        for where in ("leaf", "non-leaf"):
            z = lib.ones(2, requires_grad=True)
            t = z if where == "leaf" else z * 2
            t.register_hook(lambda g: g.sum())
            try:
                (t * 3).sum().backward()
                out[where] = "no error"
            except RuntimeError as e:
                out[where] = "has changed the size of value" in str(e)
        try:
            lib.autograd.grad((x * x).sum(), [x, lib.ones(1, requires_grad=True)], materialize_grads=True,
                              allow_unused=False)
        except ValueError:
            out["materialize"] = "ValueError"
        return out
    assert run(dj) == run(torch)


def test_shared_subexpression_and_broadcast_unbroadcast():
    x = leaf([[1.0, 2.0, 3.0]])       # (1, 3) broadcasts against (2, 1)
    y = leaf([[2.0], [5.0]])
    z = x * y + x
    z.sum().backward()
    assert x.grad.tolist() == [[9.0, 9.0, 9.0]]     # sum_i (y_i + 1)
    assert y.grad.tolist() == [[6.0], [6.0]]


def test_backward_with_gradient_argument():
    x = leaf([1.0, 2.0, 3.0])
    (x * 2).backward(dj.tensor([1.0, 0.5, 0.0], dtype=dj.float64))
    assert x.grad.tolist() == [2.0, 1.0, 0.0]


def test_backward_inputs_restricts_accumulation():
    x, y = leaf([1.0]), leaf([2.0])
    (x * y).sum().backward(inputs=[x])
    assert x.grad.tolist() == [2.0] and y.grad is None


def test_higher_order_gradients_match_torch():
    def f(lib, x):
        y = (x ** 3).sum()
        (g,) = lib.autograd.grad(y, x, create_graph=True)
        (h,) = lib.autograd.grad((g * g).sum(), x, create_graph=True)
        return h
    a = np.array([0.5, -1.5, 2.0])
    compare(lambda x: f(dj, x), lambda x: f(torch, x), a, double=True)


def test_backward_create_graph_gives_differentiable_grad():
    x = leaf([2.0])
    (x ** 3).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    (g2,) = dj.autograd.grad(x.grad.sum(), x)
    assert g2.tolist() == [12.0]


def test_autograd_grad_nonleaf_input_and_multiple_outputs():
    x = leaf([1.0, 2.0])
    h = x * 3
    y1, y2 = (h * h).sum(), h.sum()
    gh, gx = dj.autograd.grad([y1, y2], [h, x])
    assert gh.tolist() == [7.0, 13.0] and gx.tolist() == [21.0, 39.0]
    assert x.grad is None


def test_long_chain_is_iterative():
    x = dj.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.0
    y.backward()
    assert x.grad.item() == 1.0


# ---------------------------------------------------------------- error contract
def test_second_backward_through_freed_graph_raises_and_suggests_retain_graph():
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()
    z = (x.exp()).sum()
    z.backward(retain_graph=True)
    z.backward()
    assert_close(x.grad, np.array([2.0, 4.0]) + 2 * np.exp([1.0, 2.0]))


def test_saved_arrays_are_freed_after_backward():
    x = leaf([1.0, 2.0])
    y = x.exp() * x
    node = y.grad_fn
    y.sum().backward()
    assert node.freed and all(s is None or not isinstance(s, tuple) for s in node.saved)
    assert node.out_saved is None


def test_graph_without_saved_tensors_can_backward_twice_like_torch():
    x = leaf([1.0])
    y = (x + 1).sum()
    y.backward()
    y.backward()
    assert x.grad.tolist() == [2.0]


def test_nonscalar_backward_without_gradient():
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        (leaf([1.0, 2.0]) * 2).backward()


def test_gradient_of_wrong_shape():
    with pytest.raises(RuntimeError, match=r"Mismatch in shape: grad_output\[0\] has a shape of torch.Size\(\[3\]\) "
                                           r"and output\[0\] has a shape of torch.Size\(\[2\]\)"):
        (leaf([1.0, 2.0]) * 2).backward(dj.ones(3, dtype=dj.float64))


def test_a_number_as_gradient_raises_torchs_type_error():
    torch = pytest.importorskip("torch")
    for lib in (torch, dj):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        with pytest.raises(TypeError):   # (PyTorch's message here: "'float' object is not iterable")
            (x * 2).sum().backward(1.0)
        with pytest.raises(TypeError, match="gradients can be either Tensors or None, but got int"):
            lib.autograd.grad([(x * 2).sum()], [x], [1])
        assert x.grad is None
        (x * 2).sum().backward(lib.tensor(3.0))   # a 0-d tensor is taken
        assert x.grad.tolist() == [6.0, 6.0]


def test_backward_without_grad_fn():
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        dj.ones(2).sum().backward()


def test_requires_grad_on_integer_tensor():
    with pytest.raises(RuntimeError, match="only Tensors of floating point and complex dtype can require gradients"):
        dj.tensor([1, 2]).requires_grad_()


def test_unused_input_needs_allow_unused():
    x, y = leaf([1.0]), leaf([2.0])
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        dj.autograd.grad((x * 2).sum(), [x, y])
    gx, gy = dj.autograd.grad((x * 2).sum(), [x, y], allow_unused=True)
    assert gx.tolist() == [2.0] and gy is None
    gx, gy = dj.autograd.grad((x * 2).sum(), [x, y], materialize_grads=True)
    assert gy.tolist() == [0.0]


def test_inplace_modification_of_saved_tensor_raises_version_error():
    x = leaf([1.0, 2.0])
    h = x * 1
    y = h * h          # saves h at version 0
    h.add_(1)          # h is now at version 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*is at version 1; expected version 0"):
        y.sum().backward()


def test_inplace_output_saved_by_exp_raises():
    x = leaf([1.0])
    y = x.exp()
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_inplace_on_unsaved_input_is_fine_like_torch():
    x = leaf([1.0, 2.0])
    h = x * 1
    y = h + 1          # add saves nothing
    h.mul_(3)
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]


def test_inplace_on_leaf_requiring_grad():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
        x.add_(1)
    assert x.tolist() == [1.0, 2.0] and x._version == 0
    with dj.no_grad():
        x.add_(1)
    assert x.tolist() == [2.0, 3.0] and x.is_leaf and x.requires_grad and x._version == 1


def test_inplace_chain_gradients_match_torch():
    def f(lib, x, w):
        h = x * w
        h.mul_(2)
        h.add_(w)
        h.div_(x)
        h.sigmoid_()
        return h
    a, b = np.array([1.0, -2.0, 0.5]), np.array([0.3, 0.7, -1.2])
    compare(lambda x, w: f(dj, x, w), lambda x, w: f(torch, x, w), a, b, double=True)


def test_inplace_after_op_that_saved_its_output_raises_like_torch():
    for lib in (dj, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        h = (x * 1).sigmoid_()   # sigmoid saved its output, which is h
        h.div_(x)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            h.sum().backward()


# ---------------------------------------------------------------- views
def test_inplace_through_view_updates_base_and_gradients():
    def f(lib, a):
        b = a.clone()
        v = b.view(2, 2)
        v.mul_(lib.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=lib.float64))
        b.t().add_(1) if b.dim() == 2 else None
        return b.exp()
    compare(lambda a: f(dj, a), lambda a: f(torch, a), np.array([1.0, 2.0, 3.0, 4.0]) / 4, double=True)


def test_transpose_view_write_and_other_views_stay_in_sync():
    def f(lib, a):
        b = a * 1
        t = b.t()
        other = b.view(-1)
        t.mul_(3)
        return other * 1 + b.sum()
    compare(lambda a: f(dj, a), lambda a: f(torch, a), np.arange(6.0).reshape(2, 3), double=True)


def test_view_of_leaf_inplace_raises():
    x = leaf([[1.0, 2.0]])
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        x.view(2).add_(1)


def test_detach_and_data_share_values():
    x = leaf([1.0, 2.0])
    d = x.detach()
    assert not d.requires_grad and d.tolist() == [1.0, 2.0]
    x.data.mul_(10)
    assert x.tolist() == [10.0, 20.0] and x.is_leaf and x.requires_grad
    y = (x * x).sum()
    y.backward()
    assert x.grad.tolist() == [20.0, 40.0]
    x.data = dj.tensor([5.0, 6.0], dtype=dj.float64)
    assert x.tolist() == [5.0, 6.0]


# ---------------------------------------------------------------- grad modes
def test_grad_modes_and_decorators():
    x = leaf([1.0])
    with dj.no_grad():
        assert not (x * 2).requires_grad
        with dj.enable_grad():
            assert (x * 2).requires_grad
    with dj.set_grad_enabled(False):
        assert not dj.is_grad_enabled()
    assert dj.is_grad_enabled()
    with dj.inference_mode():
        assert not (x * 2).requires_grad and dj.autograd.grad_mode.is_inference_mode_enabled()

    @dj.no_grad()
    def f(t):
        return t * 2
    assert not f(x).requires_grad and dj.is_grad_enabled()
    prev = dj.set_grad_enabled(False)
    assert not dj.is_grad_enabled()
    dj.set_grad_enabled(True)
    assert dj.is_grad_enabled() and prev is not None


def test_grad_mode_is_thread_local():
    seen = {}

    def worker():
        seen["enabled"] = dj.is_grad_enabled()
    with dj.no_grad():
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert seen["enabled"] is True


# ---------------------------------------------------------------- hooks, retain_grad, grad_fn
def test_hooks_and_retain_grad():
    x = leaf([1.0, 2.0])
    h = x * 2
    h.retain_grad()
    calls = []
    handle = h.register_hook(lambda g: calls.append(g.tolist()) or g * 10)
    x.register_hook(lambda g: g + 1)
    (h * h).sum().backward()
    assert calls == [[4.0, 8.0]]
    assert h.grad.tolist() == [40.0, 80.0]         # retain_grad keeps the grad after the hooks (PyTorch's)
    assert x.grad.tolist() == [81.0, 161.0]        # (2*h*10)*2 + 1
    handle.remove()
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        dj.ones(1).register_hook(lambda g: g)


def test_grad_fn_names_and_next_functions_match_torch():
    for lib in (dj, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = (x * 2).exp().sum()
        names = [y.grad_fn.name(), y.grad_fn.next_functions[0][0].name(),
                 y.grad_fn.next_functions[0][0].next_functions[0][0].name()]
        leaf_fn = y.grad_fn.next_functions[0][0].next_functions[0][0].next_functions[0][0]
        if lib is dj:
            got, got_leaf = names, leaf_fn
        else:
            want = names
    assert got == want == ["SumBackward0", "ExpBackward0", "MulBackward0"]
    assert got_leaf.name() == "torch::autograd::AccumulateGrad"


# ---------------------------------------------------------------- custom Function, anomaly
class Cube(dj.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x ** 3 * k

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * x * g * ctx.k, None


def test_custom_function_and_double_backward():
    x = leaf([1.0, 2.0])
    y = Cube.apply(x, 2.0)
    assert y.grad_fn.name() == "CubeBackward"
    (g,) = dj.autograd.grad(y.sum(), x, create_graph=True)
    assert g.tolist() == [6.0, 24.0]
    (gg,) = dj.autograd.grad(g.sum(), x)
    assert gg.tolist() == [12.0, 24.0]


@pytest.mark.parametrize("materialize", [True, False])
def test_custom_function_with_two_outputs_backpropagates_as_torchs(materialize):
    """A custom Function returning two tensors: its backward gets a gradient per output -- zeros for one no
    gradient reached, or None after ``ctx.set_materialize_grads(False)`` -- as in PyTorch; eager and compiled."""
    def run(lib, compiled=False):
        seen = []

        class Two(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.set_materialize_grads(materialize)
                ctx.save_for_backward(x)
                return x * 2, x * x

            @staticmethod
            def backward(ctx, g1, g2):
                (x,) = ctx.saved_tensors
                seen.append((g1 is None, g2 is None))
                return (0 if g1 is None else 2 * g1) + (0 if g2 is None else 2 * x * g2)

        def step(x):
            a, b = Two.apply(x)
            (a * 3 + b).sum().backward()
            a2, _ = Two.apply(x)
            a2.sum().backward()   # only the first output is used
            return x.grad

        f = dj.compile(step) if compiled else step
        x = lib.tensor([1.0, -2.0, 0.5], dtype=lib.float64, requires_grad=True)
        return f(x).tolist(), seen
    want, want_seen = run(torch)
    got, got_seen = run(dj)
    assert got == want and got_seen == want_seen
    assert run(dj, compiled=True)[0] == want


def test_a_write_through_detach_is_versioned_and_one_through_data_is_not_as_in_torch():
    """``detach()`` shares its tensor's version counter: a write through it counts as a change of a value saved
    for backward, which then raises; ``.data`` does not, so a write through it is silently used, as in PyTorch."""
    def run(lib, alias):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = x * 1
        z = y * y
        getattr(y, alias)().add_(1) if alias == "detach" else y.data.add_(1)
        try:
            z.sum().backward()
            return y._version, x.grad.tolist()
        except RuntimeError as e:
            return y._version, "modified by an inplace operation" in str(e)
    for alias in ("detach", "data"):
        assert run(dj, alias) == run(torch, alias), alias
    w = dj.ones(2, requires_grad=True)
    v = w._version
    w.detach().mul_(3)   # the EMA / weight-clipping idiom
    assert w._version == v + 1 and w.tolist() == [3.0, 3.0]


def test_a_custom_function_marking_its_input_dirty_returns_it_as_torchs():
    """``ctx.mark_dirty(x)`` for an input ``forward`` changed in place: the output is ``x`` itself, its history
    now the Function (a gradient through ``x`` runs the custom backward), its version bumped as PyTorch bumps
    it; marking a leaf that requires grad raises PyTorch's error."""
    def run(lib):
        class Double(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x.mul_(2)
                ctx.mark_dirty(x)
                return x

            @staticmethod
            def backward(ctx, g):
                return g * 2
        a = lib.tensor([1.0, -2.0, 3.0], dtype=lib.float64, requires_grad=True)
        x = a * 1
        y = Double.apply(x)
        out = {"same": y is x, "version": x._version, "value": x.tolist()}
        (x * x).sum().backward()
        out["grad"] = a.grad.tolist()
        try:
            Double.apply(lib.ones(2, requires_grad=True))
        except RuntimeError as e:
            out["leaf"] = str(e)
        with lib.no_grad():
            z = lib.ones(2)
            out["no_grad"] = (Double.apply(z) is z, z._version)
        return out
    assert run(dj) == run(torch)


def test_custom_function_backward_is_checked_as_torchs():
    """PyTorch's checks of a custom Function: more gradients than inputs (but extra Nones) raise; a gradient of a
    shape the input does not broadcast to raises (one it broadcasts to is summed back); a second backward
    through saved tensors raises; an output saved with save_for_backward and then changed in place fails the
    backward."""
    def run(lib):
        def fn(fwd, bwd):
            return type("F", (lib.autograd.Function,), {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})

        def attempt(f):
            try:
                return f()
            except RuntimeError as e:
                return type(e).__name__
        x = lambda: lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)   # noqa: E731
        out = {}
        extra = fn(lambda ctx, a: a * 2, lambda ctx, g: (g, g))
        out["extra"] = attempt(lambda: extra.apply(x()).sum().backward())
        nones = fn(lambda ctx, a: a * 2, lambda ctx, g: (g * 2, None))
        out["nones"] = attempt(lambda: (lambda a: (nones.apply(a).sum().backward(), a.grad.tolist())[1])(x()))
        wide = fn(lambda ctx, a: a * 2, lambda ctx, g: g.expand(2, 3))
        out["wide"] = attempt(lambda: (lambda a: (wide.apply(a).sum().backward(), a.grad.tolist())[1])(x()))
        scalar = fn(lambda ctx, a: a * 2, lambda ctx, g: g.sum())
        out["scalar"] = attempt(lambda: scalar.apply(x()).sum().backward())

        def saves(ctx, a):
            ctx.save_for_backward(a)
            return a * 2
        twice = fn(saves, lambda ctx, g: g * ctx.saved_tensors[0])

        def second():
            y = twice.apply(x()).sum()
            y.backward()
            y.backward()
        out["twice"] = attempt(second)

        def saves_out(ctx, a):
            y = a * 2
            ctx.save_for_backward(y)
            return y
        changed = fn(saves_out, lambda ctx, g: g * ctx.saved_tensors[0])
        out["changed"] = attempt(lambda: (lambda y: (y.add_(1), y.sum().backward()))(changed.apply(x())))
        return out
    assert run(dj) == run(torch)


def test_post_accumulate_grad_hooks_and_data_assignment_as_torchs():
    """``register_post_accumulate_grad_hook``: called with the leaf after each backward accumulated into its
    ``.grad``, removable, refused on non-leaves and tensors without grad; ``.data =`` of an integer tensor on
    one that requires grad raises -- as in PyTorch."""
    def run(lib):
        out = {}
        w = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        seen = []
        handle = w.register_post_accumulate_grad_hook(lambda p: seen.append((p is w, p.grad.tolist())))
        (w * 3).sum().backward()
        (w * w).sum().backward()
        handle.remove()
        (w * 3).sum().backward()
        out["seen"] = seen
        for name, t in (("non-leaf", w * 2), ("no grad", lib.ones(2))):
            try:
                t.register_post_accumulate_grad_hook(lambda p: None)
            except RuntimeError as e:
                out[name] = str(e)
        try:
            w.data = lib.ones(2, dtype=lib.int64)
        except RuntimeError as e:
            out["data"] = str(e)
        v = lib.ones(2)
        v.data = lib.ones(2, dtype=lib.int64)
        out["data ok"] = str(v.dtype).split(".")[-1]
        return out
    assert run(dj) == run(torch)


def test_a_custom_function_returning_a_number_among_tensors_backpropagates_as_torchs():
    """A Function whose forward returns ``(tensor, number, tensor)``: the number comes back as it is and its
    gradient slot in backward is None, as in PyTorch."""
    def run(lib):
        seen = []

        class Parts(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2, 7, x * x

            @staticmethod
            def backward(ctx, g1, g2, g3):
                seen.append(g2 is None)
                return g1 * 2 + g3 * 3
        x = lib.tensor([1.0, -2.0], dtype=lib.float64, requires_grad=True)
        a, n, b = Parts.apply(x)
        (a + b).sum().backward()
        return x.grad.tolist(), n, seen
    assert run(dj) == run(torch)


def test_custom_function_saved_tensor_version_check():
    x = leaf([1.0])
    h = x * 1
    y = Cube.apply(h, 1.0)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_detect_anomaly_names_the_op():
    x = leaf([0.0, 1.0])
    with dj.autograd.detect_anomaly():
        y = dj.sqrt(x * 0 - 1).sum()   # nan forward; backward of sqrt yields nan
        with pytest.raises(RuntimeError, match="returned nan values"):
            y.backward()


def test_assigning_grad_is_checked_as_torch():
    torch = pytest.importorskip("torch")
    for lib in (torch, dj):
        p = lib.zeros(3, requires_grad=True)
        with pytest.raises(RuntimeError, match=r"attempting to assign a gradient of size '\[4\]' to a tensor of "
                                               r"size '\[3\]'"):
            p.grad = lib.zeros(4)
        with pytest.raises(RuntimeError, match="attempting to assign a gradient with dtype 'double' to a tensor "
                                               "with grad_dtype 'Float'"):
            p.grad = lib.zeros(3, dtype=lib.float64)
        with pytest.raises(TypeError, match="assigned grad expected to be a Tensor or None but got grad of type "
                                            "float"):
            p.grad = 1.0
        with pytest.raises(RuntimeError, match="can't assign Variable as its own grad"):
            p.grad = p
        assert p.grad is None   # nothing assigned by the failed attempts
        g = lib.ones(3)
        p.grad = g
        assert p.grad is g
        (p * 2).sum().backward()   # accumulates into the assigned tensor, in place
        assert p.grad is g and g.tolist() == [3.0, 3.0, 3.0]
        del p.grad
        assert p.grad is None
