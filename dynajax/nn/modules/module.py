"""``nn.Module``: the container of parameters, buffers and submodules, as in PyTorch."""
from __future__ import annotations

import itertools
import warnings
from collections import OrderedDict, namedtuple
from typing import Callable, Iterator

from ... import _epoch
from ..._tensor import Tensor, _make
from ...autograd import grad_mode
from ...autograd.engine import reset_grad
from ...ops.dispatch import current
from ..parameter import Buffer, Parameter, _value_of

_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class RemovableHandle:
    """Returned by ``register_*_hook``; ``remove()`` unregisters the hook."""

    _ids = itertools.count()

    def __init__(self, hooks: dict) -> None:
        self._hooks = hooks
        self.id = next(self._ids)
        _epoch.bump()   # (a module's hooks change what its call runs: a guarded compiled call records again)

    def remove(self) -> None:
        self._hooks.pop(self.id, None)
        _epoch.bump()

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def bind_options(cls_name: str, spec, args: tuple, kwargs: dict) -> dict:
    """Bind constructor ``args``/``kwargs`` to ``spec`` ((name, default) pairs) like a Python signature."""
    if len(args) > len(spec):
        raise TypeError(f"{cls_name}() takes at most {len(spec)} arguments ({len(args)} given)")
    vals = dict(spec)
    vals.update(zip([k for k, _ in spec], args))
    for k, v in kwargs.items():
        if k not in vals:
            raise TypeError(f"{cls_name}() got an unexpected keyword argument '{k}'")
        vals[k] = v
    return vals


