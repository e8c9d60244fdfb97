"""Activation modules: thin wrappers over ``nn.functional`` with PyTorch's reprs."""
from __future__ import annotations

from ..parameter import Parameter
from .. import functional as F
from .module import Module, bind_options


def _activation(name: str, fn, params: tuple = (), inplace: bool = False, doc: str = "",
                repr_inplace: bool = True, training: bool = False):
    """Declare ``name(Module)`` calling ``fn(input, *params)``; ``params`` are (name, default) pairs.
    ``inplace``: the module takes PyTorch's trailing ``inplace=False`` option and passes it on to ``fn``
    (shown as ``inplace=True`` in the repr unless ``repr_inplace`` is False, as PyTorch's Hardsigmoid and
    Hardswish do); ``training``: ``fn`` is also given ``training=self.training``."""
    names = [p for p, _ in params]

    def __init__(self, *args, **kwargs) -> None:
        Module.__init__(self)
        spec = list(params) + ([("inplace", False)] if inplace else [])
        for k, v in bind_options(name, spec, args, kwargs).items():
            setattr(self, k, v)

    def forward(self, input):
        kw = {k: getattr(self, k) for k in names}
        if inplace and self.inplace:
            kw["inplace"] = True
        if training:
            kw["training"] = self.training
        return fn(input, **kw)

    def extra_repr(self) -> str:
        parts = [f"{k}={getattr(self, k)!r}" if isinstance(getattr(self, k), str) else f"{k}={getattr(self, k)}"
                 for k in names]
        if inplace and repr_inplace and self.inplace:
            parts.append("inplace=True")
        return ", ".join(parts)

    cls = type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr,
                                 "__doc__": doc or f"Applies ``functional.{fn.__name__}`` elementwise."})
    return cls


def _tanh(input):
    return input.tanh()


def _sigmoid(input):
    return input.sigmoid()


ReLU = _activation("ReLU", F.relu, inplace=True, doc="``max(x, 0)``.")
ReLU6 = _activation("ReLU6", F.relu6, inplace=True)
LeakyReLU = _activation("LeakyReLU", F.leaky_relu, (("negative_slope", 0.01),), inplace=True)
ELU = _activation("ELU", F.elu, (("alpha", 1.0),), inplace=True)
CELU = _activation("CELU", F.celu, (("alpha", 1.0),), inplace=True)
SELU = _activation("SELU", F.selu, inplace=True)
GELU = _activation("GELU", F.gelu, (("approximate", "none"),))
SiLU = _activation("SiLU", F.silu, inplace=True)
Mish = _activation("Mish", F.mish, inplace=True)
Tanh = _activation("Tanh", _tanh)
Sigmoid = _activation("Sigmoid", _sigmoid)
Softplus = _activation("Softplus", F.softplus, (("beta", 1.0), ("threshold", 20.0)))
Softsign = _activation("Softsign", F.softsign)
Hardtanh = _activation("Hardtanh", F.hardtanh, (("min_val", -1.0), ("max_val", 1.0)), inplace=True)
Hardsigmoid = _activation("Hardsigmoid", F.hardsigmoid, inplace=True, repr_inplace=False)
Hardswish = _activation("Hardswish", F.hardswish, inplace=True, repr_inplace=False)
LogSigmoid = _activation("LogSigmoid", F.logsigmoid)
Tanhshrink = _activation("Tanhshrink", F.tanhshrink)
RReLU = _activation("RReLU", F.rrelu, (("lower", 1.0 / 8), ("upper", 1.0 / 3)), inplace=True, training=True,
                    doc="Randomized leaky ReLU: slopes drawn from ``U(lower, upper)`` in training, their mean in eval.")
Threshold = _activation("Threshold", F.threshold, (("threshold", 0.0), ("value", 0.0)), inplace=True)
GLU = _activation("GLU", F.glu, (("dim", -1),))
Softmax = _activation("Softmax", F.softmax, (("dim", None),))
LogSoftmax = _activation("LogSoftmax", F.log_softmax, (("dim", None),))
Softmin = _activation("Softmin", F.softmin, (("dim", None),))
Softshrink = _activation("Softshrink", F.softshrink, (("lambd", 0.5),))
Hardshrink = _activation("Hardshrink", F.hardshrink, (("lambd", 0.5),))
Softshrink.extra_repr = Hardshrink.extra_repr = lambda self: str(self.lambd)  # PyTorch prints the bare value


def _softmax2d(input):
    return F.softmax(input, -3)


Softmax2d = _activation("Softmax2d", _softmax2d, doc="Softmax over the channel dim of (N, C, H, W).")


class PReLU(Module):
    """Leaky ReLU with a learned slope (one, or one per channel)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None) -> None:
        super().__init__()
        from ...ops.creation import full
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(full((num_parameters,), init, dtype=dtype, device=device))

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"
