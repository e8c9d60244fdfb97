"""rms_norm / nn.RMSNorm, embedding_bag / nn.EmbeddingBag and multi_margin_loss / nn.MultiMarginLoss against
PyTorch: values, dtypes, errors, gradients in float64; the tape against jax.vjp of the lowered graph."""
import numpy as np
import pytest

import dynajax as dj
from helpers import compare, raises_like_torch, same

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4))
W4 = RNG.uniform(0.5, 2.0, 4)
TABLE = RNG.standard_normal((10, 3))


# ---------------------------------------------------------------- rms_norm
RMS = {
    "last dim": lambda L: L.nn.functional.rms_norm(L.tensor(X, dtype=L.float32), (4,)),
    "two dims weight eps": lambda L: L.nn.functional.rms_norm(L.tensor(X), [3, 4], L.ones(3, 4, dtype=L.float64) * 2,
                                                               eps=0.1),
    "half": lambda L: L.nn.functional.rms_norm(L.tensor(X, dtype=L.float16), (4,)),
    "weight dtype": lambda L: L.nn.functional.rms_norm(L.tensor(X, dtype=L.float32), (4,), L.ones(4, dtype=L.float64)),
    "shape": lambda L: L.nn.functional.rms_norm(L.tensor(X), (5,)),
    "weight shape": lambda L: L.nn.functional.rms_norm(L.tensor(X), (4,), L.ones(3)),
    "int shape": lambda L: L.nn.functional.rms_norm(L.tensor(X), 4),
    "empty shape": lambda L: L.nn.functional.rms_norm(L.tensor(X), ()),
    "module": lambda L: L.nn.RMSNorm(4, eps=1e-3)(L.tensor(X, dtype=L.float32)),
}


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
@pytest.mark.parametrize("case", sorted(RMS))
def test_rms_norm_like_torch(case):
    expected, actual = (_outcome(L, RMS[case]) for L in (torch, dj))
    assert expected[0] == actual[0]
    if expected[0] == "ok":
        assert expected[2] == actual[2]
        np.testing.assert_allclose(actual[1], expected[1], rtol=2e-3 if case == "half" else 1e-6, atol=1e-6)
    else:
        assert expected == actual


def _outcome(L, fn):
    try:
        r = fn(L)
    except Exception as e:   # noqa: BLE001 -- compared
        return type(e).__name__, str(e)
    return "ok", np.asarray(r.detach().float().tolist()), str(r.dtype).split(".")[-1]


def test_rms_norm_gradients():
    compare(lambda x, w: dj.nn.functional.rms_norm(x, (4,), w), lambda x, w: torch.nn.functional.rms_norm(x, (4,), w),
            X, W4, double=True)
    dj.testing.check_grads(lambda x, w: dj.nn.functional.rms_norm(x, (3, 4), w.expand(3, 4)), [X, W4])


# ---------------------------------------------------------------- embedding_bag
def _bag(L, **kw):
    return lambda w: L.nn.functional.embedding_bag(L.tensor([1, 2, 4, 5, 4, 3, 2, 9]), w, L.tensor([0, 3, 3, 6]),
                                                   **kw)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_like_torch(mode, padding_idx):
    compare(_bag(dj, mode=mode, padding_idx=padding_idx), _bag(torch, mode=mode, padding_idx=padding_idx), TABLE)


BAGS = {
    "2-d input": lambda L: L.nn.functional.embedding_bag(L.tensor([[1, 2], [4, 5]]), L.tensor(TABLE)),
    "per sample weights": lambda L: L.nn.functional.embedding_bag(
        L.tensor([[1, 2], [4, 5]]), L.tensor(TABLE), mode="sum",
        per_sample_weights=L.tensor([[1.0, 2], [3, 4]], dtype=L.float64)),
    "per sample weights dtype": lambda L: L.nn.functional.embedding_bag(
        L.tensor([[1, 2], [4, 5]]), L.tensor(TABLE), mode="sum", per_sample_weights=L.tensor([[1.0, 2], [3, 4]])),
    "include last offset": lambda L: L.nn.functional.embedding_bag(
        L.tensor([1, 2, 4, 5]), L.tensor(TABLE), L.tensor([0, 2, 2, 4]), include_last_offset=True, mode="max"),
    "module": lambda L: L.nn.EmbeddingBag(10, 3, mode="sum", _weight=L.tensor(TABLE))(L.tensor([1, 2, 3]),
                                                                                        L.tensor([0, 1])),
    "no offsets": lambda L: L.nn.functional.embedding_bag(L.tensor([1, 2]), L.tensor(TABLE)),
    "2-d with offsets": lambda L: L.nn.functional.embedding_bag(L.tensor([[1, 2]]), L.tensor(TABLE), L.tensor([0])),
    "weights with mean": lambda L: L.nn.functional.embedding_bag(
        L.tensor([1, 2]), L.tensor(TABLE), L.tensor([0]), per_sample_weights=L.ones(2, dtype=L.float64)),
    "last offset": lambda L: L.nn.functional.embedding_bag(L.tensor([1, 2]), L.tensor(TABLE), L.tensor([0, 3])),
    "mode": lambda L: L.nn.functional.embedding_bag(L.tensor([1, 2]), L.tensor(TABLE), L.tensor([0]), mode="foo"),
    "float indices": lambda L: L.nn.functional.embedding_bag(L.tensor([1.0]), L.tensor(TABLE), L.tensor([0])),
}


