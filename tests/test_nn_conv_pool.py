"""Convolutional-network layers against PyTorch: padding modes with string padding, bicubic and
antialiased interpolation, negative non-constant padding, and PyTorch's checks of bad geometry (a kernel
larger than the input, a zero stride, an invalid output padding), which XLA would otherwise accept."""
from __future__ import annotations

import jax
import numpy as np
import pytest

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from helpers import compare, same

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _both(fd, ft, *arrays):
    """``fd`` on dynajax tensors and ``ft`` on torch tensors of ``arrays``: outputs and the gradients of a
    weighted sum of them, as numpy."""
    ds = [dj.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    do, to = fd(*ds), ft(*ts)
    w = _rand(*to.shape, seed=1)
    (do * dj.tensor(w)).sum().backward()
    (to * torch.tensor(w)).sum().backward()
    return ([np.asarray(do.detach()._value)] + [np.asarray(d.grad._value) for d in ds],
            [to.detach().numpy()] + [t.grad.numpy() for t in ts])


def _assert_both(fd, ft, *arrays, tol=1e-5):
    got, want = _both(fd, ft, *arrays)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def _copy_module(tm, dm):
    for (n, p), (n2, q) in zip(tm.state_dict().items(), dm.state_dict().items()):
        assert n == n2
        with dj.no_grad():
            q.copy_(dj.tensor(p.detach().numpy().copy()))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv_string_padding_with_padding_mode(mode, padding):
    """padding='same'/'valid' with a non-zero padding mode pads the input in that mode (an even, dilated
    kernel: the extra element goes to the end, as PyTorch puts it)."""
    tm = torch.nn.Conv2d(2, 3, (2, 4), padding=padding, padding_mode=mode, dilation=(1, 2))
    dm = nn.Conv2d(2, 3, (2, 4), padding=padding, padding_mode=mode, dilation=(1, 2))
    _copy_module(tm, dm)
    _assert_both(dm, tm, _rand(2, 2, 6, 9), tol=1e-4)


def test_conv_string_padding_errors_at_construction():
    with pytest.raises(ValueError, match="strided"):
        nn.Conv2d(2, 3, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="Invalid padding string"):
        nn.Conv2d(2, 3, 3, padding="full")


@pytest.mark.parametrize("x_shape,w_shape,kw,msg", [
    ((1, 4, 2, 2), (4, 4, 3, 3), {}, "Kernel size can't be greater"),   # input smaller than the kernel
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(padding=-1), "negative padding"),
    ((1, 4, 5, 5), (4, 4, 3, 3), dict(stride=0), "non-positive stride"),
    ((1, 4, 5, 5), (3, 2, 3, 3), dict(groups=2), "divisible by 2 at dimension 0"),
    ((1, 4, 5, 5), (4, 4), {}, "4-dimensional weight"),
])
def test_conv_rejects_bad_geometry(x_shape, w_shape, kw, msg):
    with pytest.raises(RuntimeError, match=msg):
        F.conv2d(dj.tensor(_rand(*x_shape)), dj.tensor(_rand(*w_shape)), **kw)


def test_conv_transpose_checks_output_padding_and_output_size():
    x, w = dj.tensor(_rand(2, 3, 5, 5)), dj.tensor(_rand(3, 4, 3, 3))
    with pytest.raises(RuntimeError, match="output padding must be smaller"):
        F.conv_transpose2d(x, w, output_padding=1)
    with pytest.raises(RuntimeError, match="Expected 2D \\(unbatched\\) or 3D"):
        F.conv_transpose1d(dj.tensor(_rand(5)), dj.tensor(_rand(5, 4, 3)))
    tm = torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1)
    dm = nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1)
    _copy_module(tm, dm)
    for size in [(10, 9), (2, 4, 10, 10)]:   # in range, and with batch and channel dims
        _assert_both(lambda a: dm(a, output_size=size), lambda a: tm(a, output_size=size), _rand(2, 3, 5, 5),
                     tol=1e-4)
    with pytest.raises(ValueError, match="valid sizes range from"):
        dm(x, output_size=(12, 12))


