"""Fused updates: one op for the whole update of all of a group's parameters, for Adam/AdamW (AMSGrad
included), SGD (with or without momentum), RMSprop, Adagrad, Adadelta, Adamax, NAdam and RAdam.

Written op by op, an Adam update is ~12 ops per parameter, each a dispatch in
eager mode and a recorded op under ``dynajax.compile``; fused, it is one op
for the group (PyTorch's ``foreach`` form): one dispatch eagerly, one recorded
op (one shape lookup, one set of output Syms) when compiled, whatever the
number of parameters. The arithmetic per parameter is the unfused update's, in
the same order; the numbers that depend on the step (bias corrections, Adagrad's
decayed rate, NAdam's momentum schedule, RAdam's rectification and its branch)
are computed inside the op from the step tensors, in float64 as PyTorch computes
them on the host (so a compiled step's key and numbers do not depend on step
counts), and the results equal the earlier
host-constant version bit for bit and PyTorch's single-tensor update within
float32 rounding (the optimizer tests compare). The updates run under
``no_grad`` and have no VJP.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp

from ..ops.dispatch import Pick, current, scalar_recipes, value_aval
from ..ops import registry
from ..ops.registry import VARIADIC, apply, op
from ..ops.views import write


def _decayed(p, g, wd, weight_decay):
    """``(p, g)`` after weight decay: "decoupled" scales ``p`` by ``wd`` (``1 - lr * weight_decay``), "l2" adds
    ``p * wd`` to ``g``, "" neither."""
    if weight_decay == "decoupled":
        return p * wd, g
    if weight_decay == "l2":
        return p, g + p * wd
    return p, g


def _next_steps(args, k: int, n: int):
    """The float64 step count each of the ``n`` parameters reaches now, from their step tensors (the last
    of each parameter's ``k`` inputs)."""
    return jnp.stack([s.astype(jnp.float64) for s in args[k - 1:k * n:k]]) + 1


def _new_step(t, args, k: int, i: int):
    """Parameter ``i``'s new step tensor, taken from ``t`` (``_next_steps``), in its step tensor's dtype (a
    float32 sum rounds as float64's does, rounded to float32). Not ``step + 1``: XLA writes the new step into
    the old one's donated buffer, and with a kernel other than ``t``'s still to read the old steps, it copied
    each old step first (a compiled Adam step of 6 parameters ran 6 copy kernels, ~1 us each on a CPU)."""
    return t[i].astype(args[k * i + k - 1].dtype)


def _bias_corrections(t, b1, b2, lr):
    """``-lr / (1 - b1^t)`` and ``1 / sqrt(1 - b2^t)`` for each parameter's next step ``t`` (``_next_steps``),
    in float64 as PyTorch computes them on the host, as two vectors.

    - From the step tensors: the op's inputs do not depend on each parameter's step count, so
      parameters that skip updates (a branch a batch does not take) do not change a compiled step's key.
    - For all parameters at once: a compiled step has two small kernels for them instead of two per
      parameter (XLA does not fuse a scalar pow or divide into the per-element updates that read it).
    - The second as a reciprocal: XLA turns the division by it into a multiplication anyway, and
      would compute that reciprocal per parameter, outside the fused update.
    """
    return -lr / (1 - b1 ** t), 1 / jnp.sqrt(1 - b2 ** t)


def _outputs(out: list, n: int, shared_step: bool) -> tuple:
    """A fused update's outputs: each parameter's new values, its new step last (``out``); with
    ``shared_step`` (every parameter's step tensor held one array, passed as each one's step), that step once,
    after all parameters' other values: the caller writes it into every step tensor, which keeps them sharing
    one array (a compiled step then takes and returns one step array, not one per parameter)."""
    if not shared_step:
        return tuple(out)
    k = len(out) // n
    return tuple([x for i in range(n) for x in out[k * i:k * i + k - 1]]) + (out[k - 1],)


def _adam_one(p, g, m, v, *rest, step, neg_step_size, inv_bc2_sqrt, c1, b2, c2, eps, wd, weight_decay):
    """One parameter's update; ``rest``: ``step`` or, for AMSGrad, ``v_max, step``; ``step``: the new step."""
    p, g = _decayed(p, g, wd, weight_decay)
    m = m + (g - m) * c1
    v = v * b2 + g * g * c2
    v_max = jnp.maximum(rest[0], v) if len(rest) == 2 else None
    denom = jnp.sqrt(v if v_max is None else v_max) * inv_bc2_sqrt + eps
    return (p + (m / denom) * neg_step_size, m, v) + ((v_max,) if v_max is not None else ()) + (step,)


@op("adam_update", nout=VARIADIC)
def _adam(*args, n, weight_decay, amsgrad=False, shared_step=False):
    """Inputs: ``p, g, m, v, [v_max], step`` of each of the ``n`` parameters (``v_max``, the running maximum
    of ``v``, with ``amsgrad``), then ``c1, b1, b2, c2, lr, eps, wd``; outputs ``p, m, v, [v_max], step + 1``
    of each parameter. ``weight_decay``: "" (none), "l2" (added to the gradient) or "decoupled" (``wd`` is
    then the factor ``1 - lr * weight_decay`` applied to ``p`` first)."""
    k = 6 if amsgrad else 5
    c1, b1, b2, c2, lr, eps, wd = args[k * n:]
    t = _next_steps(args, k, n)
    corrections = _bias_corrections(t, b1, b2, lr)
    cast: dict = {}   # the corrections in each parameter dtype: one conversion of the vectors per dtype
    out = []
    for i in range(n):
        dt = args[k * i].dtype
        if dt not in cast:
            cast[dt] = [c.astype(dt) for c in corrections]
        nss, inv_bc2 = cast[dt]
        out.extend(_adam_one(*args[k * i:k * i + k], step=_new_step(t, args, k, i),
                             neg_step_size=nss[i], inv_bc2_sqrt=inv_bc2[i], c1=c1, b2=b2,
                             c2=c2, eps=eps, wd=wd, weight_decay=weight_decay))
    return _outputs(out, n, shared_step)


@op("sgd_momentum_update", nout=VARIADIC)
def _sgd_momentum(*args, n, nesterov, l2, momentum=True):
    """Inputs: ``p, g, buf`` of each of the ``n`` parameters (each with an existing momentum buffer; without
    ``momentum``: ``p, g``), then ``mu, c, neg_lr, wd`` (``c = 1 - dampening``); outputs ``p, buf`` (``p``)
    of each parameter."""
    k = 3 if momentum else 2
    mu, c, neg_lr, wd = args[k * n:]
    out = []
    for i in range(n):
        p, g = args[k * i:k * i + 2]
        if l2:
            g = g + p * wd
        if momentum:
            buf = args[k * i + 2] * mu + g * c
            g = g + buf * mu if nesterov else buf
            out.extend((p + g * neg_lr, buf))
        else:
            out.append(p + g * neg_lr)
    return tuple(out)


@op("rmsprop_update", nout=VARIADIC)
def _rmsprop(*args, n, centered, momentum, l2, shared_step=False):
    """Inputs: ``p, g, square_avg, [grad_avg], [momentum_buffer], step`` of each of the ``n`` parameters
    (``grad_avg`` if ``centered``, the buffer if ``momentum``), then ``alpha, c, eps, mu, neg_lr, wd``
    (``c = 1 - alpha``); outputs the new values of each input but ``g``, in that order (``step + 1``)."""
    k = 4 + centered + momentum
    alpha, c, eps, mu, neg_lr, wd = args[k * n:]
    out = []
    for i in range(n):
        p, g, sq, *rest = args[k * i:k * i + k]
        step = rest.pop() + 1
        if l2:
            g = g + p * wd
        sq = sq * alpha + g * g * c
        new = [sq]
        if centered:
            ga = rest.pop(0)
            ga = ga + (g - ga) * c
            avg = jnp.sqrt(sq - ga * ga) + eps
            new.append(ga)
        else:
            avg = jnp.sqrt(sq) + eps
        if momentum:
            buf = rest.pop(0) * mu + g / avg
            new.append(buf)
            p = p + buf * neg_lr
        else:
            p = p + (g / avg) * neg_lr
        out.extend((p, *new, step))
    return _outputs(out, n, shared_step)


@op("adagrad_update", nout=VARIADIC)
def _adagrad(*args, n, l2, shared_step=False):
    """Inputs: ``p, g, sum, step`` of each of the ``n`` parameters, then ``lr, lr_decay, eps, wd``; outputs
    ``p, sum, step + 1`` of each. The decayed rate ``lr / (1 + (t - 1) lr_decay)`` of each parameter's step
    ``t`` is computed from its step tensor, in float64 as PyTorch computes it on the host."""
    lr, lr_decay, eps, wd = args[4 * n:]
    t = _next_steps(args, 4, n)
    neg_clr = -lr / (1 + (t - 1) * lr_decay)
    out = []
    for i in range(n):
        p, g, acc, _ = args[4 * i:4 * i + 4]
        if l2:
            g = g + p * wd
        acc = acc + g * g
        out.extend((p + g / (jnp.sqrt(acc) + eps) * neg_clr[i].astype(p.dtype), acc, _new_step(t, args, 4, i)))
    return _outputs(out, n, shared_step)


@op("adadelta_update", nout=VARIADIC)
def _adadelta(*args, n, l2, shared_step=False):
    """Inputs: ``p, g, square_avg, acc_delta, step`` of each of the ``n`` parameters, then
    ``rho, c, eps, neg_lr, wd`` (``c = 1 - rho``); outputs ``p, square_avg, acc_delta, step + 1`` of each."""
    rho, c, eps, neg_lr, wd = args[5 * n:]
    out = []
    for i in range(n):
        p, g, sq, acc, step = args[5 * i:5 * i + 5]
        if l2:
            g = g + p * wd
        sq = sq * rho + g * g * c
        delta = jnp.sqrt(acc + eps) / jnp.sqrt(sq + eps) * g
        acc = acc * rho + delta * delta * c
        out.extend((p + delta * neg_lr, sq, acc, step + 1))
    return _outputs(out, n, shared_step)


@op("adamax_update", nout=VARIADIC)
def _adamax(*args, n, l2, shared_step=False):
    """Inputs: ``p, g, exp_avg, exp_inf, step`` of each of the ``n`` parameters, then ``c1, b1, b2, lr, eps,
    wd`` (``c1 = 1 - b1``); outputs ``p, exp_avg, exp_inf, step + 1`` of each. The step size
    ``lr / (1 - b1^t)`` comes from the step tensors (float64, as PyTorch's host number)."""
    c1, b1, b2, lr, eps, wd = args[5 * n:]
    t = _next_steps(args, 5, n)
    neg_clr = -lr / (1 - b1 ** t)
    out = []
    for i in range(n):
        p, g, m, u, _ = args[5 * i:5 * i + 5]
        if l2:
            g = g + p * wd
        m = m + (g - m) * c1
        u = jnp.maximum(u * b2, jnp.abs(g) + eps)
        out.extend((p + (m / u) * neg_clr[i].astype(p.dtype), m, u, _new_step(t, args, 5, i)))
    return _outputs(out, n, shared_step)


@op("nadam_update", nout=VARIADIC)
def _nadam(*args, n, weight_decay, shared_step=False):
    """Inputs: ``p, g, exp_avg, exp_avg_sq, mu_product, step`` of each of the ``n`` parameters (``mu_product``
    0-d), then ``c1, b1, b2, c2, lr, eps, wd, momentum_decay``; outputs ``p, exp_avg, exp_avg_sq, mu_product,
    step + 1`` of each. The momentum schedule ``mu_t``, ``mu_{t+1}`` and the step sizes are computed from
    the step tensors in float64, as PyTorch's host numbers; ``mu_product`` is multiplied in its own dtype,
    as PyTorch's in-place product on the state tensor."""
    c1, b1, b2, c2, lr, eps, wd, md = args[6 * n:]
    t = _next_steps(args, 6, n)
    mu = b1 * (1.0 - 0.5 * 0.96 ** (t * md))
    mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * md))
    bc2 = 1 - b2 ** t
    out = []
    for i in range(n):
        p, g, m, v, prod, _ = args[6 * i:6 * i + 6]
        p, g = _decayed(p, g, wd, weight_decay)
        prod = prod * mu[i].astype(prod.dtype)
        pv = prod.astype(jnp.float64)
        c_g = (-lr * (1.0 - mu[i]) / (1.0 - pv)).astype(p.dtype)
        c_m = (-lr * mu_next[i] / (1.0 - pv * mu_next[i])).astype(p.dtype)
        m = m + (g - m) * c1
        v = v * b2 + g * g * c2
        denom = jnp.sqrt(v / bc2[i].astype(p.dtype)) + eps
        p = p + (g / denom) * c_g
        out.extend((p + (m / denom) * c_m, m, v, prod, _new_step(t, args, 6, i)))
    return _outputs(out, n, shared_step)


