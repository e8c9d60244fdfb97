"""Layers against torch.nn: same weights (state_dict round trip), same forward, same gradients."""
import warnings

import jax
import numpy as np
import pytest
import torch

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from helpers import XLA_CPU_ONLY, assert_close, compare, gradcheck, raises_like_torch, same

RNG = np.random.default_rng(0)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def check_module(m, t, *inputs, train=True, atol=None, rtol=None):
    """Copy ``t``'s state into ``m``; compare outputs, input grads, parameter grads and state."""
    assert list(m.state_dict()) == list(t.state_dict())
    m.load_state_dict(t.state_dict())
    m.train(train)
    t.train(train)
    xd = [dj.tensor(a, requires_grad=a.dtype.kind == "f") for a in inputs]
    xt = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in inputs]
    od, ot = m(*xd), t(*xt)
    od, ot = (od, ot) if isinstance(od, tuple) else ((od,), (ot,))
    flat_d, flat_t = [], []
    for a, b in zip(od, ot):
        if isinstance(a, tuple):
            flat_d += list(a)
            flat_t += list(b)
        else:
            flat_d.append(a)
            flat_t.append(b)
    for i, (a, b) in enumerate(zip(flat_d, flat_t)):
        assert_close(a, b, rtol, atol, msg=f"output {i}")
    ws = [randn(*b.shape) for b in flat_t]
    sum(((a * dj.tensor(w)).sum() for a, w in zip(flat_d, ws))).backward()
    sum(((b * torch.tensor(w)).sum() for b, w in zip(flat_t, ws))).backward()
    for a, b in zip(xd, xt):
        if b.grad is not None:
            assert_close(a.grad, b.grad, rtol, atol, msg="input grad")
    for (n, p), (_, q) in zip(m.named_parameters(), t.named_parameters()):
        assert_close(p.grad, q.grad, rtol, atol, msg=f"grad {n}")
    for (n, p), (_, q) in zip(m.state_dict().items(), t.state_dict().items()):
        assert_close(p, q, rtol, atol, msg=f"state {n}")
    assert repr(m) == repr(t)


@pytest.mark.parametrize("make", [
    lambda nn: nn.Linear(6, 3),
    lambda nn: nn.Linear(6, 3, bias=False),
    lambda nn: nn.Conv2d(3, 4, 3, stride=2, padding=1),
    lambda nn: nn.Conv2d(3, 6, (3, 2), padding="same", dilation=2, groups=3, bias=False),
    lambda nn: nn.Conv2d(3, 2, 3, padding=1, padding_mode="reflect"),
    lambda nn: nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1),
    lambda nn: nn.MaxPool2d(2),
    lambda nn: nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
    lambda nn: nn.AvgPool2d(3, stride=2, padding=1),
    lambda nn: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    lambda nn: nn.AdaptiveAvgPool2d((2, 3)),
    lambda nn: nn.BatchNorm2d(3),
    lambda nn: nn.GroupNorm(1, 3),
    lambda nn: nn.LayerNorm([5, 6]),
    lambda nn: nn.Upsample(scale_factor=2, mode="nearest"),
    lambda nn: nn.Upsample(size=(7, 9), mode="bilinear", align_corners=False),
    lambda nn: nn.Upsample(scale_factor=1.5, mode="bilinear", align_corners=True),
    lambda nn: nn.Flatten(),
], ids=lambda f: "")
def test_image_layers(make):
    check_module(make(nn), make(torch.nn), randn(2, 3, 5, 6))


def test_conv1d_batchnorm1d_unbatched_conv():
    check_module(nn.Conv1d(3, 4, 3, padding=2, dilation=2), torch.nn.Conv1d(3, 4, 3, padding=2, dilation=2),
                 randn(2, 3, 7))
    check_module(nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4), randn(6, 4))
    check_module(nn.Conv2d(3, 2, 3), torch.nn.Conv2d(3, 2, 3), randn(3, 5, 5))


