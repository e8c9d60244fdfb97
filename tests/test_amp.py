"""Mixed precision (``dynajax.amp``): autocast and GradScaler side by side with PyTorch's CPU autocast."""
import warnings

import numpy as np
import pytest

import dynajax as dj
import dynajax.nn as nn
import dynajax.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

BF16_TOL = dict(rtol=2e-2, atol=2e-2)


def _arr(t):
    return np.asarray((t.detach().float() if isinstance(t, torch.Tensor) else t.detach().float()).numpy())


def _both(seed=0):
    """The same float32 data in torch and dynajax."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal((6, 8)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    img = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    k = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    y = rng.integers(0, 6, 4)
    return [(lib, fn, {n: lib.tensor(v) for n, v in dict(x=x, w=w, b=b, img=img, k=k, y=y).items()})
            for lib, fn in ((torch, TF), (dj, F))]


CASES = {
    "linear": lambda lib, f, t: f.linear(t["x"], t["w"], t["b"]),
    "matmul": lambda lib, f, t: t["x"] @ t["w"].T,
    "bmm": lambda lib, f, t: lib.bmm(t["x"][None], t["w"].T[None]),
    "einsum": lambda lib, f, t: lib.einsum("ij,kj->ik", t["x"], t["w"]),
    "conv2d": lambda lib, f, t: f.conv2d(t["img"], t["k"]),
    "relu of linear": lambda lib, f, t: f.relu(f.linear(t["x"], t["w"])),
    "softmax of linear": lambda lib, f, t: f.softmax(f.linear(t["x"], t["w"]), -1),
    "cross_entropy of linear": lambda lib, f, t: f.cross_entropy(f.linear(t["x"], t["w"]), t["y"]),
    "mse_loss of bf16": lambda lib, f, t: f.mse_loss(t["x"].to(lib.bfloat16), t["x"].to(lib.bfloat16) * 0.5),
    "bce_with_logits": lambda lib, f, t: f.binary_cross_entropy_with_logits(t["x"].to(lib.bfloat16),
                                                                            t["x"].sigmoid()),
    "linear of float64": lambda lib, f, t: f.linear(t["x"].double(), t["w"].double()),
    "add (not cast)": lambda lib, f, t: t["x"] + 1,
    "tanh (not cast)": lambda lib, f, t: t["x"].tanh(),
    "prod": lambda lib, f, t: t["x"].to(lib.bfloat16).prod(),
}


@pytest.mark.parametrize("name", list(CASES))
def test_autocast_cpu_gives_torchs_dtypes_and_values(name):
    got = {}
    for lib, f, t in _both():
        with lib.autocast("cpu"):
            got[lib.__name__] = CASES[name](lib, f, t)
    a, b = got["torch"], got["dynajax"]
    assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1], (a.dtype, b.dtype)
    np.testing.assert_allclose(_arr(b), _arr(a), **BF16_TOL)


def test_autocast_training_matches_torch_and_grads_stay_float32():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 10)).astype(np.float32)
    y = rng.integers(0, 3, 16)
    dj.manual_seed(0)
    m = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
    tm = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    with torch.no_grad():
        for tp, p in zip(tm.parameters(), m.parameters()):
            tp.copy_(torch.tensor(np.asarray(p.detach().numpy())))
    opt, topt = dj.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(tm.parameters(), lr=0.1)
    for _ in range(5):
        for lib, model, o in ((torch, tm, topt), (dj, m, opt)):
            o.zero_grad()
            with lib.autocast("cpu", dtype=lib.bfloat16):
                out = model(lib.tensor(x))
                loss = lib.nn.functional.cross_entropy(out, lib.tensor(y))
            assert str(out.dtype).endswith("bfloat16") and str(loss.dtype).endswith("float32")
            loss.backward()
            o.step()
        for tp, p in zip(tm.parameters(), m.parameters()):
            assert p.grad.dtype == dj.float32 and p.dtype == dj.float32
            np.testing.assert_allclose(_arr(p), _arr(tp), rtol=2e-2, atol=5e-3)


def test_the_backward_runs_outside_autocast_wherever_it_is_called():
    rng = np.random.default_rng(2)
    x = dj.tensor(rng.standard_normal((4, 8)).astype(np.float32))
    w = dj.tensor(rng.standard_normal((3, 8)).astype(np.float32), requires_grad=True)
    grads = []
    for inside in (True, False):
        w.grad = None
        with dj.autocast("cpu"):
            loss = F.linear(x, w).float().pow(2).sum()
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        grads.append(np.asarray(w.grad.numpy()))
    assert w.grad.dtype == dj.float32
    np.testing.assert_array_equal(grads[0], grads[1])
    # and the tape agrees with jax.grad of the lowered graph, casts included
    with dj.autocast("cpu"):
        low = dj.lower(lambda w: F.linear(x, w).float().pow(2).sum(), w)
    import jax
    np.testing.assert_allclose(np.asarray(jax.grad(low.fn)(w._value)), grads[0], rtol=1e-6)


def test_compiled_steps_under_autocast_match_eager_and_recompile_when_it_toggles():
    rng = np.random.default_rng(3)
    x = dj.tensor(rng.standard_normal((8, 6)).astype(np.float32))
    y = dj.tensor(rng.integers(0, 4, 8))

    def make():
        dj.manual_seed(0)
        m = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4))
        return m, dj.optim.Adam(m.parameters(), lr=0.01)

    def step_of(m, opt):
        def step(x, y):
            opt.zero_grad()
            with dj.autocast("cpu", enabled=amp_on[0]):
                loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            return loss
        return step

    amp_on = [True]
    schedule = [True, True, False, True, False, True]
    results = {}
    for mode in ("eager", "compiled", "replay"):
        m, opt = make()
        step = step_of(m, opt)
        if mode != "eager":
            step = dj.compile(step, replay=(mode == "replay"))
        losses = []
        for on in schedule:
            amp_on[0] = on
            losses.append(float(step(x, y)))
        results[mode] = (losses, [np.asarray(p.detach().numpy()) for p in m.parameters()])
        if mode == "compiled":
            assert step.stats.compiles == 2   # one graph with the casts, one without
    # compiled steps round every bfloat16 value as eager kernels do (no XLA excess precision): the same numbers
    for mode in ("compiled", "replay"):
        np.testing.assert_allclose(results[mode][0], results["eager"][0], rtol=1e-6)
        for a, b in zip(results[mode][1], results["eager"][1]):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # and bfloat16 really ran: on the same weights, the loss under autocast is not float32's
    with dj.autocast("cpu"):
        low = float(F.cross_entropy(m(x), y))
    full = float(F.cross_entropy(m(x), y))
    assert low == pytest.approx(full, rel=2e-2) and abs(low - full) > 1e-5


def test_autocast_state_queries_nesting_and_decorator_as_torch():
    for lib in (torch, dj):
        assert not lib.is_autocast_enabled("cpu")
        with lib.autocast("cpu", dtype=lib.float16):
            assert lib.is_autocast_enabled("cpu")
            assert lib.get_autocast_dtype("cpu") == lib.float16
            with lib.autocast("cpu", enabled=False):
                assert not lib.is_autocast_enabled("cpu")
                assert lib.ones(2, 2).matmul(lib.ones(2, 2)).dtype == lib.float32
            assert lib.ones(2, 2).matmul(lib.ones(2, 2)).dtype == lib.float16
        assert not lib.is_autocast_enabled("cpu")
        assert lib.get_autocast_dtype("cpu") == lib.bfloat16

        @lib.autocast("cpu")
        def f(a):
            return a @ a
        assert f(lib.ones(2, 2)).dtype == lib.bfloat16
        assert (lib.ones(2, 2) @ lib.ones(2, 2)).dtype == lib.float32


def test_autocast_cuda_without_a_gpu_warns_and_does_nothing_as_torch():
    import jax
    if jax.default_backend() != "cpu":
        pytest.skip("this machine runs ops on an accelerator: autocast('cuda') applies")
    for lib in (torch, dj):
        with pytest.warns(UserWarning, match="Disabling"):
            ctx = lib.autocast("cuda")
        with ctx:
            assert (lib.ones(2, 2) @ lib.ones(2, 2)).dtype == lib.float32
        with pytest.warns(UserWarning, match="Disabling"):
            assert not lib.amp.GradScaler("cuda").is_enabled()
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'foo'"):
        dj.autocast("foo")


def _scaler_run(lib, compiled=False):
    """Five float32 SGD steps through a GradScaler("cpu"), an inf gradient at the third: the scale, the growth
    tracker and the weight after each."""
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((3, 5)).astype(np.float32)
    xs = rng.standard_normal((5, 2, 5)).astype(np.float32)
    xs[2, 0, 0] = np.inf
    w = lib.tensor(w0, requires_grad=True)
    opt = lib.optim.SGD([w], lr=0.1, momentum=0.9)
    scaler = lib.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)

    def step(x):
        opt.zero_grad()
        loss = (x @ w.T).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    if compiled:
        step = dj.compile(step)
    out = []
    for x in xs:
        step(lib.tensor(x))
        out.append((scaler.get_scale(), scaler._get_growth_tracker(), _arr(w).copy()))
    return out, scaler.state_dict()


@pytest.mark.parametrize("compiled", [False, True])
def test_grad_scaler_skips_inf_steps_and_adapts_the_scale_as_torch(compiled):
    want, want_sd = _scaler_run(torch)
    got, got_sd = _scaler_run(dj, compiled)
    assert [s for s, _, _ in got] == [s for s, _, _ in want] == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0]
    assert [g for _, g, _ in got] == [g for _, g, _ in want]
    for (_, _, a), (_, _, b) in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert got_sd == want_sd


def test_grad_scaler_errors_and_state_dict_as_torch():
    for lib in (torch, dj):
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.1)
        scaler = lib.amp.GradScaler("cpu")
        half = scaler.scale(lib.tensor(3.0, dtype=lib.float16))   # not overflowed in float16
        assert half.dtype == lib.float32 and float(half) == 3.0 * 65536
        scaler.scale((w * 3).sum()).backward()
        scaler.unscale_(opt)
        np.testing.assert_allclose(_arr(w.grad), [3.0, 3.0])
        with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called on this optimizer"):
            scaler.unscale_(opt)
        scaler.step(opt)
        with pytest.raises(RuntimeError, match="step\\(\\) has already been called since the last update"):
            scaler.step(opt)
        scaler.update()
        with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
            scaler.step(opt, closure=lambda: None)
        with pytest.raises(AssertionError, match="No inf checks were recorded"):
            scaler.update()
        sd = scaler.state_dict()
        other = lib.amp.GradScaler("cpu", init_scale=2.0)
        other.load_state_dict(sd)
        assert other.get_scale() == scaler.get_scale() == 65536.0
        scaler.update(new_scale=8.0)
        assert scaler.get_scale() == 8.0
        with pytest.raises(RuntimeError, match="source state dict is empty"):
            other.load_state_dict({})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert dj.cuda.amp.GradScaler(enabled=False).state_dict() == {}


@pytest.mark.parametrize("kind", ["lstm", "gru", "mha"])
def test_autocast_recurrent_and_attention_layers_as_torch(kind):
    """PyTorch's CPU autocast runs nn.LSTM (and attention's projections) in bfloat16 and nn.GRU in float32."""
    x = np.random.default_rng(5).standard_normal((5, 3, 8)).astype(np.float32)
    res = {}
    for lib in (torch, dj):
        lib.manual_seed(0)
        m = {"lstm": lambda: lib.nn.LSTM(8, 6, num_layers=2), "gru": lambda: lib.nn.GRU(8, 6),
             "mha": lambda: lib.nn.MultiheadAttention(8, 2)}[kind]()
        if lib is dj:
            for p, tp in zip(m.parameters(), res["torch"][2]):
                p.data = dj.tensor(tp)
        X = lib.tensor(x, requires_grad=True)
        with lib.autocast("cpu"):
            out = m(X, X, X)[0] if kind == "mha" else m(X)[0]
        out.float().sum().backward()
        res[lib.__name__] = (out, _arr(X.grad), [p.detach().numpy() for p in m.parameters()],
                             [_arr(p.grad) for p in m.parameters()])
    (a, ga, _, pa), (b, gb, _, pb) = res["torch"], res["dynajax"]
    assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
    np.testing.assert_allclose(_arr(b), _arr(a), rtol=3e-2, atol=2e-2)
    np.testing.assert_allclose(gb, ga, rtol=3e-2, atol=2e-2)
    for u, v in zip(pb, pa):
        assert u.dtype == np.float32
        np.testing.assert_allclose(u, v, rtol=3e-2, atol=3e-2)


def test_compiled_half_precision_rounds_every_op_as_eager_and_torch():
    """XLA would keep a fused float16/bfloat16 chain in float32 (excess precision); a compiled step rounds
    after every op, as eager kernels and PyTorch do."""
    x = np.random.default_rng(6).standard_normal((8, 4)).astype(np.float32)

    def f(L, x):
        return ((x.half() * 1.5 + L.tensor(0.25)).bfloat16() * 3.0 - 0.1).float()
    want = f(torch, torch.tensor(x)).numpy()
    np.testing.assert_array_equal(np.asarray(f(dj, dj.tensor(x)).numpy()), want)
    np.testing.assert_array_equal(np.asarray(dj.compile(lambda x: f(dj, x))(dj.tensor(x)).numpy()), want)
