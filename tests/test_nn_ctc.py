"""ctc_loss / nn.CTCLoss against PyTorch: losses for padded and concatenated targets, every reduction,
zero_infinity, unbatched input, and the gradient w.r.t. the logits under log_softmax (float64); the tape
against jax.vjp of the lowered graph and finite differences; errors."""
import numpy as np
import pytest

import dynajax as dj
from helpers import same

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
LOGITS = RNG.standard_normal((7, 3, 5))
TARGETS = np.array([[1, 2, 2], [3, 1, 0], [4, 0, 0]])
IL, TL = [7, 5, 4], [3, 2, 0]


def _loss_and_grad(L, targets, il, tl, **kw):
    x = L.tensor(LOGITS, requires_grad=True)
    loss = L.nn.functional.ctc_loss(x.log_softmax(2), targets, il, tl, **kw)
    w = L.tensor(np.linspace(0.5, 1.5, loss.numel()).reshape(tuple(loss.shape)))
    (loss * w).sum().backward()
    return np.asarray(loss.tolist()), np.asarray(x.grad.tolist())


@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("form", ["padded", "concatenated", "tensor lengths"])
def test_like_torch(form, reduction, zero_infinity):
    def run(L):
        if form == "padded":
            args = (L.tensor(TARGETS), IL, TL)
        elif form == "concatenated":
            args = (L.tensor([1, 2, 2, 3, 1]), IL, TL)
        else:
            args = (L.tensor(TARGETS), L.tensor(IL), L.tensor(TL))
        return _loss_and_grad(L, *args, reduction=reduction, zero_infinity=zero_infinity)
    for a, b in zip(run(torch), run(dj)):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)


def test_impossible_alignment_is_inf_or_zero_like_torch():
    # the first target needs 3 steps (a blank between the repeated 1s) but has 2
    for zi in (False, True):
        a, b = (L.nn.functional.ctc_loss(L.tensor(LOGITS).log_softmax(2), L.tensor([[1, 1], [2, 0], [3, 0]]),
                                         [2, 5, 4], [2, 1, 1], reduction="none", zero_infinity=zi).tolist()
                for L in (torch, dj))
        np.testing.assert_allclose(b, a, rtol=1e-10)
    ga = _loss_and_grad(torch, torch.tensor([[1, 1], [2, 0], [3, 0]]), [2, 5, 4], [2, 1, 1], zero_infinity=True)
    gb = _loss_and_grad(dj, dj.tensor([[1, 1], [2, 0], [3, 0]]), [2, 5, 4], [2, 1, 1], zero_infinity=True)
    np.testing.assert_allclose(gb[1], ga[1], rtol=1e-10, atol=1e-10)


def test_unbatched_and_module_like_torch():
    for kw in ({}, {"reduction": "none"}, {"blank": 4, "reduction": "sum"}):
        a, b = (L.nn.CTCLoss(**kw)(L.tensor(LOGITS[:, 0]).log_softmax(1), L.tensor([1, 2]), [7], [2]).tolist()
                for L in (torch, dj))
        np.testing.assert_allclose(b, a, rtol=1e-10)


def test_tape_matches_lowered_and_finite_differences():
    dj.testing.check_grads(lambda x: dj.nn.functional.ctc_loss(x.log_softmax(2), dj.tensor(TARGETS), IL, TL),
                           [LOGITS], order=1)


ERRORS = {
    "blank": lambda L: L.nn.functional.ctc_loss(L.ones(3, 1, 2).log_softmax(2), L.tensor([[1]]), [3], [1], blank=2),
    "input lengths": lambda L: L.nn.functional.ctc_loss(L.ones(3, 2, 2).log_softmax(2), L.tensor([[1], [1]]),
                                                        [3], [1, 1]),
    "reduction": lambda L: L.nn.functional.ctc_loss(L.ones(3, 1, 2).log_softmax(2), L.tensor([[1]]), [3], [1],
                                                    reduction="foo"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_like_torch(case):
    same(ERRORS[case])