@pytest.mark.parametrize("case", sorted(BAGS))
def test_embedding_bag_forms_like_torch(case):
    same(lambda L: np.round(BAGS[case](L).tolist(), 12).tolist())


def test_embedding_bag_first_offset_raises_like_torch():
    raises_like_torch(lambda L: L.nn.functional.embedding_bag(L.tensor([1, 2]), L.tensor(TABLE), L.tensor([1])),
                      RuntimeError, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                      "from position 0. However, got 1")


def test_embedding_bag_tape_matches_lowered():
    for mode in ("sum", "mean", "max"):
        dj.testing.check_grads(_bag(dj, mode=mode), [TABLE])


# ---------------------------------------------------------------- multi_margin_loss
T = np.array([1, 3, 0])
S = RNG.standard_normal((3, 4))


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_multi_margin_loss_like_torch(p, reduction, weighted):
    def f(L):   # (the weight takes no gradient: PyTorch refuses one that requires it)
        return lambda x: L.nn.functional.multi_margin_loss(x, L.tensor(T), p=p, margin=0.7,
                                                           weight=L.tensor(W4) if weighted else None,
                                                           reduction=reduction)
    compare(f(dj), f(torch), S)


MARGIN = {
    "p": lambda L: L.nn.functional.multi_margin_loss(L.ones(2, 4), L.tensor([1, 3]), p=3),
    "target size": lambda L: L.nn.functional.multi_margin_loss(L.ones(2, 4), L.tensor([1, 3, 2])),
    "target range": lambda L: L.nn.functional.multi_margin_loss(L.ones(2, 4), L.tensor([1, 4])),
    "weight size": lambda L: L.nn.functional.multi_margin_loss(L.ones(2, 4), L.tensor([1, 3]), weight=L.ones(3)),
    "reduction": lambda L: L.nn.functional.multi_margin_loss(L.ones(2, 4), L.tensor([1, 3]), reduction="foo"),
    "1-d": lambda L: L.nn.functional.multi_margin_loss(L.tensor([0.1, 0.5, -0.2]), L.tensor(1), reduction="none"),
    "3-d": lambda L: L.nn.functional.multi_margin_loss(L.ones(2, 3, 4), L.tensor([1, 3])),
    "float target": lambda L: L.nn.functional.multi_margin_loss(L.ones(2, 4), L.tensor([1.0, 3])),
    "int input": lambda L: L.nn.functional.multi_margin_loss(L.ones(2, 4, dtype=L.int64), L.tensor([1, 3])),
    "module": lambda L: L.nn.MultiMarginLoss(p=2, margin=0.5)(L.tensor(S), L.tensor(T)),
}


@pytest.mark.parametrize("case", sorted(MARGIN))
def test_multi_margin_loss_forms_like_torch(case):
    same(lambda L: round(MARGIN[case](L).item(), 12) if MARGIN[case](L).numel() == 1 else None)


def test_multi_margin_loss_tape_matches_lowered():
    dj.testing.check_grads(lambda x: dj.nn.functional.multi_margin_loss(x, dj.tensor(T), p=2, weight=dj.tensor(W4)),
                           [S])


def test_multi_margin_loss_refuses_a_weight_requiring_grad_like_torch():
    raises_like_torch(lambda L: L.nn.functional.multi_margin_loss(L.ones(2, 4), L.tensor([1, 3]),
                                                                  weight=L.ones(4, requires_grad=True)),
                      RuntimeError, "is not differentiable with respect to argument 'weight'")