@pytest.mark.parametrize("x_shape,w_shape,kw", [
    ((2, 6, 8, 7), (6, 1, 3, 3), dict(groups=6, dilation=2, padding=2)),         # depthwise, dilated
    ((2, 4, 9, 9), (8, 1, 3, 3), dict(groups=4, stride=2, padding=1)),           # depthwise x2, strided
    ((2, 4, 8, 8), (8, 2, 2, 2), dict(groups=2, padding="same")),                # grouped, uneven padding
    ((2, 3, 10), (6, 1, 5), dict(groups=3, padding=2, stride=3)),                # 1-d
    ((1, 2, 5, 6, 4), (4, 1, 2, 2, 1), dict(groups=2, padding=(1, 0, 0))),       # 3-d
])
@pytest.mark.x64
def test_grouped_convolutions_by_taps_match_torch(x_shape, w_shape, kw):
    """Grouped convolutions of at most TAPS_MAX taps run on CPU as a sum of per-tap products, their
    gradients as its VJPs: values, gradients and second derivatives as PyTorch's, the tape as jax.vjp
    of the lowered graph, and no XLA convolution left in the forward or its gradients."""
    conv_dj = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(x_shape)]
    conv_t = getattr(torch.nn.functional, conv_dj.__name__)
    x, w = randn(*x_shape).astype(np.float64), randn(*w_shape).astype(np.float64)
    compare(lambda x, w: conv_dj(x, w, **kw), lambda x, w: conv_t(x, w, **kw), x, w, double=True)
    b = randn(w_shape[0])
    compare(lambda x, w, b: conv_dj(x, w, b, **kw), lambda x, w, b: conv_t(x, w, b, **kw),
            x.astype(np.float32), w.astype(np.float32), b)
    dj.testing.check_grads(lambda x, w: conv_dj(x, w, **kw).tanh().sum(), [dj.tensor(x), dj.tensor(w)], order=1)
    assert " convolution(" not in _step_hlo(lambda x, w: conv_dj(x, w, **kw).tanh().sum(), x, w)


@pytest.mark.x64
@pytest.mark.parametrize("kw,w_shape", [(dict(groups=2, stride=2, padding=1, output_padding=1), (4, 3, 3, 3)),
                                         (dict(groups=4, padding=1, dilation=2), (4, 1, 3, 3))])
def test_grouped_transposed_convolution_matches_torch(kw, w_shape):
    """A grouped transposed convolution is a grouped convolution's input gradient: by taps on CPU."""
    x, w = randn(2, 4, 5, 6).astype(np.float64), randn(*w_shape).astype(np.float64)
    compare(lambda x, w: F.conv_transpose2d(x, w, **kw), lambda x, w: torch.nn.functional.conv_transpose2d(x, w, **kw),
            x, w, double=True)
    assert " convolution(" not in _step_hlo(lambda x, w: F.conv_transpose2d(x, w, **kw).tanh().sum(), x, w)


# XLA_CPU_ONLY (helpers) marks tests of the structure of XLA:CPU's programs (elsewhere convolutions lower
# to other ops: cuDNN calls)


def _step_hlo(loss, *arrays) -> str:
    """Optimized HLO of a compiled step computing ``loss`` and its gradients (an XLA convolution shows
    as `` convolution(``; metadata names source functions)."""
    xs = [dj.tensor(a, requires_grad=True) for a in arrays]
    seen = {}

    @dj.compile
    def step(*xs):
        out = loss(*xs)
        out.backward()
        return out
    for _ in range(2):   # the second call has .grad inputs: its graph is the steady one
        step(*xs)
    key, exe = next(reversed(step._cache.items()))
    step._cache[key] = lambda *a: seen.setdefault("a", a) and exe(*a)
    step(*xs)
    return exe.lower(*seen["a"]).compile().as_text()


@XLA_CPU_ONLY
def test_ungrouped_and_wide_convolutions_are_xlas():
    """Wider than TAPS_MAX: XLA's forward; in a compiled step the weight gradient is two convolutions over
    the batch's halves (they run side by side on CPU)."""
    x, w = randn(2, 4, 6, 6), randn(3, 4, 3, 3)
    assert _hlo_convolutions(_step_hlo(lambda x, w: F.conv2d(x, w).sum(), x, w)) == 4
    compare(lambda x, w: F.conv2d(x, w), lambda x, w: torch.nn.functional.conv2d(x, w), x, w, double=True)
    x, w = randn(2, 8, 6, 6), randn(8, 4, 3, 3)   # groups=2 of 36 taps each
    assert " convolution(" in _step_hlo(lambda x, w: F.conv2d(x, w, groups=2).sum(), x, w)
    compare(lambda x, w: F.conv2d(x, w, groups=2), lambda x, w: torch.nn.functional.conv2d(x, w, groups=2), x, w)


def _hlo_convolutions(text: str) -> int:
    return text.count(" convolution(")


