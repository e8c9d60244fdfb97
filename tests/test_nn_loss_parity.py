"""Losses side by side with PyTorch: options, shapes, gradients, dtypes, errors and modules."""
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F
from helpers import assert_close, compare

RNG = np.random.default_rng(7)
W4 = RNG.random(4) + 0.5


def randn(*s):
    return RNG.standard_normal(s)


def both(name, *args, **kw):
    """``name`` of dynajax and of torch on the same numpy ``args`` / ``kw``: (result or exception) pairs."""
    out = []
    for mod, conv in ((F, dj.tensor), (TF, torch.tensor)):
        a = [conv(x) if isinstance(x, np.ndarray) else x for x in args]
        k = {n: conv(v) if isinstance(v, np.ndarray) else v for n, v in kw.items()}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out.append(getattr(mod, name)(*a, **k))
        except Exception as exc:   # noqa: BLE001 - compared below
            out.append(exc)
    return out


def same_error(name, *args, match=None, **kw):
    got, want = both(name, *args, **kw)
    assert isinstance(want, Exception), f"torch accepted: {want}"
    assert type(got) is type(want), f"dynajax: {got!r}, torch: {want!r}"
    if match:
        assert match in str(got) and match in str(want), (str(got), str(want))


def same_value(name, *args, **kw):
    got, want = both(name, *args, **kw)
    assert not isinstance(want, Exception), want
    assert not isinstance(got, Exception), got
    assert_close(got, want)


# ---------------------------------------------------------------- class-index targets
@pytest.mark.parametrize("shape", [(5, 4), (2, 4, 3, 2), (4,), (0, 4)])
@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_class_targets_options(fn, shape):
    tshape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    t = RNG.integers(0, 4, tshape)
    cases = [{}, {"reduction": "sum"}, {"reduction": "none"}, {"weight": W4}, {"ignore_index": 1},
             {"weight": W4, "ignore_index": 2, "reduction": "none"}, {"reduce": False}, {"size_average": False}]
    if fn == "cross_entropy":
        cases += [{"label_smoothing": 0.2}, {"label_smoothing": 0.2, "weight": W4, "ignore_index": 1},
                  {"label_smoothing": 0.3, "reduction": "sum"}]
    x = randn(*shape)
    for kw in cases:
        w = kw.get("weight")
        compare(lambda a: getattr(F, fn)(a, dj.tensor(t), **dict(kw, weight=None if w is None else dj.tensor(w))),
                lambda a: getattr(TF, fn)(a, torch.tensor(t), **dict(kw, weight=None if w is None else
                                                                    torch.tensor(w))), x)


_ALL_IGNORED = [(fn, kw) for fn in ("cross_entropy", "nll_loss")
                for kw in ({}, {"weight": W4}, {"label_smoothing": 0.1}, {"label_smoothing": 0.1, "weight": W4},
                           {"spatial": True}, {"unbatched": True}, {"unbatched": True, "label_smoothing": 0.1})
                if fn == "cross_entropy" or "label_smoothing" not in kw]   # (nll_loss has no label_smoothing)


@pytest.mark.parametrize("fn,kw", _ALL_IGNORED)
def test_all_targets_ignored_mean_is_nan_with_zero_grad(fn, kw):
    """Every target ignored: torch's mean is nan, its input gradient 0 (was nan), on the fast (N, C) path too."""
    kw = dict(kw)
    shape = (4,) if kw.pop("unbatched", False) else (2, 4, 3) if kw.pop("spatial", False) else (3, 4)
    t = np.full(shape[:1] + shape[2:] if len(shape) > 1 else (), -100)
    w = kw.pop("weight", None)
    compare(lambda a: getattr(F, fn)(a, dj.tensor(t), None if w is None else dj.tensor(w), **kw),
            lambda a: getattr(TF, fn)(a, torch.tensor(t), None if w is None else torch.tensor(w), **kw), randn(*shape))


def test_ignored_target_at_minus_inf_logit():
    """An ignored entry whose (placeholder) class has probability 0 adds nothing (was nan)."""
    x = randn(2, 3, 2)
    x[0, 0, 0] = -np.inf
    t = np.array([[-100, 1], [2, 0]])
    same_value("cross_entropy", x, t, weight=W4[:3])
    same_value("nll_loss", TF.log_softmax(torch.tensor(x), 1).numpy(), t, weight=W4[:3])


def test_class_targets_1d_input_with_size_1_target():
    for fn in ("cross_entropy", "nll_loss"):
        for kw in ({}, {"reduction": "none"}, {"weight": W4}, {"weight": W4, "reduction": "none"}):
            got, want = both(fn, randn(4), np.array([2]), **kw)
            assert_close(got, want)
            assert got.shape == want.shape == ()