@op("radam_update", nout=VARIADIC)
def _radam(*args, n, weight_decay, shared_step=False):
    """Inputs: ``p, g, exp_avg, exp_avg_sq, step`` of each of the ``n`` parameters, then ``c1, b1, b2, c2, lr,
    eps, wd``; outputs ``p, exp_avg, exp_avg_sq, step + 1`` of each. The rectification, and whether it
    applies yet (``rho_t > 5``), come from the step tensors in float64, as PyTorch's host numbers and
    branch."""
    c1, b1, b2, c2, lr, eps, wd = args[5 * n:]
    t = _next_steps(args, 5, n)
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    rho_inf = 2 / (1 - b2) - 1
    rho_t = rho_inf - 2 * t * b2 ** t / bc2
    safe = jnp.where(rho_t > 5.0, rho_t, rho_inf)   # (the rectification's root is taken where it applies)
    rect = jnp.sqrt((safe - 4) * (safe - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * safe))
    out = []
    for i in range(n):
        p, g, m, v, _ = args[5 * i:5 * i + 5]
        p, g = _decayed(p, g, wd, weight_decay)
        m = m + (g - m) * c1
        v = v * b2 + g * g * c2
        dt = p.dtype
        m_hat_lr = m / bc1[i].astype(dt) * lr
        rectified = m_hat_lr * (jnp.sqrt(bc2[i]).astype(dt) / (jnp.sqrt(v) + eps)) * rect[i].astype(dt)
        p = jnp.where(rho_t[i] > 5.0, p - rectified, p - m_hat_lr)
        out.extend((p, m, v, _new_step(t, args, 5, i)))
    return _outputs(out, n, shared_step)


