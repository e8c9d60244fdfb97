"""Grad modes (``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``) as context managers, plain
calls and decorators (bare, parenthesized, on generator functions), each run side by side with PyTorch."""
import threading

import pytest
import torch

import dynajax as dj

LIBS = (torch, dj)


@pytest.fixture(autouse=True)
def _reset_grad_mode():
    yield
    for L in LIBS:
        L.set_grad_enabled(True)


def inference(L) -> bool:
    return (torch.is_inference_mode_enabled if L is torch else dj.autograd.grad_mode.is_inference_mode_enabled)()


def state(L) -> tuple:
    return L.is_grad_enabled(), inference(L)


def side_by_side(run):
    """Run ``run(lib)`` on torch and dynajax; the records must match."""
    expected, actual = run(torch), run(dj)
    assert actual == expected
    return expected


def records_grad(L) -> bool:
    return (L.ones(2, requires_grad=True) * 2).requires_grad


# ---------------------------------------------------------------- set_grad_enabled
@pytest.mark.parametrize("outer", [True, False])
@pytest.mark.parametrize("mode", [True, False])
def test_set_grad_enabled_as_decorator_leaves_the_mode_unchanged(mode, outer):
    def run(L):
        L.set_grad_enabled(outer)
        log = [("before", L.is_grad_enabled())]

        @L.set_grad_enabled(mode)
        def f(x):
            log.append(("inside", L.is_grad_enabled(), (x * 2).requires_grad))
            return x * 2
        log.append(("after decoration", L.is_grad_enabled()))
        x = L.ones(2, requires_grad=True)
        y = f(x)
        log.append(("after call", L.is_grad_enabled(), y.requires_grad, (x * 2).requires_grad, f.__name__))
        L.set_grad_enabled(not outer)
        f(x)                              # the mode inside comes from the decorator, not from decoration time
        log.append(("flipped outer", L.is_grad_enabled()))
        return log
    log = side_by_side(run)
    assert log[1] == ("after decoration", outer)


def test_set_grad_enabled_as_context_manager_and_plain_call():
    def run(L):
        x = L.ones(2, requires_grad=True)
        log = []
        with L.set_grad_enabled(False):
            log.append(("ctx False", L.is_grad_enabled(), (x * 2).requires_grad))
            with L.set_grad_enabled(True):
                log.append(("ctx True", L.is_grad_enabled(), (x * 2).requires_grad))
            log.append(("back to False", L.is_grad_enabled()))
        log.append(("after ctx", L.is_grad_enabled(), (x * 2).requires_grad))
        L.set_grad_enabled(False)         # a bare call sets the mode globally
        log.append(("plain call False", L.is_grad_enabled(), (x * 2).requires_grad))
        with L.set_grad_enabled(True):
            log.append(("ctx True under plain False", L.is_grad_enabled()))
        log.append(("after ctx", L.is_grad_enabled()))
        L.set_grad_enabled(True)
        log.append(("plain call True", L.is_grad_enabled(), (x * 2).requires_grad))
        ctx = L.set_grad_enabled(False)   # made (mode set at once), then the mode changed, then entered
        log.append(("made", L.is_grad_enabled()))
        L.set_grad_enabled(True)
        with ctx:
            log.append(("entered", L.is_grad_enabled()))
        log.append(("exited", L.is_grad_enabled()))
        return log
    log = side_by_side(run)
    assert log[0] == ("ctx False", False, False) and log[4] == ("plain call False", False, False)


def test_bare_set_grad_enabled_is_a_type_error_like_torchs():
    for L in LIBS:
        with pytest.raises(TypeError):
            @L.set_grad_enabled
            def f():
                pass
        assert L.is_grad_enabled()


# ---------------------------------------------------------------- context managers, nesting
def test_nested_modes():
    def run(L):
        x = L.ones(2, requires_grad=True)
        log = []
        with L.no_grad():
            log.append(("no_grad", state(L), (x * 2).requires_grad))
            with L.enable_grad():
                log.append(("enable_grad", state(L), (x * 2).requires_grad))
                with L.set_grad_enabled(False):
                    log.append(("set False", state(L), (x * 2).requires_grad))
                    with L.inference_mode():
                        log.append(("inference", state(L), (x * 2).requires_grad))
                        with L.inference_mode(False):
                            log.append(("inference(False)", state(L)))
                        log.append(("back in inference", state(L)))
                    log.append(("back in set False", state(L)))
                log.append(("back in enable_grad", state(L)))
            with L.inference_mode(False):
                log.append(("inference(False) under no_grad", state(L)))
            log.append(("back in no_grad", state(L)))
        log.append(("outside", state(L), (x * 2).requires_grad))
        return log
    log = side_by_side(run)
    assert log[-1] == ("outside", (True, False), True)


# ---------------------------------------------------------------- decorators on plain functions
PAREN_FORMS = {
    "no_grad()": lambda L: L.no_grad(),
    "enable_grad()": lambda L: L.enable_grad(),
    "inference_mode()": lambda L: L.inference_mode(),
    "inference_mode(False)": lambda L: L.inference_mode(False),
    "set_grad_enabled(False)": lambda L: L.set_grad_enabled(False),
    "set_grad_enabled(True)": lambda L: L.set_grad_enabled(True),
}
BARE_FORMS = {             # the forms torch accepts without parentheses
    "no_grad": lambda L: L.no_grad,
    "enable_grad": lambda L: L.enable_grad,
    "inference_mode": lambda L: L.inference_mode,
}
ALL_FORMS = {**PAREN_FORMS, **BARE_FORMS}