@XLA_CPU_ONLY
def test_eager_narrow_convolutions_are_taps_with_xlas_gradients():
    """An eager convolution of at most TAPS_MAX taps (3 input channels x 3x3 here) computes its value by
    taps (no XLA convolution in its kernel) and its gradients by XLA's convolutions (faster than the taps'
    own, measured); in a compiled step the forward is one product of patches. Values, second-order
    gradients and forward-mode derivatives match PyTorch."""
    from dynajax.nn import _ops
    x, w = randn(2, 3, 7, 6), randn(14, 3, 3, 3)
    p = dict(stride=(2, 1), padding=((1, 1), (0, 2)), dilation=(1, 2), groups=1)
    xs, ws, g = (jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, w, np.zeros((2, 14, 4, 4), x.dtype)))
    for o, args, kw, n in ((_ops.conv, (xs, ws), {}, 0), (_ops.conv_input_grad, (g, ws), {"in_shape": x.shape}, 1),
                           (_ops.conv_weight_grad, (xs, g), {"w_shape": w.shape}, 2)):
        assert _hlo_convolutions(o.jitted({**kw, **p}).lower(*args).compile().as_text()) == n, o.name
    kw = dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))
    compare(lambda x, w: F.conv2d(F.pad(x, (0, 2)), w, **kw),
            lambda x, w: torch.nn.functional.conv2d(torch.nn.functional.pad(x, (0, 2)), w, **kw), x, w, double=True)
    # compiled: the forward a product of patches, the input gradient one convolution, the weight's two
    # (the batch's halves); patches more than twice the output's size (5 output channels for 27 taps):
    # XLA's forward
    assert _hlo_convolutions(_step_hlo(lambda x, w: F.conv2d(x, w, **kw).sum(), x, w)) == 3
    assert _hlo_convolutions(_step_hlo(lambda x, w: F.conv2d(x, w, **kw).sum(), x, w[:5])) == 4

    @dj.compile
    def step(x, w):
        out = F.conv2d(x, w, **kw).tanh().sum()
        out.backward()
        return out
    for d in (False, True):
        xd, wd = (dj.tensor(a.astype(np.float64) if d else a, requires_grad=True) for a in (x, w))
        xt, wt = (torch.tensor(a.astype(np.float64) if d else a, requires_grad=True) for a in (x, w))
        want = torch.nn.functional.conv2d(xt, wt, **kw).tanh().sum()
        want.backward()
        for a, e in ((step(xd, wd), want), (xd.grad, xt.grad), (wd.grad, wt.grad)):
            assert_close(a, e)
    xt, wt, dxt, dwt = (torch.tensor(a, dtype=torch.float64) for a in (x, w, randn(*x.shape), randn(*w.shape)))
    # (forward mode runs the ops as one JAX program: the patches' forward)
    _, want = torch.func.jvp(lambda x, w: torch.nn.functional.conv2d(x, w, **kw), (xt, wt), (dxt, dwt))
    _, got = dj.func.jvp(lambda x, w: F.conv2d(x, w, **kw), tuple(dj.tensor(a.numpy()) for a in (xt, wt)),
                         tuple(dj.tensor(a.numpy()) for a in (dxt, dwt)))
    assert_close(got, want)


@pytest.mark.parametrize("name,x_shape,w_shape,kw", [
    ("conv1d", (3, 2, 11), (4, 2, 3), dict(stride=2, padding=1)),
    ("conv3d", (2, 1, 5, 6, 5), (14, 1, 3, 3, 3), dict(padding=1)),
    ("conv2d", (3, 3, 8, 7), (14, 3, 3, 3), dict(stride=(1, 2), padding=(2, 1), dilation=(2, 1)))])
def test_compiled_narrow_convolutions_with_bias_match_torch(name, x_shape, w_shape, kw):
    """A compiled step's narrow convolution (a product of patches, its bias added channels-last, XLA's
    gradients with the weight's over the batch's halves): loss and the three gradients match PyTorch."""
    x, w, b = (randn(*shape).astype(np.float64) for shape in (x_shape, w_shape, w_shape[:1]))

    @dj.compile
    def step(x, w, b):
        out = getattr(F, name)(x, w, b, **kw).tanh().sum()
        out.backward()
        return out
    ds = [dj.tensor(a, requires_grad=True) for a in (x, w, b)]
    ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    want = getattr(torch.nn.functional, name)(*ts, **kw).tanh().sum()
    want.backward()
    assert_close(step(*ds), want)
    for d, t in zip(ds, ts):
        assert_close(d.grad, t.grad)


def test_batchnorm_eval_and_running_stats():
    m, t = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    for _ in range(2):
        check_module(m, t, randn(4, 3, 2, 2))
    check_module(m, t, randn(4, 3, 2, 2), train=False)
    assert int(m.num_batches_tracked) == int(t.num_batches_tracked)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        nn.BatchNorm1d(3)(dj.randn(1, 3))
    with pytest.raises(ValueError, match="expected 4D input"):
        nn.BatchNorm2d(3)(dj.randn(2, 3))


