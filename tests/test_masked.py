"""``dynajax.masked`` against ``torch.masked``: values (a fully masked-out row included, where PyTorch gives its
identity or NaN), a broadcast mask, and gradients of the kept elements (tests/test_opinfo.py runs torch's own
samples of the same ops)."""
import numpy as np
import pytest
import torch

import dynajax as dj


def assert_close(a, e, equal_nan=True):
    """Same dtype and shape, values to float64 precision (NaN where torch has NaN)."""
    an, en = a.detach().numpy(), e.detach().numpy()
    assert str(an.dtype) == str(en.dtype) and an.shape == en.shape, (an.dtype, an.shape, en.dtype, en.shape)
    np.testing.assert_allclose(an, en, rtol=1e-7, atol=1e-10, equal_nan=equal_nan)

X = np.random.default_rng(0).standard_normal((3, 4))
MASK = np.array([[True, False, True, True], [False, False, False, False], [True, True, False, True]])

REDUCTIONS = ["sum", "prod", "amax", "amin", "mean", "logsumexp", "norm", "var", "std"]
NORMALIZATIONS = ["softmax", "log_softmax", "softmin", "cumsum", "cumprod"]


def _both(name, dim, **kw):
    t = torch.tensor(X, requires_grad=True)
    d = dj.tensor(X, requires_grad=True)
    tm, dm = torch.tensor(MASK), dj.tensor(MASK)
    return t, d, getattr(torch.masked, name)(t, dim, mask=tm, **kw), getattr(dj.masked, name)(d, dim, mask=dm, **kw)


@pytest.mark.parametrize("name", REDUCTIONS + NORMALIZATIONS)
def test_values_and_gradients_match_torch(name):
    t, d, et, ed = _both(name, 1)
    assert_close(ed, et, equal_nan=True)
    w = np.random.default_rng(1).standard_normal(tuple(et.shape))
    keep = ~torch.isnan(et) & ~torch.isinf(et)   # (a fully masked row: no gradient to compare)
    (gt,) = torch.autograd.grad((torch.where(keep, et, 0) * torch.tensor(w)).sum(), t)
    (gd,) = dj.autograd.grad((dj.where(dj.tensor(keep.numpy()), ed, 0.0) * dj.tensor(w)).sum(), d)
    assert_close(gd, gt, equal_nan=True)


def test_all_dims_keepdim_and_broadcast_mask():
    row = np.array([True, False, True, False])
    for name in ("sum", "amax", "mean"):
        e = getattr(torch.masked, name)(torch.tensor(X), None, keepdim=True, mask=torch.tensor(row))
        a = getattr(dj.masked, name)(dj.tensor(X), None, keepdim=True, mask=dj.tensor(row))
        assert_close(a, e)


def test_argmax_median_logaddexp_normalize():
    t, d = torch.tensor(X), dj.tensor(X)
    tm, dm = torch.tensor(MASK), dj.tensor(MASK)
    assert_close(dj.masked.argmax(d, 1, mask=dm), torch.masked.argmax(t, 1, mask=tm))   # (float, as PyTorch)
    assert_close(dj.masked.median(d, 1, mask=dm), torch.masked.median(t, 1, mask=tm), equal_nan=True)
    assert_close(dj.masked.logaddexp(d, d * 2, input_mask=dm, other_mask=dm),
                 torch.masked.logaddexp(t, t * 2, input_mask=tm, other_mask=tm))
    assert_close(dj.masked.normalize(d, 2.0, 1, mask=dm), torch.masked.normalize(t, 2.0, 1, mask=tm), equal_nan=True)


def test_errors_match_torch():
    with pytest.raises(ValueError, match="Could not infer output dtype"):
        dj.masked.mean(dj.tensor([1, 2]), mask=dj.tensor([True, False]))
    with pytest.raises(IndexError):
        dj.masked.sum(dj.tensor(X), 2, mask=dj.tensor(MASK))
    with pytest.raises(IndexError):
        torch.masked.sum(torch.tensor(X), 2, mask=torch.tensor(MASK))