_STEPPED = frozenset({_adam, _rmsprop, _adagrad, _adadelta, _adamax, _nadam, _radam})   # (each item's last: its step)


def fusable(*tensors) -> bool:
    """The fused updates cover real floating tensors of one dtype and shape (per parameter)."""
    av = value_aval(tensors[0]._v)
    if av[1].kind != "f":
        return False
    for t in tensors[1:]:
        if value_aval(t._v) != av:
            return False
    return True


def float_valued(t) -> bool:
    """Whether tensor ``t`` holds real floating values (a step count the fused updates keep as a float)."""
    return value_aval(t._v)[1].kind == "f"


def _adam_numbers(group) -> tuple:
    """The Python numbers the fused Adam op of ``group`` (a param group) takes, in argument order."""
    b1, b2 = group["betas"]
    lr, wd = group["lr"], group["weight_decay"]
    if group.get("decoupled_weight_decay"):
        wd = 1 - lr * wd
    return 1 - b1, b1, b2, 1 - b2, lr, group["eps"], float(wd)


def _rmsprop_numbers(group) -> tuple:
    """The Python numbers the fused RMSprop op of ``group`` takes, in argument order."""
    a = group["alpha"]
    return a, 1 - a, group["eps"], group["momentum"], -group["lr"], float(group["weight_decay"])


