"""Losses against torch.nn.functional: values, gradients (and double backward where cheap)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from helpers import assert_close, compare

RNG = np.random.default_rng(0)


def randn(*s):
    return RNG.standard_normal(s)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses(reduction):
    x, y = randn(3, 4), randn(3, 4)
    for name, kw in [("mse_loss", {}), ("l1_loss", {}), ("smooth_l1_loss", {"beta": 0.5}),
                     ("huber_loss", {"delta": 0.7})]:
        compare(lambda a, b: getattr(F, name)(a, b, reduction=reduction, **kw),
                lambda a, b: getattr(TF, name)(a, b, reduction=reduction, **kw), x, y, double=True)


@pytest.mark.parametrize("kw", [{}, {"reduction": "sum"}, {"reduction": "none"}, {"ignore_index": 1},
                                {"label_smoothing": 0.2}, {"weight": True}, {"weight": True, "ignore_index": 2},
                                {"weight": True, "label_smoothing": 0.1, "ignore_index": 0},
                                {"label_smoothing": 0.1, "reduction": "sum"}])
def test_cross_entropy_and_nll_class_indices(kw):
    x, t = randn(5, 4), np.array([0, 1, 2, 3, 1])
    w = RNG.random(4) + 0.5
    kd = dict(kw, weight=dj.tensor(w)) if kw.get("weight") else kw
    kt = dict(kw, weight=torch.tensor(w)) if kw.get("weight") else kw
    compare(lambda a: F.cross_entropy(a, dj.tensor(t), **kd), lambda a: TF.cross_entropy(a, torch.tensor(t), **kt),
            x, double=True)
    kd.pop("label_smoothing", None)
    kt.pop("label_smoothing", None)
    compare(lambda a: F.nll_loss(a, dj.tensor(t), **kd), lambda a: TF.nll_loss(a, torch.tensor(t), **kt), x)


def test_cross_entropy_spatial_probabilities_and_1d():
    x, t = randn(2, 3, 4, 5), RNG.integers(0, 3, (2, 4, 5))
    compare(lambda a: F.cross_entropy(a, dj.tensor(t)), lambda a: TF.cross_entropy(a, torch.tensor(t)), x)
    p = RNG.random((4, 3))
    p /= p.sum(1, keepdims=True)
    compare(lambda a, b: F.cross_entropy(a, b, label_smoothing=0.1),
            lambda a, b: TF.cross_entropy(a, b, label_smoothing=0.1), randn(4, 3), p)
    compare(lambda a: F.cross_entropy(a, dj.tensor(2)), lambda a: TF.cross_entropy(a, torch.tensor(2)), randn(5))
    m, tm = nn.CrossEntropyLoss(ignore_index=0), torch.nn.CrossEntropyLoss(ignore_index=0)
    xv = randn(3, 4).astype(np.float32)
    assert_close(m(dj.tensor(xv), dj.tensor([0, 1, 2])), tm(torch.tensor(xv), torch.tensor([0, 1, 2])))


def test_cross_entropy_errors():
    with pytest.raises(ValueError, match=r"Expected input batch_size \(3\) to match target batch_size \(2\)"):
        F.cross_entropy(dj.zeros(3, 4), dj.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="expected scalar type Long but found Int"):
        F.nll_loss(dj.zeros(2, 4), dj.tensor([0, 1], dtype=dj.int32))
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        F.cross_entropy(dj.zeros(2, 4), dj.tensor([0, 7]))


@pytest.mark.parametrize("target,ignore", [([0, 7], -100), ([-3, 1], -100), ([4, 1], -100), ([-100, 3], -100),
                                           ([5, 2], 5), ([-1, 2], -1), (3, -100), (4, -100), (-2, -100)])
def test_cross_entropy_target_bounds_like_torch(target, ignore):
    """Out-of-range classes raise PyTorch's IndexError (a negative one too, unless it is ignore_index);
    ignored entries pass; eagerly and inside a compiled step, which then applies nothing."""
    logits = RNG.standard_normal((2, 4) if isinstance(target, list) else (4,)).astype(np.float32)
    try:
        want = TF.cross_entropy(torch.tensor(logits), torch.tensor(target), ignore_index=ignore).item()
    except IndexError as exc:
        want = exc
    w = dj.tensor(np.ones(4, np.float32), requires_grad=True)

    def loss(y):
        out = F.cross_entropy(dj.tensor(logits) * w, y, ignore_index=ignore)
        out.backward()
        return out
    for fn in (loss, dj.compile(loss)):
        w.grad = None
        if isinstance(want, IndexError):
            bad = int(np.asarray(target).reshape(-1)[np.argmax([t != ignore and not 0 <= t < 4
                                                                for t in np.asarray(target).reshape(-1)])])
            with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
                fn(dj.tensor(target))
            assert w.grad is None
        else:
            got = fn(dj.tensor(target)).item()
            np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("n", [6, 5000])   # read through the buffer by max(), and by numpy past 4096 targets
@pytest.mark.parametrize("bad", [None, 7, -3])
@pytest.mark.parametrize("read", ["buffer", "view", "no buffer"])
def test_cross_entropy_target_bounds_every_path(n, bad, read, monkeypatch):
    """The bounds check's paths (a small batch's buffer, numpy for large ones, a view's targets, an array
    without a host buffer) agree with PyTorch: the same loss, or the same IndexError naming the class."""
    from dynajax.nn import _losses

    if read == "no buffer":
        def no_buffer(v):
            raise TypeError("no host buffer")
        monkeypatch.setattr(_losses, "memoryview", no_buffer, raising=False)
    target = RNG.integers(0, 5, 2 * n)
    if bad is not None:
        target[2 * (n // 2)] = bad   # an even position: the view below keeps it
    target[1] = 99                   # an odd one, which no case reads
    logits = RNG.standard_normal((n, 5)).astype(np.float32)
    picked = target[::2]
    try:
        want = TF.cross_entropy(torch.tensor(logits), torch.tensor(picked)).item()
    except IndexError as exc:
        want = exc
    y = dj.tensor(target)[::2] if read == "view" else dj.tensor(picked)
    if isinstance(want, IndexError):
        assert bad is not None
        with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
            F.cross_entropy(dj.tensor(logits), y)
    else:
        assert bad is None
        np.testing.assert_allclose(F.cross_entropy(dj.tensor(logits), y).item(), want, rtol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_binary_losses(reduction):
    p, y = RNG.random((3, 4)) * 0.9 + 0.05, (RNG.random((3, 4)) > 0.5).astype(np.float64)
    w, pw = RNG.random(4) + 0.5, RNG.random(4) + 0.5
    compare(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction),
            lambda a, b: TF.binary_cross_entropy(a, b, reduction=reduction), p, y)
    compare(lambda a, b: F.binary_cross_entropy(a, b, weight=dj.tensor(w), reduction=reduction),
            lambda a, b: TF.binary_cross_entropy(a, b, weight=torch.tensor(w), reduction=reduction), p, y)
    compare(lambda a, b: F.binary_cross_entropy_with_logits(a, b, pos_weight=dj.tensor(pw), reduction=reduction),
            lambda a, b: TF.binary_cross_entropy_with_logits(a, b, pos_weight=torch.tensor(pw), reduction=reduction),
            randn(3, 4) * 3, y, double=True)
    compare(lambda a, b: F.binary_cross_entropy_with_logits(a, b, weight=dj.tensor(w), reduction=reduction),
            lambda a, b: TF.binary_cross_entropy_with_logits(a, b, weight=torch.tensor(w), reduction=reduction),
            randn(3, 4) * 3, y)
    with pytest.raises(ValueError, match="Using a target size"):
        F.binary_cross_entropy(dj.full((3,), 0.5), dj.zeros(3, 1))


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
@pytest.mark.parametrize("reduction", ["batchmean", "sum", "mean", "none"])
def test_kl_div(reduction):
    x = np.log(RNG.random((3, 4)) + 0.1)
    t = RNG.random((3, 4))
    t[0, 0] = 0.0
    compare(lambda a: F.kl_div(a, dj.tensor(t), reduction=reduction),
            lambda a: TF.kl_div(a, torch.tensor(t), reduction=reduction), x)  # torch's d/dtarget at 0 is nan
    compare(lambda a, b: F.kl_div(a, b, reduction=reduction), lambda a, b: TF.kl_div(a, b, reduction=reduction),
            x, t + 0.1)
    compare(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=True),
            lambda a, b: TF.kl_div(a, b, reduction=reduction, log_target=True), x, np.log(t + 0.1))


def test_loss_modules_match_functional():
    x, y = randn(3, 4).astype(np.float32), randn(3, 4).astype(np.float32)
    for M, TM in [(nn.MSELoss, torch.nn.MSELoss), (nn.L1Loss, torch.nn.L1Loss), (nn.SmoothL1Loss, torch.nn.SmoothL1Loss),
                  (nn.HuberLoss, torch.nn.HuberLoss), (nn.BCEWithLogitsLoss, torch.nn.BCEWithLogitsLoss)]:
        assert_close(M(reduction="sum")(dj.tensor(x), dj.tensor(y)), TM(reduction="sum")(torch.tensor(x), torch.tensor(y)))
    lp = np.log(np.full((3, 4), 0.25, np.float32))
    assert_close(nn.KLDivLoss(reduction="batchmean")(dj.tensor(lp), dj.tensor(np.abs(y))),
                 torch.nn.KLDivLoss(reduction="batchmean")(torch.tensor(lp), torch.tensor(np.abs(y))))
    assert_close(nn.NLLLoss()(dj.tensor(lp), dj.tensor([0, 1, 3])), torch.nn.NLLLoss()(torch.tensor(lp), torch.tensor([0, 1, 3])))
    assert_close(nn.BCELoss()(dj.tensor(np.full(3, 0.3, np.float32)), dj.tensor(np.ones(3, np.float32))),
                 torch.nn.BCELoss()(torch.full((3,), 0.3), torch.ones(3)))
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        F.mse_loss(dj.zeros(2), dj.zeros(2), reduction="avg")