def test_embedding_indices_out_of_range_raise_as_pytorch():
    """An index outside [0, num_embeddings) raises PyTorch's IndexError, eagerly and in a compiled step
    (before anything is applied); in range, the eager kernel's gather (clamped: its indices are checked)
    gives PyTorch's rows for a new shape."""
    w = randn(6, 3)
    emb, ref = nn.Embedding(6, 3), torch.nn.Embedding(6, 3)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(w))
    emb.weight.data = dj.tensor(w)
    for bad in ([0, 6], [[2, -1]]):
        with pytest.raises(IndexError) as want:
            ref(torch.tensor(bad))
        with pytest.raises(IndexError, match=str(want.value)):
            emb(dj.tensor(bad))
    opt = dj.optim.SGD(emb.parameters(), lr=0.5)

    @dj.compile
    def step(idx):
        opt.zero_grad()
        loss = emb(idx).square().sum()
        loss.backward()
        opt.step()
        return loss
    idx = np.random.default_rng(0).integers(0, 6, (7, 5))
    step(dj.tensor(idx))
    before = emb.weight.detach().numpy().copy()
    with pytest.raises(IndexError, match="index out of range in self"):
        step(dj.tensor(np.where(idx == 3, 9, idx)))
    np.testing.assert_array_equal(emb.weight.detach().numpy(), before)
    got = F.embedding(dj.tensor(idx[:3, :4] + 0), emb.weight)
    np.testing.assert_array_equal(got.detach().numpy(), before[idx[:3, :4]])


def test_embedding_and_bilinear():
    idx = np.array([[1, 0, 3], [2, 2, 0]])
    check_module(nn.Embedding(5, 3, padding_idx=0), torch.nn.Embedding(5, 3, padding_idx=0), idx)
    check_module(nn.Bilinear(3, 4, 2), torch.nn.Bilinear(3, 4, 2), randn(5, 3), randn(5, 4))


@pytest.mark.parametrize("name,args", [
    ("ReLU", ()), ("LeakyReLU", (0.2,)), ("GELU", ()), ("GELU", ("tanh",)), ("SiLU", ()), ("Tanh", ()),
    ("Sigmoid", ()), ("Softmax", (1,)), ("LogSoftmax", (-1,)), ("ELU", (0.5,)), ("Softplus", (2.0, 1.0)),
    ("ReLU6", ()), ("Hardtanh", ()), ("Mish", ()), ("SELU", ()), ("LogSigmoid", ()), ("Hardswish", ()),
    ("Softsign", ()), ("PReLU", ()), ("GLU", ()),
])
def test_activations(name, args):
    check_module(getattr(nn, name)(*args), getattr(torch.nn, name)(*args), randn(3, 4) * 3)


def test_activation_double_backward():
    for f, g in [(F.gelu, torch.nn.functional.gelu), (F.softplus, torch.nn.functional.softplus),
                 (lambda x: F.log_softmax(x, 1), lambda x: torch.log_softmax(x, 1)),
                 (lambda x: F.softmax(x, 0), lambda x: torch.softmax(x, 0))]:
        compare(f, g, randn(3, 4).astype(np.float64), double=True)


def test_tensor_softmax_methods_match_torch():
    x = randn(3, 4)
    for f, g in [(lambda x: x.softmax(-1), lambda x: x.softmax(-1)),
                 (lambda x: x.log_softmax(0), lambda x: x.log_softmax(0)),
                 (lambda x: x.softmax(1, dtype=dj.float64), lambda x: x.softmax(1, dtype=torch.float64))]:
        compare(f, g, x)


def test_fused_ops_gradcheck_second_order():
    x, w = RNG.standard_normal((2, 2, 5, 5)), RNG.standard_normal((3, 2, 3, 3))
    gradcheck(lambda x, w: F.conv2d(x, w, stride=2, padding=1), x, w, order=2)
    gradcheck(lambda x, w: F.conv_transpose2d(x, w.transpose(0, 1), stride=2), x, w, order=2)
    gradcheck(lambda x: F.max_pool2d(x, 2), x, order=2)
    gradcheck(lambda x: F.avg_pool2d(x, 3, 2, 1), x, order=2)
    gradcheck(lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), x, order=2)
    gradcheck(lambda x, w: F.linear(x, w.reshape(-1)[:20].reshape(4, 5)), x, w, order=2)
    gradcheck(lambda w: F.embedding(dj.tensor([[0, 2], [1, 1]]), w.reshape(6, -1)), w, order=2)


@pytest.mark.parametrize("shape,kw", [((2, 3, 8, 8), {"kernel_size": 2}), ((2, 3, 9, 7), {"kernel_size": 2}),
                                      ((1, 2, 9, 9), {"kernel_size": 3}), ((2, 2, 7, 7), {"kernel_size": 3, "stride": 3,
                                                                                           "ceil_mode": True}),
                                      ((2, 3, 6, 6), {"kernel_size": 2, "stride": 1}), ((3, 6, 4), {"kernel_size": 2}),
                                      ((2, 3, 6, 9), {"kernel_size": (2, 3)})])