def _addindent(s: str, n: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


def _assign_value(t: Tensor, value) -> None:
    """Write ``value`` into ``t`` in place without recording (bumps its version)."""
    from ...ops.views import write
    src = _make(_value_of(value))
    if tuple(src._v.shape) != tuple(t._v.shape):
        raise RuntimeError(f"shape mismatch: copying a tensor of shape {list(src.shape)} into one of shape "
                           f"{list(t.shape)}")
    with grad_mode.no_grad():
        write(t, src)


class Module:
    """Base class of all layers: assign Parameters, buffers and submodules as attributes.

    >>> class Net(nn.Module):
    ...     def __init__(self):
    ...         super().__init__(); self.fc = nn.Linear(4, 2)
    ...     def forward(self, x): return self.fc(x).relu()
    """

    training: bool
    _version = 1

    def __init__(self, *args, **kwargs) -> None:
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = OrderedDict()
        d["_forward_hooks"] = OrderedDict()
        d["_forward_pre_hooks"] = OrderedDict()
        d["_forward_hooks_with_kwargs"] = set()
        d["_forward_pre_hooks_with_kwargs"] = set()
        d["_backward_hooks"] = OrderedDict()
        d["_backward_pre_hooks"] = OrderedDict()

    forward: Callable

    def _forward_unimplemented(self, *input):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    forward = _forward_unimplemented

    # ---------------------------------------------------------------- call and hooks
    def __call__(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks
                or self._backward_pre_hooks):   # the common case: no hooks to run
            return self.forward(*args, **kwargs)
        out, called = None, set()
        try:
            for hid, hook in list(self._forward_pre_hooks.items()):
                if hid in self._forward_pre_hooks_with_kwargs:
                    r = hook(self, args, kwargs)
                    if r is not None:
                        args, kwargs = r
                else:
                    r = hook(self, args)
                    if r is not None:
                        args = r if isinstance(r, tuple) else (r,)
            bw = self._backward_hooks or self._backward_pre_hooks
            if bw:
                state = _HookState(self)
                args = _wrap_inputs(state, args)
            out = self.forward(*args, **kwargs)
            if bw:
                out = _wrap_outputs(state, out)
            for hid, hook in list(self._forward_hooks.items()):
                called.add(hid)
                r = self._run_forward_hook(hid, hook, args, kwargs, out)
                if r is not None:
                    out = r
            return out
        except Exception:
            # hooks registered with always_call=True still run (those not run yet), their own errors silenced
            # with a warning, as PyTorch's; then the error propagates
            for hid in [h for h in self.__dict__.get("_forward_hooks_always_called", ()) if h not in called]:
                hook = self._forward_hooks.get(hid)
                if hook is None:
                    continue
                try:
                    r = self._run_forward_hook(hid, hook, args, kwargs, out)
                    out = out if r is None else r
                except Exception as e:
                    warnings.warn("module forward hook with ``always_call=True`` raised an exception that was "
                                  f"silenced as another error was raised in forward: {e}")
            raise

    def _run_forward_hook(self, hid, hook, args, kwargs, out):
        return hook(self, args, kwargs, out) if hid in self._forward_hooks_with_kwargs else hook(self, args, out)

    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False):
        """``hook(module, args)`` runs before ``forward``; it may return new args."""
        return self._add_hook(self._forward_pre_hooks, self._forward_pre_hooks_with_kwargs, hook, prepend,
                              with_kwargs)

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False):
        """``hook(module, args, output)`` runs after ``forward``; it may return a new output. ``always_call``:
        it runs even when ``forward`` (or an earlier hook) raises, with ``output`` None."""
        h = self._add_hook(self._forward_hooks, self._forward_hooks_with_kwargs, hook, prepend, with_kwargs)
        if always_call:
            self.__dict__.setdefault("_forward_hooks_always_called", set()).add(h.id)
        return h

    def register_full_backward_hook(self, hook, prepend: bool = False):
        """``hook(module, grad_input, grad_output)`` runs when the gradients w.r.t. the module's inputs are
        computed; it may return new ``grad_input``."""
        return self._add_hook(self._backward_hooks, set(), hook, prepend, False)

    def register_full_backward_pre_hook(self, hook, prepend: bool = False):
        """``hook(module, grad_output)`` runs when the gradients w.r.t. the outputs arrive; it may return new ones."""
        return self._add_hook(self._backward_pre_hooks, set(), hook, prepend, False)

    register_backward_hook = register_full_backward_hook

    @staticmethod
    def _add_hook(hooks: OrderedDict, kw: set, hook, prepend: bool, with_kwargs: bool) -> RemovableHandle:
        h = RemovableHandle(hooks)
        hooks[h.id] = hook
        if with_kwargs:
            kw.add(h.id)
        if prepend:
            hooks.move_to_end(h.id, last=False)
        return h

    # ---------------------------------------------------------------- attributes
    def __getattr__(self, name: str):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        params, bufs, mods = d.get("_parameters"), d.get("_buffers"), d.get("_modules")
        # (state may change hands, an option a forward reads may change: _epoch, which the default mode of
        # dynajax.compile watches instead of each module's attributes)
        _epoch.bump()
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._discard(name, keep="_parameters")
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            params[name] = None
        elif isinstance(value, Module):
            if mods is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._discard(name, keep="_modules")
            mods[name] = value
        elif mods is not None and name in mods:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                "(torch.nn.Module or None expected)")
            mods[name] = value
        elif isinstance(value, Buffer):
            self._discard(name)
            self.register_buffer(name, _make(value._value), value.persistent)
        elif bufs is not None and name in bufs:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(torch.Tensor or None expected)")
            bufs[name] = value
        else:
            object.__setattr__(self, name, value)

    def _discard(self, name: str, keep: str = "") -> None:
        """Forget ``name`` everywhere but in ``keep`` (so re-assigning keeps its place, as in PyTorch)."""
        d = self.__dict__
        d.pop(name, None)
        for store in ("_parameters", "_buffers", "_modules"):
            if store != keep:
                d[store].pop(name, None)
        d["_non_persistent_buffers_set"].discard(name)

    def __delattr__(self, name: str) -> None:
        _epoch.bump()
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if name in d[store]:
                del d[store][name]
                d["_non_persistent_buffers_set"].discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | set(self._parameters) | set(self._buffers) | set(self._modules))

    def _check_name(self, name, kind: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain "."')
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if hasattr(self, name) and name not in getattr(self, "_" + {"parameter": "parameters", "buffer": "buffers",
                                                                     "module": "modules"}[kind], {}):
            raise KeyError(f"attribute '{name}' already exists")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add ``param`` (a Parameter or None) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_name(name, "parameter")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        self._parameters[name] = param
        _epoch.bump()

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a non-trainable tensor (running stats, masks); ``persistent`` ones go in state_dict."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_name(name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        self._buffers[name] = tensor
        _epoch.bump()
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        """Add a child module under ``name``."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_name(name, "module")
        self._modules[name] = module
        _epoch.bump()

    register_module = add_module

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path ``target`` ("" is self)."""
        mod = self
        for item in target.split(".") if target else ():
            if item not in mod._modules:
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target: str) -> Parameter:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters:
            raise AttributeError(f"{mod._get_name()} has no parameter `{name}`")
        return mod._parameters[name]

    # ---------------------------------------------------------------- iteration
    def _named_members(self, get, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        memo = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mod_prefix, mod in mods:
            for k, v in get(mod):
                if v is None or (remove_duplicate and id(v) in memo):
                    continue
                if remove_duplicate:
                    memo.add(id(v))
                yield (mod_prefix + ("." if mod_prefix else "") + k), v

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) pairs, each shared parameter once."""
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """All parameters of this module and its submodules."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        memo = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in memo:
                memo.add(id(m))
                yield name, m

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def named_modules(self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True):
        """(dotted name, module) pairs of this module and all descendants, depth first."""
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    # ---------------------------------------------------------------- modes and conversion
    def train(self, mode: bool = True) -> "Module":
        """Set training mode (dropout active, batch norm uses batch statistics) recursively."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> "Module":
        """Set evaluation mode: ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's ``.grad`` (to None by default)."""
        cap = current()   # (a compiled step that raises gives each .grad back: ``Capture.note_grad``)
        for p in self.parameters():
            if cap is not None:
                cap.note_grad(p)
            reset_grad(p, set_to_none)

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        """Call ``fn`` on every submodule (children first) and then on self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def _apply(self, fn) -> "Module":
        """Replace each parameter's and buffer's value with ``fn(value)``, keeping the objects."""
        with grad_mode.no_grad():
            for m in self.modules():
                for t in itertools.chain(m._parameters.values(), m._buffers.values()):
                    if t is None:
                        continue
                    new = fn(t)
                    if new._value is not t._value:
                        t.data = new
                    g = t.grad
                    if g is not None:   # converted in place, as PyTorch's ``grad.data =``: held grads follow
                        new = fn(g)
                        if new._value is not g._value:
                            g.data = new
        return self

    def to(self, *args, **kwargs) -> "Module":
        """Move/cast parameters and buffers: ``to(dtype)``, ``to(device)``, ``to(tensor)``; floats only get dtype."""
        from ...ops.convert import _parse_to
        dtype, dev = _parse_to(args, dict(kwargs))
        if dtype is not None:
            from ... import _dtype
            if not _dtype.to_np(dtype).kind in "fcV" and _dtype.to_np(dtype) != _dtype.bfloat16.np:
                raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got "
                                f"desired dtype={dtype}")

        def convert(t: Tensor) -> Tensor:
            r = t.detach()
            if dtype is not None and t.is_floating_point():
                r = r.to(dtype)
            if dev is not None:
                r = r.to(dev)
            return r
        return self._apply(convert)

    def _cast_floats(self, dtype) -> "Module":
        return self._apply(lambda t: t.detach().to(dtype) if t.is_floating_point() else t)

    def float(self) -> "Module":
        from ... import _dtype
        return self._cast_floats(_dtype.float32)

    def double(self) -> "Module":
        from ... import _dtype
        return self._cast_floats(_dtype.float64)

    def half(self) -> "Module":
        from ... import _dtype
        return self._cast_floats(_dtype.float16)

    def bfloat16(self) -> "Module":
        from ... import _dtype
        return self._cast_floats(_dtype.bfloat16)

    def cpu(self) -> "Module":
        return self.to("cpu")

    def cuda(self, device=None) -> "Module":
        return self.to("cuda" if device is None else device)

    def type(self, dst_type) -> "Module":
        return self._apply(lambda t: t.detach().type(dst_type))

    # ---------------------------------------------------------------- state dict
    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False) -> OrderedDict:
        """Parameters and persistent buffers by dotted name (detached unless ``keep_vars``)."""
        if args:  # PyTorch's deprecated positional form (destination, prefix, keep_vars)
            destination = args[0]
            prefix = args[1] if len(args) > 1 else prefix
            keep_vars = args[2] if len(args) > 2 else keep_vars
        if destination is None:
            destination = OrderedDict()
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        return destination

    def _own_state(self) -> dict:
        return self.state_dict(keep_vars=True)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy values from ``state_dict`` (dynajax/torch tensors or numpy arrays) into parameters and buffers.

        With ``strict`` missing or unexpected keys raise PyTorch's RuntimeError listing them.
        Returns ``(missing_keys, unexpected_keys)``.
        """
        if not hasattr(state_dict, "keys"):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        own = self._own_state()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        if strict:
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ". ")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ")
        values = {}
        for k, t in own.items():
            if k not in state_dict:
                continue
            v = _value_of(state_dict[k])
            if tuple(v.shape) != tuple(t._v.shape):
                errors.append(f"size mismatch for {k}: copying a param with shape {_size_str(v.shape)} from "
                              f"checkpoint, the shape in current model is {_size_str(t._v.shape)}.")
                continue
            values[k] = v
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {self._get_name()}:\n\t" + "\n\t".join(errors))
        for k, v in values.items():
            _assign_value(own[k], v)
        return _IncompatibleKeys(missing, unexpected)

    # ---------------------------------------------------------------- printing
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """Extra text shown inside this module's repr (override in layers)."""
        return ""

    def _child_lines(self) -> list:
        return ["(" + k + "): " + _addindent(repr(m), 2) for k, m in self._modules.items()]

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = self._child_lines()
        lines = extra_lines + child_lines
        s = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                s += extra_lines[0]
            else:
                s += "\n  " + "\n  ".join(lines) + "\n"
        return s + ")"

    def __getstate__(self):
        return self.__dict__.copy()

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)