def test_byte_targets_like_torch():
    t = RNG.integers(0, 4, 5).astype(np.uint8)
    same_value("cross_entropy", randn(5, 4), t)
    same_value("nll_loss", randn(5, 4), t, weight=W4)
    same_error("cross_entropy", randn(2, 4, 3), RNG.integers(0, 4, (2, 3)).astype(np.uint8), match="expected scalar type Long but found Byte")


@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_class_target_errors(fn):
    same_error(fn, randn(5, 4), RNG.integers(0, 4, (5, 2)), match="multi-target not supported")
    same_error(fn, randn(4), RNG.integers(0, 4, 3), match="1D target must have size 1, but got target size: 3")
    same_error(fn, randn(3, 4, 5), RNG.integers(0, 4, 3), match="Expected target size [3, 5], got [3]")
    same_error(fn, randn(3, 4, 5), RNG.integers(0, 4, (3, 4)), match="Expected target size [3, 5], got [3, 4]")
    same_error(fn, randn(5, 4), RNG.integers(0, 4, 3), match="Expected input batch_size (5) to match target")
    same_error(fn, randn(5, 4), RNG.integers(0, 4, 5), reduction="avg", match="avg is not a valid value")
    same_error(fn, randn(5, 4), RNG.integers(0, 4, 5).astype(np.int32))   # torch: "... Long or Byte, but got Int"
    same_error(fn, randn(5, 4), np.array([0, 1, 2, 3, 4]), match="Target 4 is out of bounds")
    same_error(fn, randn(5, 4).astype(np.float32), RNG.integers(0, 4, 5), weight=W4,
               match="expected scalar type Float but found Double")


def test_nll_loss_0d_input_error():
    same_error("nll_loss", np.array(1.0), np.array(0), match="Expected 1 or more dimensions (got 0)")


def test_cross_entropy_option_errors():
    same_error("cross_entropy", randn(3, 4), RNG.integers(0, 4, 3), label_smoothing=1.5,
               match="label_smoothing must be between 0.0 and 1.0. Got: 1.5")
    same_error("cross_entropy", randn(3, 4), RNG.random((3, 4)), ignore_index=1,
               match="ignore_index is not supported for floating point target")
    same_value("cross_entropy", randn(3, 4), RNG.random((3, 4)), ignore_index=-5)
    same_error("cross_entropy", randn(3, 4), RNG.random((3, 5)))


@pytest.mark.parametrize("shape", [(5, 4), (2, 4, 3), (4,), (0, 4)])
def test_cross_entropy_probability_targets(shape):
    p = RNG.random(shape)
    for kw in ({}, {"reduction": "none"}, {"reduction": "sum"}, {"label_smoothing": 0.2},
               {"label_smoothing": 0.2, "weight": True}):
        w = kw.pop("weight", None) and W4
        compare(lambda a, b: F.cross_entropy(a, b, None if w is None else dj.tensor(w), **kw),
                lambda a, b: TF.cross_entropy(a, b, None if w is None else torch.tensor(w), **kw), randn(*shape), p)


def test_cross_entropy_float32_result_dtype():
    x, t = randn(5, 4).astype(np.float32), RNG.integers(0, 4, 5)
    for kw in ({}, {"weight": W4.astype(np.float32)}, {"label_smoothing": 0.1}, {"reduction": "none"}):
        got, want = both("cross_entropy", x, t, **kw)
        assert_close(got, want)   # dtypes too


# ---------------------------------------------------------------- pointwise
@pytest.mark.parametrize("name,kw", [("mse_loss", {}), ("l1_loss", {}), ("smooth_l1_loss", {"beta": 0.5}),
                                     ("smooth_l1_loss", {"beta": 0.0}), ("huber_loss", {"delta": 0.7}),
                                     ("soft_margin_loss", {})])