def test_max_pool_gradient_goes_to_first_max_like_torch(shape, kw):
    """Windows that tile the input use a first-maximum formula over window slices instead of select-and-scatter
    (batched, unbatched, non-square windows, a cropped remainder); ties (whole windows of zeros after ReLU,
    repeated values) must still send the gradient to the first maximum, as PyTorch does."""
    x = np.round(randn(*shape), 1)
    x[..., :2, :2] = 0.0
    x.reshape(-1, *shape[-2:])[0, 2:4, 2:4] = 0.5
    compare(lambda x: F.max_pool2d(F.relu(x), **kw), lambda x: torch.nn.functional.max_pool2d(x.relu(), **kw), x)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad(mode):
    compare(lambda x: F.pad(x, (1, 2, 0, 1), mode=mode), lambda x: torch.nn.functional.pad(x, (1, 2, 0, 1), mode=mode),
            randn(1, 2, 3, 4))
    if mode == "constant":
        compare(lambda x: F.pad(x, (1, -1), value=2.5), lambda x: torch.nn.functional.pad(x, (1, -1), value=2.5),
                randn(2, 3))


def test_dropout_statistics_and_reproducibility():
    x = dj.ones(2000)
    dj.manual_seed(1)
    a = F.dropout(x, 0.25)
    dj.manual_seed(1)
    b = nn.Dropout(0.25)(x)
    assert_close(a, b)
    kept = float((a != 0).float().mean())
    assert 0.7 < kept < 0.8
    assert_close(a.sum() / kept / 2000, dj.tensor(1.0 / 0.75), rtol=1e-5)
    d = nn.Dropout(0.5).eval()
    assert d(x) is x
    m = F.dropout2d(dj.ones(4, 8, 3, 3), 0.5)
    per = m.reshape(4, 8, 9)
    assert bool(((per == per[..., :1]).all()))
    with pytest.raises(ValueError, match="dropout probability"):
        nn.Dropout(1.5)


def test_misc_functional():
    compare(lambda x: F.normalize(x, dim=1), lambda x: torch.nn.functional.normalize(x, dim=1), randn(3, 4))
    compare(lambda a, b: F.cosine_similarity(a, b), lambda a, b: torch.nn.functional.cosine_similarity(a, b),
            randn(3, 4), randn(3, 4))
    compare(lambda a, b: F.pairwise_distance(a, b), lambda a, b: torch.nn.functional.pairwise_distance(a, b),
            randn(3, 4), randn(3, 4))
    compare(lambda x: F.pixel_shuffle(x, 2), lambda x: torch.nn.functional.pixel_shuffle(x, 2), randn(1, 8, 2, 3))
    compare(lambda x: F.interpolate(x, scale_factor=2, mode="linear"),
            lambda x: torch.nn.functional.interpolate(x, scale_factor=2, mode="linear"), randn(1, 2, 5))
    compare(lambda x: F.interpolate(x, size=(3, 4), mode="area"),
            lambda x: torch.nn.functional.interpolate(x, size=(3, 4), mode="area"), randn(1, 2, 7, 9))
    oh = F.one_hot(dj.tensor([0, 2, 1]), 4)
    assert_close(oh, torch.nn.functional.one_hot(torch.tensor([0, 2, 1]), 4))
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        F.one_hot(dj.tensor([5]), 3)


def test_layer_errors():
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype, but got: double != float"):
        nn.Linear(3, 2)(dj.zeros(4, 3, dtype=dj.float64))
    with pytest.raises(RuntimeError, match="expected scalar type Double but found Float"):
        nn.Conv2d(3, 2, 3)(dj.zeros(1, 3, 5, 5, dtype=dj.float64))
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        nn.Linear(3, 2)(dj.zeros(4, 5))
    with pytest.raises(RuntimeError, match="expected input.*to have 3 channels, but got 4"):
        nn.Conv2d(3, 2, 3)(dj.zeros(1, 4, 5, 5))
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(dj.zeros(1, 2, 3), (3, 3), mode="reflect")


@pytest.mark.parametrize("make", [
    lambda nn: nn.ZeroPad2d((1, 0, 2, 1)), lambda nn: nn.ConstantPad1d(2, 1.5), lambda nn: nn.ReflectionPad2d(1),
    lambda nn: nn.ReplicationPad2d((0, 1, 1, 2)), lambda nn: nn.CircularPad2d(1),
    lambda nn: nn.AdaptiveMaxPool2d((2, 3)), lambda nn: nn.AdaptiveMaxPool2d(1), lambda nn: nn.InstanceNorm2d(3),
    lambda nn: nn.InstanceNorm2d(3, affine=True), lambda nn: nn.MaxPool2d(2, dilation=2, padding=1),
])
def test_more_image_layers(make):
    check_module(make(nn), make(torch.nn), randn(2, 3, 5, 6))