def _adagrad_numbers(group) -> tuple:
    """The Python numbers the fused Adagrad op of ``group`` takes, in argument order."""
    return group["lr"], group["lr_decay"], group["eps"], float(group["weight_decay"])


def _adadelta_numbers(group) -> tuple:
    """The Python numbers the fused Adadelta op of ``group`` takes, in argument order."""
    rho = group["rho"]
    return rho, 1 - rho, group["eps"], -group["lr"], float(group["weight_decay"])


def _adamax_numbers(group) -> tuple:
    """The Python numbers the fused Adamax op of ``group`` takes, in argument order."""
    b1, b2 = group["betas"]
    return 1 - b1, b1, b2, group["lr"], group["eps"], float(group["weight_decay"])


def _nadam_numbers(group) -> tuple:
    """The Python numbers the fused NAdam op of ``group`` takes, in argument order."""
    return _adam_numbers(group) + (group["momentum_decay"],)


def _sgd_numbers(group) -> tuple:
    """The Python numbers the fused SGD op of ``group`` takes, in argument order."""
    return group["momentum"], 1 - group["dampening"], -group["lr"], float(group["weight_decay"])


def _fused_apply(fn, items: list, numbers, group, **params) -> None:
    """``apply(fn, *tensors of items, *numbers(group))``, each result written into its tensor: each item (a
    parameter's ``(p, g, *state)``) gets the new value of each of its tensors but ``g``. While
    ``dynajax.compile`` records, the outputs are recorded straight into those tensors
    (``Capture.update_in_place``), and each number carries how to read it again from ``group``
    (``compile.capture.scalar_recipes``: a speculative run passes the next call's numbers, a learning-rate
    schedule's included).

    An update that counts steps (each item's last tensor its step tensor) of every parameter of its group
    whose step tensors all hold one array -- as they do from their first step (``algorithms._update_fused``)
    until one is changed on its own -- passes the first as every parameter's step and gets one new step back
    (``shared_step``), written into all of them: they go on sharing one array, and a compiled step takes and
    returns one step array instead of one per parameter (each is an argument and a result of the executable,
    ~1 us each per call). An update of some of the group's parameters (others got no grad) is not shared:
    their counts part from then on, and a step whose graph depends on which parameters it updates would
    otherwise get a second executable for a graph first met while they were equal."""
    steps = None
    if fn in _STEPPED and 1 < len(items) == len(group.get("params", ())):
        first = items[0][-1]._v
        if all(item[-1]._v is first for item in items):
            steps = [item[-1] for item in items]
            items = [item[:-1] + (steps[0],) for item in items]
            params["shared_step"] = True
    tensors = [t for item in items for t in item]
    if steps is None:
        written = [t for item in items for t in item[:1] + item[2:]]
    else:
        written = [t for item in items for t in item[:1] + item[2:-1]] + [tuple(steps)]
    nums = numbers(group)
    cap = current() if registry.record_creation else None
    if cap is None:   # eager (or verify's dual recording): an op, then a write per result
        _write_all(written, apply(fn, *tensors, *nums, **params))
        return
    n = len(tensors)
    source = functools.partial(numbers, group)
    with scalar_recipes({n + k: Pick(source, k) for k in range(len(nums))}):
        if steps is not None:   # (the others' values are read through the first's: a replay checks they still are)
            cap.read_through(steps[1:], steps[0])
        if cap.update_in_place(fn, (*tensors, *nums), params, written):
            return
        out = apply(fn, *tensors, *nums, **params)
    _write_all(written, out)