def test_pointwise_reductions(name, kw):
    x, y = randn(3, 4), randn(3, 4)
    legacy = name != "huber_loss"
    for red in ({"reduction": "none"}, {"reduction": "mean"}, {"reduction": "sum"},
                *([{"reduce": False}, {"size_average": False}] if legacy else [])):
        compare(lambda a: getattr(F, name)(a, dj.tensor(y), **kw, **red),
                lambda a: getattr(TF, name)(a, torch.tensor(y), **kw, **red), x)
    compare(lambda a: getattr(F, name)(a, dj.tensor(y[:0]), **kw),
            lambda a: getattr(TF, name)(a, torch.tensor(y[:0]), **kw), x[:0])   # empty: nan mean


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "huber_loss"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_pointwise_weight(name, reduction):
    """torch's mse/l1/huber take a per-element ``weight`` (mse/l1 mean by its sum, huber by the count)."""
    x, y, w = randn(3, 4), randn(3, 4), RNG.random((3, 4))
    compare(lambda a, b: getattr(F, name)(a, b, reduction=reduction, weight=dj.tensor(w)),
            lambda a, b: getattr(TF, name)(a, b, reduction=reduction, weight=torch.tensor(w)), x, y)
    same_error(name, x, y, weight=w[0], match="Weights and input must have the same size.")


def test_huber_loss_signature():
    """torch: ``huber_loss(input, target, reduction, delta, weight)``, no legacy size_average/reduce."""
    x, y = randn(3, 4), randn(3, 4)
    same_value("huber_loss", x, y, "sum", 0.5)
    same_error("huber_loss", x, y, size_average=False)
    same_error("huber_loss", x, y, delta=0.0, match="huber_loss does not support non-positive values for delta.")
    same_error("smooth_l1_loss", x, y, beta=-1.0, match="smooth_l1_loss does not support negative values for beta.")


# ---------------------------------------------------------------- binary
def test_binary_cross_entropy_saturated_probabilities_grad():
    """A probability of exactly 0 or 1 has torch's finite gradient (was nan)."""
    p, y = np.array([0.0, 1.0, 0.0, 1.0, 0.3]), np.array([0.0, 1.0, 1.0, 0.0, 0.6])
    for kw in ({}, {"reduction": "none"}, {"reduction": "sum"}):
        compare(lambda a, b: F.binary_cross_entropy(a, b, **kw), lambda a, b: TF.binary_cross_entropy(a, b, **kw),
                p, y, rtol=1e-7, atol=1e-3)
    compare(lambda a, b: F.binary_cross_entropy(a, b, dj.tensor(W4[:1])),
            lambda a, b: TF.binary_cross_entropy(a, b, torch.tensor(W4[:1])), RNG.random(5) * 0.9 + 0.05, y,
            double=True)


def test_binary_cross_entropy_errors_and_options():
    p, y = RNG.random((3, 4)) * 0.9 + 0.05, RNG.random((3, 4))
    same_error("binary_cross_entropy", p.astype(np.float32), y, match="Found dtype Double but expected Float")
    same_error("binary_cross_entropy", p, (y > 0.5).astype(np.int64), match="Found dtype Long but expected Double")
    same_value("binary_cross_entropy", p, y, reduce=False)
    for red in ("mean", "sum", "none"):
        compare(lambda a, b: F.binary_cross_entropy_with_logits(a, b, dj.tensor(W4), reduction=red,
                                                                pos_weight=dj.tensor(W4[::-1].copy())),
                lambda a, b: TF.binary_cross_entropy_with_logits(a, b, torch.tensor(W4), reduction=red,
                                                                 pos_weight=torch.tensor(W4[::-1].copy())),
                randn(3, 4) * 20, y)


# ---------------------------------------------------------------- kl_div and the rest
@pytest.mark.parametrize("reduction", ["none", "mean", "sum", "batchmean"])
def test_kl_div_negative_and_zero_targets(reduction):
    """``target * log(target)`` is torch's xlogy: 0 at 0, nan below 0 (was 0)."""
    x, t = np.log(RNG.random((3, 4)) + 0.1), RNG.random((3, 4))
    t[0, 0], t[1, 1] = 0.0, -0.5
    same_value("kl_div", x, t, reduction=reduction)
    compare(lambda a: F.kl_div(a, dj.tensor(np.abs(t)), reduction=reduction),
            lambda a: TF.kl_div(a, torch.tensor(np.abs(t)), reduction=reduction), x)
    compare(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=True),
            lambda a, b: TF.kl_div(a, b, reduction=reduction, log_target=True), x, t)


def test_rank_checks():
    same_error("margin_ranking_loss", randn(5, 1), randn(5), np.sign(randn(5)),
               match="All input tensors should have same dimension")
    same_error("triplet_margin_loss", randn(2, 3), randn(3), randn(3),
               match="expected to have the same number of dimensions, but got: anchor 2D, positive 1D")