def test_more_losses():
    import torch.nn.functional as TF
    x1, x2, y = randn(4, 3), randn(4, 3), np.array([1.0, -1.0, 1.0, -1.0], np.float32)
    s1, s2 = randn(4), randn(4)
    compare(lambda a, b: F.margin_ranking_loss(a, b, dj.tensor(y), margin=0.3),
            lambda a, b: TF.margin_ranking_loss(a, b, torch.tensor(y), margin=0.3), s1, s2)
    compare(lambda a, b, c: F.triplet_margin_loss(a, b, c, swap=True),
            lambda a, b, c: TF.triplet_margin_loss(a, b, c, swap=True), x1, x2, randn(4, 3))
    compare(lambda a, b: F.cosine_embedding_loss(a, b, dj.tensor(y), margin=0.1),
            lambda a, b: TF.cosine_embedding_loss(a, b, torch.tensor(y), margin=0.1), x1, x2)
    var = np.abs(randn(4, 3)) + 0.1
    compare(lambda a, b, v: F.gaussian_nll_loss(a, b, v, full=True),
            lambda a, b, v: TF.gaussian_nll_loss(a, b, v, full=True), x1, x2, var)
    cnt = np.abs(randn(4, 3)) * 3
    compare(lambda a: F.poisson_nll_loss(a, dj.tensor(cnt), full=True),
            lambda a: TF.poisson_nll_loss(a, torch.tensor(cnt), full=True), x1)
    compare(lambda a: F.soft_margin_loss(a, dj.tensor(y)), lambda a: TF.soft_margin_loss(a, torch.tensor(y)), s1)
    lab = (randn(4, 3) > 0).astype(np.float32)
    compare(lambda a: F.multilabel_soft_margin_loss(a, dj.tensor(lab)),
            lambda a: TF.multilabel_soft_margin_loss(a, torch.tensor(lab)), x1)
    compare(lambda a: F.hinge_embedding_loss(a, dj.tensor(y), reduction="sum"),
            lambda a: TF.hinge_embedding_loss(a, torch.tensor(y), reduction="sum"), s1)
    assert_close(nn.TripletMarginLoss(margin=0.5)(dj.tensor(x1), dj.tensor(x2), dj.tensor(x1[::-1].copy())),
                 torch.nn.TripletMarginLoss(margin=0.5)(torch.tensor(x1), torch.tensor(x2), torch.tensor(x1[::-1].copy())))


def test_unfold_fold_pixel_unshuffle_shrink():
    import torch.nn.functional as TF
    x = randn(2, 3, 5, 6).astype(np.float64)
    compare(lambda a: F.unfold(a, (2, 3), dilation=(1, 2), padding=1, stride=2),
            lambda a: TF.unfold(a, (2, 3), dilation=(1, 2), padding=1, stride=2), x, double=True)
    cols = randn(2, 3 * 4, 12).astype(np.float64)
    compare(lambda a: F.fold(a, (5, 6), 2, padding=1, stride=2), lambda a: TF.fold(a, (5, 6), 2, padding=1, stride=2),
            cols, double=True)
    compare(lambda a: F.pixel_unshuffle(a, 2), lambda a: TF.pixel_unshuffle(a, 2), randn(1, 2, 4, 6))
    for name in ["Softshrink", "Hardshrink", "Softmax2d"]:
        check_module(getattr(nn, name)(), getattr(torch.nn, name)(), randn(2, 3, 4, 2))
    check_module(nn.Unfold(3, padding=1), torch.nn.Unfold(3, padding=1), randn(1, 2, 4, 4))


def test_gumbel_softmax():
    logits = dj.tensor(np.log([[0.7, 0.2, 0.1]] * 4000), requires_grad=True)
    dj.manual_seed(0)
    y = F.gumbel_softmax(logits, tau=0.5, hard=True)
    assert bool(((y == 0) | (y == 1)).all()) and bool((y.sum(-1) == 1).all())
    np.testing.assert_allclose(y.detach().numpy().mean(0), [0.7, 0.2, 0.1], atol=0.03)
    (y * dj.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert logits.grad is not None and float(logits.grad.abs().sum()) > 0
    s = F.gumbel_softmax(logits[:2], tau=1.0)
    assert_close(s.sum(-1), dj.ones(2, dtype=dj.float64))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=2, dilation=2)])