def _write_all(written: list, out) -> None:
    """Write each result of a fused update into its tensor (a tuple of tensors: into each of them)."""
    for t, new in zip(written, out):
        if type(t) is tuple:
            for x in t:
                write(x, new)
        else:
            write(t, new)


def adam_update(params, group):
    """One fused Adam step of ``params``: a list of ``(p, g, m, v, step)``, or ``(p, g, m, v, v_max, step)``
    where ``group["amsgrad"]``; writes the new ``p, m, v, step`` (and ``v_max``) of each in place.
    ``group``: the param group (learning rate, betas, eps, weight decay and its mode, amsgrad)."""
    extra = {"amsgrad": True} if group.get("amsgrad") else {}   # (the plain op's params, and keys, as they were)
    _fused_apply(_adam, params, _adam_numbers, group, n=len(params), weight_decay=_weight_decay_mode(group),
                        **extra)


def sgd_momentum_update(params, group):
    """One fused SGD step of ``params``: a list of ``(p, g, buf)`` (``(p, g)`` where the group has no
    momentum); writes the new ``p`` (and ``buf``) of each in place. ``group``: the param group (learning rate,
    momentum, dampening, weight decay, nesterov)."""
    extra = {} if group["momentum"] else {"momentum": False}   # (the momentum op's params, and keys, as they were)
    _fused_apply(_sgd_momentum, params, _sgd_numbers, group, n=len(params), nesterov=bool(group["nesterov"]),
                        l2=bool(group["weight_decay"]), **extra)