def test_pool_rejects_bad_geometry():
    x = dj.tensor(_rand(1, 3, 2, 2))
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.max_pool2d(x, 3)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.avg_pool1d(dj.tensor(_rand(1, 3, 2)), 3)
    with pytest.raises(RuntimeError, match="greater than zero"):
        F.max_pool2d(dj.tensor(_rand(1, 3, 6, 6)), 2, stride=0)
    with pytest.raises(RuntimeError, match="half of kernel size"):
        F.avg_pool2d(dj.tensor(_rand(1, 3, 6, 6)), 2, padding=2)
    with pytest.raises(RuntimeError, match="divisor must be not zero"):
        F.avg_pool2d(dj.tensor(_rand(1, 3, 6, 6)), 2, divisor_override=0)
    # a dilated window may pad up to half the kernel, as PyTorch allows
    _assert_both(lambda a: F.max_pool2d(a, 3, stride=2, padding=1, dilation=2, ceil_mode=True),
                 lambda a: TF.max_pool2d(a, 3, stride=2, padding=1, dilation=2, ceil_mode=True), _rand(2, 3, 7, 8))
    y, idx = F.max_pool2d(dj.tensor(_rand(1, 2, 8, 8)), 2, return_indices=True)
    with pytest.raises(ValueError, match="invalid output_size"):
        F.max_unpool2d(y, idx, 2, output_size=(12, 12))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pads", [(-1, 2), (2, -1, 1, -2), (3, -2, -1, -1)])