def test_max_pool_indices_and_unpool(kw):
    import torch.nn.functional as TF
    x = randn(2, 3, 5, 6)
    od, id_ = F.max_pool2d(dj.tensor(x), return_indices=True, **kw)
    ot, it = TF.max_pool2d(torch.tensor(x), return_indices=True, **kw)
    assert_close(od, ot)
    assert_close(id_, it)
    if "dilation" in kw:
        return
    ukw = {k: v for k, v in kw.items() if k in ("kernel_size", "stride", "padding")}
    compare(lambda a: F.max_unpool2d(a, id_, output_size=(5, 6), **ukw),
            lambda a: TF.max_unpool2d(a, it, output_size=(5, 6), **ukw), ot.numpy().astype(np.float64), double=True)
    check_module(nn.MaxUnpool2d(2), torch.nn.MaxUnpool2d(2), randn(1, 2, 2, 3), np.array(
        [[[[0, 3, 5], [12, 15, 17]], [[1, 2, 4], [13, 14, 16]]]]))


# ---------------------------------------------------------------- rms_norm, embedding_bag
# rms_norm / nn.RMSNorm and embedding_bag / nn.EmbeddingBag against PyTorch: values, dtypes, errors, gradients
# in float64; the tape against jax.vjp of the lowered graph.
RMS_BAG_RNG = np.random.default_rng(0)
RMS_X = RMS_BAG_RNG.standard_normal((2, 3, 4))
RMS_W4 = RMS_BAG_RNG.uniform(0.5, 2.0, 4)
BAG_TABLE = RMS_BAG_RNG.standard_normal((10, 3))


RMS = {
    "last dim": lambda L: L.nn.functional.rms_norm(L.tensor(RMS_X, dtype=L.float32), (4,)),
    "two dims weight eps": lambda L: L.nn.functional.rms_norm(L.tensor(RMS_X), [3, 4],
                                                               L.ones(3, 4, dtype=L.float64) * 2, eps=0.1),
    "half": lambda L: L.nn.functional.rms_norm(L.tensor(RMS_X, dtype=L.float16), (4,)),
    "weight dtype": lambda L: L.nn.functional.rms_norm(L.tensor(RMS_X, dtype=L.float32), (4,),
                                                        L.ones(4, dtype=L.float64)),
    "shape": lambda L: L.nn.functional.rms_norm(L.tensor(RMS_X), (5,)),
    "weight shape": lambda L: L.nn.functional.rms_norm(L.tensor(RMS_X), (4,), L.ones(3)),
    "int shape": lambda L: L.nn.functional.rms_norm(L.tensor(RMS_X), 4),
    "empty shape": lambda L: L.nn.functional.rms_norm(L.tensor(RMS_X), ()),
    "module": lambda L: L.nn.RMSNorm(4, eps=1e-3)(L.tensor(RMS_X, dtype=L.float32)),
}


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
@pytest.mark.parametrize("case", sorted(RMS))
def test_rms_norm_like_torch(case):
    expected, actual = (_rms_outcome(L, RMS[case]) for L in (torch, dj))
    assert expected[0] == actual[0]
    if expected[0] == "ok":
        assert expected[2] == actual[2]
        np.testing.assert_allclose(actual[1], expected[1], rtol=2e-3 if case == "half" else 1e-6, atol=1e-6)
    else:
        assert expected == actual


def _rms_outcome(L, fn):
    try:
        r = fn(L)
    except Exception as e:   # noqa: BLE001 -- compared
        return type(e).__name__, str(e)
    return "ok", np.asarray(r.detach().float().tolist()), str(r.dtype).split(".")[-1]


def test_rms_norm_gradients():
    compare(lambda x, w: dj.nn.functional.rms_norm(x, (4,), w), lambda x, w: torch.nn.functional.rms_norm(x, (4,), w),
            RMS_X, RMS_W4, double=True)
    dj.testing.check_grads(lambda x, w: dj.nn.functional.rms_norm(x, (3, 4), w.expand(3, 4)), [RMS_X, RMS_W4])


# ---------------------------------------------------------------- embedding_bag
def _bag(L, **kw):
    return lambda w: L.nn.functional.embedding_bag(L.tensor([1, 2, 4, 5, 4, 3, 2, 9]), w, L.tensor([0, 3, 3, 6]),
                                                   **kw)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_like_torch(mode, padding_idx):
    compare(_bag(dj, mode=mode, padding_idx=padding_idx), _bag(torch, mode=mode, padding_idx=padding_idx), BAG_TABLE)