class _HookState:
    def __init__(self, module: Module) -> None:
        self.module, self.grad_output, self.n_inputs, self.inputs_tracked = module, None, 0, False


def _call_backward_hooks(state: _HookState, grad_input: tuple) -> tuple:
    for hook in list(state.module._backward_hooks.values()):
        r = hook(state.module, grad_input, state.grad_output)
        if r is not None:
            grad_input = tuple(r) if isinstance(r, (tuple, list)) else (r,)
    return grad_input


def _hook_function(name: str, on_backward):
    from ...autograd.function import Function

    def forward(ctx, state, *tensors):
        ctx.state = state
        return tensors if len(tensors) != 1 else tensors[0]

    def backward(ctx, *grads):
        return (None,) + tuple(on_backward(ctx.state, grads))
    # (its backward runs the user's hooks, which may change the gradients: verify=True does not compare it
    # with jax.vjp of its identity forward)
    return type(name, (Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward),
                                    "_vjp_checked": False})


def _on_inputs_backward(state, grads):
    return _call_backward_hooks(state, tuple(grads))


def _on_outputs_backward(state, grads):
    grads = tuple(grads)
    for hook in list(state.module._backward_pre_hooks.values()):
        r = hook(state.module, grads)
        if r is not None:
            grads = tuple(r) if isinstance(r, (tuple, list)) else (r,)
    state.grad_output = grads
    if not state.inputs_tracked and state.module._backward_hooks:
        _call_backward_hooks(state, (None,) * state.n_inputs)
    return grads