def test_pad_negative_non_constant(mode, pads):
    """Negative padding crops (before the rest pads, so a circular pad wraps the cropped dim)."""
    shape = (2, 3, 6, 5)[:2 + len(pads) // 2]
    _assert_both(lambda a: F.pad(a, pads, mode=mode), lambda a: TF.pad(a, pads, mode=mode), _rand(*shape))


def test_pad_checks():
    with pytest.raises(RuntimeError, match="wrapping around more than once"):
        F.pad(dj.tensor(_rand(1, 2, 3)), (4, 4), mode="circular")
    with pytest.raises(NotImplementedError, match="Padding size 2 is not supported for 4D"):
        F.pad(dj.tensor(_rand(2, 3, 6, 5)), (1, 1), mode="reflect")
    with pytest.raises(RuntimeError, match="negative output size"):
        F.pad(dj.tensor(_rand(1, 2, 6)), (-4, -3))


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("kw", [dict(size=(7, 3)), dict(scale_factor=1.7), dict(scale_factor=(0.45, 2.0)),
                                dict(scale_factor=0.45, recompute_scale_factor=True)])
def test_interpolate_bicubic(kw, align_corners):
    _assert_both(lambda a: F.interpolate(a, mode="bicubic", align_corners=align_corners, **kw),
                 lambda a: TF.interpolate(a, mode="bicubic", align_corners=align_corners, **kw), _rand(2, 3, 5, 8),
                 tol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("kw", [dict(size=(3, 4)), dict(size=(11, 6)), dict(scale_factor=0.45)])
def test_interpolate_antialias(mode, kw):
    """antialias=True filters a downsampled input (it was ignored: plain bilinear values)."""
    _assert_both(lambda a: F.interpolate(a, mode=mode, antialias=True, **kw),
                 lambda a: TF.interpolate(a, mode=mode, antialias=True, **kw), _rand(2, 2, 9, 7), tol=1e-4)


def test_interpolate_checks():
    with pytest.raises(ValueError, match="same number of spatial dimensions"):
        F.interpolate(dj.tensor(_rand(1, 2, 4, 4)), size=(2, 3, 4))
    with pytest.raises(NotImplementedError, match="Only 3D, 4D and 5D"):
        F.interpolate(dj.tensor(_rand(2, 4)), size=3)
    with pytest.raises(ValueError, match="Anti-alias"):
        F.interpolate(dj.tensor(_rand(1, 2, 4, 4)), size=3, mode="nearest", antialias=True)


def test_fold_unfold_checks():
    with pytest.raises(RuntimeError, match="must be at least one"):
        F.unfold(dj.tensor(_rand(2, 3, 3, 3)), 5)
    with pytest.raises(RuntimeError, match="match the calculated number of sliding blocks"):
        F.fold(dj.tensor(_rand(2, 12, 5)), (7, 8), 2)


def test_compiled_matches_eager_for_new_paths():
    """A compiled training step through the paths above (a reflect-padded 'same' convolution, bicubic and
    antialiased resizing, a negative circular pad) gives eager mode's losses and parameters."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(2, 3, (2, 3), padding="same", padding_mode="reflect")

        def forward(self, x):
            y = F.interpolate(self.c(x), scale_factor=1.5, mode="bicubic")
            y = F.interpolate(y, size=(4, 5), mode="bilinear", antialias=True)
            return F.pad(y, (2, -1, -1, 1), mode="circular")

    m1, m2 = Net(), Net()
    m2.load_state_dict(m1.state_dict())
    o1, o2 = dj.optim.SGD(m1.parameters(), lr=0.1), dj.optim.SGD(m2.parameters(), lr=0.1)

    def make(m, o):
        def step(x):
            loss = (m(x) ** 2).mean()
            o.zero_grad()
            loss.backward()
            o.step()
            return loss
        return step

    eager, compiled = make(m1, o1), dj.compile(make(m2, o2))
    for i in range(3):
        x = _rand(2, 2, 6, 7, seed=i)
        np.testing.assert_allclose(float(compiled(dj.tensor(x))), float(eager(dj.tensor(x))), rtol=1e-5)
    for a, b in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(np.asarray(b._value), np.asarray(a._value), rtol=1e-5, atol=1e-6)


def test_norm_layers_name_a_channel_mismatch():
    x = dj.tensor(_rand(3, 5, 4, 4))
    with pytest.raises(RuntimeError, match="running_mean should contain 5 elements not 4"):
        nn.BatchNorm2d(4)(x)
    with pytest.raises(RuntimeError, match="weight of shape \\[6\\] and input of shape \\[3, 5, 4, 4\\]"):
        nn.GroupNorm(1, 6)(x)
    with pytest.raises(ValueError, match="match num_features \\(4\\), but got: 5"):
        nn.InstanceNorm2d(4, affine=True)(x)


def test_instance_norm_tracks_running_stats():
    """track_running_stats=True (it raised NotImplementedError): training updates the running statistics
    (the batch's mean of each instance's statistics), eval mode normalizes by them; compiled as eager."""
    tm = torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.3)
    dm = nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.3)
    dc = nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.3)
    _copy_module(tm, dm)
    dc.load_state_dict(dm.state_dict())
    step = dj.compile(lambda x: dc(x).sum())
    for i in range(3):
        x = _rand(4, 3, 5, 6, seed=i)
        _assert_both(dm, tm, x, tol=1e-4)
        step(dj.tensor(x))
    for n, t in tm.state_dict().items():
        np.testing.assert_allclose(np.asarray(dm.state_dict()[n]._value), t.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(dc.state_dict()[n]._value), t.numpy(), rtol=1e-5, atol=1e-6)
    tm.eval()
    dm.eval()
    _assert_both(dm, tm, _rand(2, 3, 5, 6, seed=9), tol=1e-4)


@pytest.mark.parametrize("size,out", [((7,), 3), ((10,), 4), ((5, 7), (7, 3)), ((6, 9), (1, 4))])
def test_adaptive_max_pool_return_indices(size, out):
    """return_indices=True (it raised NotImplementedError): each window's first maximum, as a flat index
    in its plane, for windows that do not divide the input evenly."""
    x = _rand(2, 3, *size)
    fd, ft = (F.adaptive_max_pool1d, TF.adaptive_max_pool1d) if len(size) == 1 else \
        (F.adaptive_max_pool2d, TF.adaptive_max_pool2d)
    _, idx = fd(dj.tensor(x), out, return_indices=True)
    np.testing.assert_array_equal(np.asarray(idx._value), ft(torch.tensor(x), out, return_indices=True)[1].numpy())
    _assert_both(lambda a: fd(a, out, return_indices=True)[0], lambda a: ft(a, out, return_indices=True)[0], x)


def test_three_d_pooling_and_transposed_convolution():
    """The 3-D forms (they were missing): max/avg pooling with padding and ceil_mode, adaptive pooling to
    sizes that do not divide the input, and a grouped, strided transposed convolution with output padding."""
    x = _rand(2, 3, 6, 7, 5)
    _assert_both(lambda a: F.max_pool3d(a, 3, 2, 1, ceil_mode=True),
                 lambda a: TF.max_pool3d(a, 3, 2, 1, ceil_mode=True), x)
    _assert_both(lambda a: F.avg_pool3d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                 lambda a: TF.avg_pool3d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False), x)
    _assert_both(lambda a: F.adaptive_avg_pool3d(a, (2, 3, None)), lambda a: TF.adaptive_avg_pool3d(a, (2, 3, None)), x)
    _assert_both(lambda a: F.adaptive_max_pool3d(a, (4, 3, 2)), lambda a: TF.adaptive_max_pool3d(a, (4, 3, 2)), x)
    _assert_both(lambda a, w: F.conv_transpose3d(a, w, stride=2, padding=1, output_padding=1, groups=3),
                 lambda a, w: TF.conv_transpose3d(a, w, stride=2, padding=1, output_padding=1, groups=3),
                 _rand(2, 6, 3, 4, 3), _rand(6, 2, 3, 2, 3), tol=1e-4)
    from dynajax.nn.modules import layers
    tm = torch.nn.InstanceNorm3d(3, affine=True, track_running_stats=True)
    dm = layers.InstanceNorm3d(3, affine=True, track_running_stats=True)
    _copy_module(tm, dm)
    _assert_both(dm, tm, x, tol=1e-4)
    np.testing.assert_allclose(np.asarray(dm.running_var._value), tm.running_var.numpy(), rtol=1e-5)
    tp, dp = torch.nn.MaxPool3d(2, return_indices=True), layers.MaxPool3d(2, return_indices=True)
    np.testing.assert_array_equal(np.asarray(dp(dj.tensor(x))[1]._value), tp(torch.tensor(x))[1].numpy())


@pytest.mark.parametrize("fd,ft", [
    (lambda a: F.avg_pool1d(a, 2), lambda a: TF.avg_pool1d(a, 2)),
    (lambda a: F.adaptive_avg_pool1d(a, 4), lambda a: TF.adaptive_avg_pool1d(a, 4)),
    (lambda a: F.interpolate(a, size=3, mode="linear"), lambda a: TF.interpolate(a, size=3, mode="linear")),
    (lambda a: F.interpolate(a, scale_factor=2, mode="nearest"), lambda a: TF.interpolate(a, scale_factor=2)),
])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_inf_stay_in_their_windows(fd, ft, bad):
    """A NaN or inf input reaches only the outputs whose window holds it (the pooling and resizing matrices
    multiplied it by their zero weights too: NaN everywhere in its row)."""
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 8)
    x[0, 0, 0] = bad
    got, want = np.asarray(fd(dj.tensor(x))._value), ft(torch.tensor(x)).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_lp_pool_local_response_norm_alpha_dropout():
    """Layers that were missing: LPPool, LocalResponseNorm (channel windows at both ends), AlphaDropout
    (the identity in eval mode; in training it keeps zero mean and unit variance)."""
    x = np.abs(_rand(2, 3, 7, 8)) + 0.1
    _assert_both(lambda a: F.lp_pool2d(a, 3, (3, 2), stride=2, ceil_mode=True),
                 lambda a: TF.lp_pool2d(a, 3, (3, 2), stride=2, ceil_mode=True), x, tol=1e-4)
    _assert_both(lambda a: F.lp_pool1d(a, 2, 3), lambda a: TF.lp_pool1d(a, 2, 3), x[:, :, 0], tol=1e-4)
    for shape in [(2, 5, 7), (2, 6, 4, 5)]:
        _assert_both(lambda a: F.local_response_norm(a, 4, alpha=0.3, beta=0.6, k=1.5),
                     lambda a: TF.local_response_norm(a, 4, alpha=0.3, beta=0.6, k=1.5), _rand(*shape))
    z = dj.tensor(_rand(200, 500))
    assert F.alpha_dropout(z, 0.3, training=False) is z
    y = np.asarray(F.alpha_dropout(z, 0.2, training=True)._value)
    assert abs(y.mean()) < 0.02 and abs(y.var() - 1) < 0.03
    dropped = -1.7580993408473766 / np.sqrt((1.7580993408473766 ** 2 * 0.2 + 1) * 0.8) * 0.8
    assert 0.15 < np.isclose(y, dropped).mean() < 0.25


@pytest.mark.parametrize("name", ["ReflectionPad3d", "CircularPad3d"])
def test_three_d_padding_layers(name):
    from dynajax.nn.modules import padding
    pads = (1, 2, 0, 1, 2, -1)
    _assert_both(getattr(padding, name)(pads), getattr(torch.nn, name)(pads), _rand(2, 3, 4, 5, 3))


@pytest.mark.parametrize("name,size", [("adaptive_max_pool1d", 0), ("adaptive_avg_pool1d", 0),
                                       ("adaptive_max_pool2d", (0, 4)), ("adaptive_avg_pool2d", (3, 0)),
                                       ("adaptive_avg_pool3d", (0, 2, 2)), ("adaptive_max_pool3d", (2, 0, 2))])
def test_adaptive_pool_to_zero_bins_is_empty_as_torch(name, size):
    """An output size of 0 gives PyTorch's empty result (it crashed inside JAX), still requiring grad."""
    nd = int(name[-2])
    x = np.random.default_rng(0).standard_normal((2, 3) + (5,) * nd).astype(np.float32)
    want = getattr(torch.nn.functional, name)(torch.tensor(x, requires_grad=True), size)
    got = getattr(F, name)(dj.tensor(x, requires_grad=True), size)
    assert tuple(got.shape) == tuple(want.shape) and got.requires_grad == want.requires_grad
    assert got.dtype == dj.float32
    if "max" in name:
        idx = getattr(F, name)(dj.tensor(x), size, return_indices=True)[1]
        t_idx = getattr(torch.nn.functional, name)(torch.tensor(x), size, return_indices=True)[1]
        assert tuple(idx.shape) == tuple(t_idx.shape) and idx.dtype == dj.int64


# ---------------------------------------------------------------- max_unpool, conv_transpose, fold/unfold of batch 0
# Regression tests of issue 37's fixes, each side by side with PyTorch (and the tape with jax.vjp of the
# lowered graph where a gradient was wrong): duplicate indices in max_unpool's lowered gradient, conv_transpose with
# groups + dilation + output_padding, and batch-0 fold/unfold, which were refused where PyTorch computes them.
def _lowered_grad(fn, x: np.ndarray, cot: np.ndarray) -> np.ndarray:
    low = dj.lower(fn, dj.tensor(x))
    return np.asarray(jax.grad(lambda a: (low.fn(a) * cot).sum())(x))


def test_max_unpool_lowered_gradient_with_duplicate_indices():
    x = np.arange(1.0, 5.0).reshape(1, 1, 2, 2)
    idx = [[[[0, 0], [0, 5]]]]
    cot = np.arange(16.0).reshape(1, 1, 4, 4) - 3
    xt = torch.tensor(x, requires_grad=True)
    torch.nn.functional.max_unpool2d(xt, torch.tensor(idx), 2).backward(torch.tensor(cot))
    xd = dj.tensor(x, requires_grad=True)
    F.max_unpool2d(xd, dj.tensor(idx), 2).backward(dj.tensor(cot))
    lowered = _lowered_grad(lambda a: F.max_unpool2d(a, dj.tensor(idx), 2), x, cot)
    np.testing.assert_array_equal(xd.grad.numpy(), xt.grad.numpy())
    np.testing.assert_array_equal(lowered, xt.grad.numpy())


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("stride,padding", [(1, 0), (1, 1), (2, 1)])
def test_conv_transpose_groups_dilation_output_padding(nd, stride, padding):
    rng = np.random.default_rng(nd)
    x, w = rng.standard_normal((1, 4) + (4,) * nd), rng.standard_normal((4, 3) + (3,) * nd)
    kw = dict(groups=2, dilation=3, output_padding=2 if stride == 1 else 1, stride=stride, padding=padding)
    name = f"conv_transpose{nd}d"
    compare(lambda a, b: getattr(F, name)(a, b, **kw), lambda a, b: getattr(torch.nn.functional, name)(a, b, **kw),
            x, w)


FOLD_BATCH_0 = {
    "unfold batch 0": lambda L: list(L.nn.functional.unfold(L.zeros(0, 2, 4, 4), 2).shape),
    "fold batch 0": lambda L: list(L.nn.functional.fold(L.zeros(0, 8, 9), (4, 4), 2).shape),
}


@pytest.mark.parametrize("case", sorted(FOLD_BATCH_0))
def test_fold_unfold_batch_0_like_torch(case):
    same(FOLD_BATCH_0[case])