@pytest.mark.parametrize("outer", [True, False])
@pytest.mark.parametrize("form", sorted(ALL_FORMS))
def test_decorated_function(form, outer):
    def run(L):
        L.set_grad_enabled(outer)
        x = L.ones(2, requires_grad=True)

        @ALL_FORMS[form](L)
        def double(t):
            """Doc."""
            return t * 2, state(L)
        log = [("after decoration", state(L), double.__name__, double.__doc__)]
        y, inside = double(x)
        log.append(("inside", inside, y.requires_grad))
        log.append(("after call", state(L), (x * 2).requires_grad))
        with L.no_grad():
            log.append(("called under no_grad", double(x)[1], state(L)))
        with L.enable_grad():
            log.append(("called under enable_grad", double(x)[1], state(L)))
        return log
    side_by_side(run)


@pytest.mark.parametrize("form", sorted(BARE_FORMS))
def test_bare_decorator_runs_the_function_under_the_mode(form):
    log = side_by_side(lambda L: [(ALL_FORMS[form](L)(lambda: (L.is_grad_enabled(), records_grad(L))))(),
                                  L.is_grad_enabled()])
    assert log[0] == ((True, True) if form == "enable_grad" else (False, False)) and log[1] is True


@pytest.mark.parametrize("form", sorted(ALL_FORMS))
def test_an_exception_inside_a_decorated_function_restores_the_mode(form):
    def run(L):
        log = []
        for outer in (True, False):
            L.set_grad_enabled(outer)

            @ALL_FORMS[form](L)
            def boom():
                log.append(("inside", state(L)))
                raise ValueError("boom")
            with pytest.raises(ValueError, match="boom"):
                boom()
            log.append(("after", state(L)))
        with pytest.raises(KeyError):
            with L.no_grad():
                raise KeyError("ctx")
        log.append(("after context manager", state(L)))
        return log
    log = side_by_side(run)
    assert log[1] == ("after", (True, False)) and log[3] == ("after", (False, False))


# ---------------------------------------------------------------- decorators on generator functions
GENERATOR_FORMS = {
    "no_grad()": lambda L: L.no_grad(),
    "no_grad": lambda L: L.no_grad,
    "enable_grad()": lambda L: L.enable_grad(),
    "enable_grad": lambda L: L.enable_grad,
    "inference_mode()": lambda L: L.inference_mode(),
    "inference_mode": lambda L: L.inference_mode,
    "set_grad_enabled(False)": lambda L: L.set_grad_enabled(False),
}


@pytest.mark.parametrize("outer", [True, False])
@pytest.mark.parametrize("form", sorted(GENERATOR_FORMS))
def test_decorated_generator_runs_each_resumption_under_the_mode(form, outer):
    def run(L):
        L.set_grad_enabled(outer)
        log = []

        @GENERATOR_FORMS[form](L)
        def gen(x):
            log.append(("body start", state(L)))
            scale = yield x * 2
            log.append(("body after first yield", state(L), scale))
            yield x * (2.0 if scale is None else scale)
            log.append(("body after second yield", state(L)))
            return "done"
        x = L.ones(2, requires_grad=True)
        g = gen(x)
        log.append(("generator made", state(L), gen.__name__))
        a = next(g)
        log.append(("between yields", state(L), a.requires_grad, a.tolist(), (x * 3).requires_grad))
        b = g.send(3.0)
        log.append(("between yields", state(L), b.requires_grad, b.tolist(), (x * 3).requires_grad))
        with pytest.raises(StopIteration) as stop:
            next(g)
        log.append(("returned", stop.value.value, state(L)))
        log.append(("list", [t.requires_grad for t in gen(x)], state(L)))

        def delegate():               # yield from: the decorated generator's body still runs under its mode
            result = yield from gen(x)
            log.append(("delegate got", result, state(L)))
        log.append(("yield from", [t.requires_grad for t in delegate()], state(L)))
        return log
    log = side_by_side(run)
    body_mode = form.startswith("enable_grad")
    assert log[0] == ("generator made", (outer, False), "gen")
    assert log[1] == ("body start", (body_mode, form.startswith("inference_mode")))
    assert log[2][:3] == ("between yields", (outer, False), body_mode)


@pytest.mark.parametrize("form", ["no_grad()", "no_grad", "enable_grad", "inference_mode"])
def test_decorated_generator_throw_close_and_exceptions(form):
    def run(L):
        log = []

        @GENERATOR_FORMS[form](L)
        def gen():
            try:
                try:
                    yield 1
                except ValueError:
                    log.append(("caught thrown", state(L)))
                    yield 2
                yield 3
            finally:
                log.append(("finally", state(L)))

        @GENERATOR_FORMS[form](L)
        def failing():
            yield 1
            log.append(("failing", state(L)))
            raise KeyError("boom")

        for outer in (True, False):
            L.set_grad_enabled(outer)
            g = gen()
            next(g)
            log.append(("thrown into", g.throw(ValueError("x")), state(L)))
            g.close()                         # GeneratorExit reaches the body under the mode
            log.append(("closed", state(L)))
            g = gen()
            next(g)
            with pytest.raises(RuntimeError, match="uncaught"):
                g.throw(RuntimeError("uncaught"))
            log.append(("uncaught throw", state(L)))
            g = failing()
            next(g)
            with pytest.raises(KeyError):
                next(g)
            log.append(("after failing", state(L)))
        return log
    side_by_side(run)


# ---------------------------------------------------------------- threads
def test_decorating_and_setting_the_mode_in_another_thread_leave_this_thread_alone():
    def run(L):
        seen = {}

        def worker():
            L.set_grad_enabled(False)

            @L.set_grad_enabled(True)
            def f():
                return L.is_grad_enabled()
            seen["worker"] = (f(), L.is_grad_enabled())
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        return seen["worker"], L.is_grad_enabled()
    assert side_by_side(run) == ((True, False), True)