_InputsHook = _hook_function("BackwardHookFunction", _on_inputs_backward)
_OutputsHook = _hook_function("BackwardHookFunction", _on_outputs_backward)


def _wrap_inputs(state: _HookState, args: tuple) -> tuple:
    idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    state.n_inputs = len(idx)
    tracked = [i for i in idx if args[i].requires_grad]
    if not tracked or not grad_mode.state.enabled:
        return args
    state.inputs_tracked = True
    new = _InputsHook.apply(state, *[args[i] for i in idx])
    new = new if isinstance(new, tuple) else (new,)
    out = list(args)
    for i, t in zip(idx, new):
        out[i] = t
    return tuple(out)


def _wrap_outputs(state: _HookState, out):
    single = isinstance(out, Tensor)
    outs = (out,) if single else out
    if not isinstance(outs, tuple) or not any(isinstance(o, Tensor) and o.requires_grad for o in outs):
        return out
    idx = [i for i, o in enumerate(outs) if isinstance(o, Tensor)]
    new = _OutputsHook.apply(state, *[outs[i] for i in idx])
    new = new if isinstance(new, tuple) else (new,)
    res = list(outs)
    for i, t in zip(idx, new):
        res[i] = t
    return res[0] if single else tuple(res)


def _size_str(shape) -> str:
    return f"dynajax.Size([{', '.join(str(s) for s in shape)}])"