BAGS = {
    "2-d input": lambda L: L.nn.functional.embedding_bag(L.tensor([[1, 2], [4, 5]]), L.tensor(BAG_TABLE)),
    "per sample weights": lambda L: L.nn.functional.embedding_bag(
        L.tensor([[1, 2], [4, 5]]), L.tensor(BAG_TABLE), mode="sum",
        per_sample_weights=L.tensor([[1.0, 2], [3, 4]], dtype=L.float64)),
    "per sample weights dtype": lambda L: L.nn.functional.embedding_bag(
        L.tensor([[1, 2], [4, 5]]), L.tensor(BAG_TABLE), mode="sum", per_sample_weights=L.tensor([[1.0, 2], [3, 4]])),
    "include last offset": lambda L: L.nn.functional.embedding_bag(
        L.tensor([1, 2, 4, 5]), L.tensor(BAG_TABLE), L.tensor([0, 2, 2, 4]), include_last_offset=True, mode="max"),
    "module": lambda L: L.nn.EmbeddingBag(10, 3, mode="sum", _weight=L.tensor(BAG_TABLE))(L.tensor([1, 2, 3]),
                                                                                          L.tensor([0, 1])),
    "no offsets": lambda L: L.nn.functional.embedding_bag(L.tensor([1, 2]), L.tensor(BAG_TABLE)),
    "2-d with offsets": lambda L: L.nn.functional.embedding_bag(L.tensor([[1, 2]]), L.tensor(BAG_TABLE), L.tensor([0])),
    "weights with mean": lambda L: L.nn.functional.embedding_bag(
        L.tensor([1, 2]), L.tensor(BAG_TABLE), L.tensor([0]), per_sample_weights=L.ones(2, dtype=L.float64)),
    "last offset": lambda L: L.nn.functional.embedding_bag(L.tensor([1, 2]), L.tensor(BAG_TABLE), L.tensor([0, 3])),
    "mode": lambda L: L.nn.functional.embedding_bag(L.tensor([1, 2]), L.tensor(BAG_TABLE), L.tensor([0]), mode="foo"),
    "float indices": lambda L: L.nn.functional.embedding_bag(L.tensor([1.0]), L.tensor(BAG_TABLE), L.tensor([0])),
}


@pytest.mark.parametrize("case", sorted(BAGS))
def test_embedding_bag_forms_like_torch(case):
    same(lambda L: np.round(BAGS[case](L).tolist(), 12).tolist())


def test_embedding_bag_first_offset_raises_like_torch():
    raises_like_torch(lambda L: L.nn.functional.embedding_bag(L.tensor([1, 2]), L.tensor(BAG_TABLE), L.tensor([1])),
                      RuntimeError, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                      "from position 0. However, got 1")


def test_embedding_bag_tape_matches_lowered():
    for mode in ("sum", "mean", "max"):
        dj.testing.check_grads(_bag(dj, mode=mode), [BAG_TABLE])


# ---------------------------------------------------------------- normalize(p=0), dropout2d on inputs that are not 4-D
# Regression tests of issue 37's fixes, side by side with PyTorch: normalize(p=0), which was refused where PyTorch
# computes it, and dropout2d on inputs that are not 4-D.
def test_normalize_p0_like_torch():
    same(lambda L: L.nn.functional.normalize(L.tensor([[1.0, 0, 2], [0, 0, 0]]), p=0))


def test_normalize_gradients_like_torch():
    x = np.array([[0.0, 0, 0], [1, 2, 0], [-1, 0.5, 3]])
    for p in (0, 1, 2, 3):
        compare(lambda a: F.normalize(a, p=p), lambda a: torch.nn.functional.normalize(a, p=p), x)


def test_dropout2d_masks_dims_0_and_1_like_torch_2_13():
    # PyTorch 2.13 takes any input as (N, C, ...) and masks (N, C) together: a 2-D input's elements one by one,
    # a 3-D one's (N, C) rows (warning that it assumes (N, C, L)); it warns for every input that is not 4-D
    for L in (torch, dj):
        with pytest.warns(UserWarning, match="Received a 2-D input to dropout2d"):
            y = L.nn.functional.dropout2d(L.ones(8, 64), 0.5, training=True).numpy()
        assert set(np.unique(y)) <= {0.0, 2.0}
        assert any(0 < (row == 0).sum() < 64 for row in y), f"{L.__name__}: whole rows zeroed"
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            z = L.nn.Dropout2d(0.5)(L.ones(4, 16, 5)).numpy()
        assert any("Received a 3D input to dropout2d" in str(w.message) for w in seen)
        assert all(len(np.unique(z[n, c])) == 1 for n in range(4) for c in range(16))   # (N, C) rows whole
        assert len(np.unique(z[:, :, 0])) == 2
    raises = [pytest.raises(RuntimeError, match="Feature dropout requires at least 2 dimensions"), pytest.warns()]
    with raises[0], raises[1]:
        F.dropout2d(dj.ones(5), 0.5)