def rmsprop_update(params, group):
    """One fused RMSprop step of ``params``: a list of ``(p, g, square_avg, [grad_avg], [momentum_buffer],
    step)``; writes the new value of each but ``g`` in place."""
    _fused_apply(_rmsprop, params, _rmsprop_numbers, group, n=len(params), centered=bool(group["centered"]),
                        momentum=bool(group["momentum"] > 0), l2=bool(group["weight_decay"]))


def adagrad_update(params, group):
    """One fused Adagrad step of ``params``: a list of ``(p, g, sum, step)``; writes the new ``p, sum, step`` in place."""
    _fused_apply(_adagrad, params, _adagrad_numbers, group, n=len(params), l2=bool(group["weight_decay"]))


def adadelta_update(params, group):
    """One fused Adadelta step of ``params``: a list of ``(p, g, square_avg, acc_delta, step)``; writes the
    new value of each but ``g`` in place."""
    _fused_apply(_adadelta, params, _adadelta_numbers, group, n=len(params), l2=bool(group["weight_decay"]))


def _weight_decay_mode(group) -> str:
    wd = group["weight_decay"]
    return "" if not wd else ("decoupled" if group.get("decoupled_weight_decay") else "l2")


def adamax_update(params, group):
    """One fused Adamax step of ``params``: a list of ``(p, g, exp_avg, exp_inf, step)``; writes the
    new value of each but ``g`` in place."""
    _fused_apply(_adamax, params, _adamax_numbers, group, n=len(params), l2=bool(group["weight_decay"]))


def nadam_update(params, group):
    """One fused NAdam step of ``params``: a list of ``(p, g, exp_avg, exp_avg_sq, mu_product, step)``;
    writes the new value of each but ``g`` in place."""
    _fused_apply(_nadam, params, _nadam_numbers, group, n=len(params), weight_decay=_weight_decay_mode(group))


def radam_update(params, group):
    """One fused RAdam step of ``params``: a list of ``(p, g, exp_avg, exp_avg_sq, step)``; writes the
    new value of each but ``g`` in place."""
    _fused_apply(_radam, params, _adam_numbers, group, n=len(params), weight_decay=_weight_decay_mode(group))