def test_gaussian_nll_loss_var_forms_and_errors():
    x, y = randn(5, 3), randn(5, 3)
    same_value("gaussian_nll_loss", x, y, 0.5)                       # a float variance (was AttributeError)
    same_value("gaussian_nll_loss", randn(4, 3, 2), randn(4, 3, 2), RNG.random((4, 1, 2)), full=True)
    compare(lambda a, v: F.gaussian_nll_loss(a, dj.tensor(y), v, reduction="sum"),
            lambda a, v: TF.gaussian_nll_loss(a, torch.tensor(y), v, reduction="sum"), x, RNG.random(5))
    same_error("gaussian_nll_loss", x, y, np.array([-1.0, 1, 1, 1, 1]), match="var has negative entry/entries")
    same_error("gaussian_nll_loss", x, y, -1.0, match="var has negative entry/entries")
    same_error("gaussian_nll_loss", x, y, RNG.random(2), match="var is of incorrect size")
    same_error("gaussian_nll_loss", x, y, RNG.random((5, 3)), reduction="x", match="x is not valid")


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_other_losses_match(reduction):
    t = np.sign(randn(5))
    compare(lambda a, b: F.margin_ranking_loss(a, b, dj.tensor(t), 0.3, reduction=reduction),
            lambda a, b: TF.margin_ranking_loss(a, b, torch.tensor(t), 0.3, reduction=reduction), randn(5), randn(5))
    compare(lambda a, b: F.cosine_embedding_loss(a, b, dj.tensor(t), 0.2, reduction=reduction),
            lambda a, b: TF.cosine_embedding_loss(a, b, torch.tensor(t), 0.2, reduction=reduction),
            randn(5, 3), randn(5, 3))
    compare(lambda a, b, c: F.triplet_margin_loss(a, b, c, swap=True, p=1, reduction=reduction),
            lambda a, b, c: TF.triplet_margin_loss(a, b, c, swap=True, p=1, reduction=reduction),
            randn(5, 3), randn(5, 3), randn(5, 3))
    y = RNG.poisson(2, (5, 3)).astype(np.float64)
    compare(lambda a: F.poisson_nll_loss(a, dj.tensor(y), log_input=False, full=True, reduction=reduction),
            lambda a: TF.poisson_nll_loss(a, torch.tensor(y), log_input=False, full=True, reduction=reduction),
            RNG.random((5, 3)) + 0.1)
    y = (randn(5, 3) > 0).astype(np.float64)
    w = RNG.random(3)
    compare(lambda a: F.multilabel_soft_margin_loss(a, dj.tensor(y), dj.tensor(w), reduction=reduction),
            lambda a: TF.multilabel_soft_margin_loss(a, torch.tensor(y), torch.tensor(w), reduction=reduction),
            randn(5, 3))
    compare(lambda a: F.hinge_embedding_loss(a, dj.tensor(np.sign(y - 0.5)), 0.5, reduction=reduction),
            lambda a: TF.hinge_embedding_loss(a, torch.tensor(np.sign(y - 0.5)), 0.5, reduction=reduction),
            randn(5, 3))


# ---------------------------------------------------------------- modules
def test_loss_module_reprs_and_buffers():
    for name, kw in [("CrossEntropyLoss", {"label_smoothing": 0.1}), ("HuberLoss", {"delta": 2.0}),
                     ("TripletMarginLoss", {"margin": 2.0}), ("NLLLoss", {"ignore_index": 3}),
                     ("GaussianNLLLoss", {"full": True}), ("KLDivLoss", {"log_target": True})]:
        assert repr(getattr(nn, name)(**kw)) == repr(getattr(torch.nn, name)(**kw))
    m = nn.MultiLabelSoftMarginLoss(weight=dj.ones(3))
    assert list(m.state_dict()) == list(torch.nn.MultiLabelSoftMarginLoss(weight=torch.ones(3)).state_dict())
    x, y = randn(4, 3), (randn(4, 3) > 0).astype(np.float64)
    assert_close(m(dj.tensor(x), dj.tensor(y)),
                 torch.nn.MultiLabelSoftMarginLoss(weight=torch.ones(3, dtype=torch.float64))(torch.tensor(x),
                                                                                              torch.tensor(y)))
    with pytest.raises(TypeError):
        nn.GaussianNLLLoss(True)   # keyword-only in torch
    v = RNG.random((4, 3))
    assert_close(nn.GaussianNLLLoss(full=True, reduction="sum")(dj.tensor(x), dj.tensor(y), dj.tensor(v)),
                 torch.nn.GaussianNLLLoss(full=True, reduction="sum")(torch.tensor(x), torch.tensor(y),
                                                                      torch.tensor(v)))
    assert_close(nn.HuberLoss("sum", 0.5)(dj.tensor(x), dj.tensor(y)),
                 torch.nn.HuberLoss("sum", 0.5)(torch.tensor(x), torch.tensor(y)))
