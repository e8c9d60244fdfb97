"""dynajax: PyTorch's define-by-run programming model on a JAX engine.

>>> import dynajax as dj
>>> x = dj.tensor(1.0, requires_grad=True); y = dj.tensor(2.0, requires_grad=True)
>>> z = x + y; z.backward(); print(x.grad)
tensor(1.)
"""
# PyTorch's int64/float64 need JAX's 64-bit types: dynajax turns them on for its own work only, per thread
# (``_dtype.x64``), and leaves JAX's global configuration as the user has it (docs/jax.md).
from . import autograd as autograd  # noqa: E402
from . import ops as _ops  # noqa: E402,F401
from . import random as random  # noqa: E402
from ._device import cuda as cuda  # noqa: E402
from ._device import device as device  # noqa: E402
from ._dtype import *  # noqa: E402,F401,F403
from ._dtype import bool_ as bool  # noqa: E402
from ._dtype import dtype as dtype  # noqa: E402
from ._dtype import finfo as finfo  # noqa: E402
from ._dtype import get_default_dtype as get_default_dtype  # noqa: E402
from ._dtype import iinfo as iinfo  # noqa: E402
from ._dtype import set_default_dtype as set_default_dtype  # noqa: E402
from ._dtype import promote_types as _promote_np  # noqa: E402
from ._sizes import OutOfMemoryError as OutOfMemoryError  # noqa: E402
from ._tensor import Size as Size  # noqa: E402
from ._tensor import Tensor as Tensor  # noqa: E402
from .autograd.grad_mode import enable_grad as enable_grad  # noqa: E402
from .autograd.grad_mode import inference_mode as inference_mode  # noqa: E402
from .autograd.grad_mode import is_grad_enabled as is_grad_enabled  # noqa: E402
from .autograd.grad_mode import no_grad as no_grad  # noqa: E402
from .autograd.grad_mode import set_grad_enabled as set_grad_enabled  # noqa: E402
from .ops.convert import *  # noqa: E402,F401,F403
from .ops.creation import *  # noqa: E402,F401,F403
from .ops.elementwise import *  # noqa: E402,F401,F403
from .ops.reduce import *  # noqa: E402,F401,F403
from .ops.shape import *  # noqa: E402,F401,F403
from .ops.index import *  # noqa: E402,F401,F403
from .ops.join import *  # noqa: E402,F401,F403
from .ops.linalg import *  # noqa: E402,F401,F403
from .ops.decomp import *  # noqa: E402,F401,F403
from .ops.sort import *  # noqa: E402,F401,F403
from .ops.complex import *  # noqa: E402,F401,F403
from .ops.special import *  # noqa: E402,F401,F403
from .ops.pointwise import *  # noqa: E402,F401,F403
from .ops.scan import *  # noqa: E402,F401,F403
from .ops.compare import *  # noqa: E402,F401,F403
from .ops.stats import *  # noqa: E402,F401,F403
from .ops.layout import *  # noqa: E402,F401,F403
from .ops.distance import *  # noqa: E402,F401,F403
from .random import Generator as Generator  # noqa: E402
from .random import get_rng_state as get_rng_state  # noqa: E402
from .random import initial_seed as initial_seed  # noqa: E402
from .random import manual_seed as manual_seed  # noqa: E402
from .random import seed as seed  # noqa: E402
from .random import set_rng_state as set_rng_state  # noqa: E402
from .autograd import engine as _engine  # noqa: E402,F401  (Tensor.backward's upcall)
from .autograd import function as _function  # noqa: E402,F401
from . import nn as nn  # noqa: E402
from .lower import lower as lower  # noqa: E402
from .lower import lower_graph as lower_graph  # noqa: E402
from .lower import Lowered as Lowered  # noqa: E402
from . import func as func  # noqa: E402
from . import testing as testing  # noqa: E402
from . import viz as viz  # noqa: E402
from .compile import compile as compile  # noqa: E402
from .compile.cache import set_compile_cache as set_compile_cache  # noqa: E402
from .compile.cache import compile_cache_dir as compile_cache_dir  # noqa: E402
from .compile import cache as _compile_cache  # noqa: E402
from . import distributed as distributed  # noqa: E402
from . import optim as optim  # noqa: E402
from . import amp as amp  # noqa: E402
from .amp import autocast as autocast  # noqa: E402
from .amp import get_autocast_dtype as get_autocast_dtype  # noqa: E402
from .amp import is_autocast_enabled as is_autocast_enabled  # noqa: E402
from . import utils as utils  # noqa: E402
from . import distributions as distributions  # noqa: E402
from .serialization import load as load  # noqa: E402
from .serialization import save as save  # noqa: E402
from .serialization import load_safetensors as load_safetensors  # noqa: E402
from .serialization import save_safetensors as save_safetensors  # noqa: E402

__version__ = "0.1.0"

_compile_cache.from_environment()  # DYNAJAX_COMPILE_CACHE=folder turns the on-disk executable cache on


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def result_type(tensor1, tensor2) -> dtype:
    from ._dtype import from_np, result_type as _rt
    return from_np(_rt(tensor1, tensor2))


def promote_types(type1: dtype, type2: dtype) -> dtype:
    from ._dtype import from_np
    return from_np(_promote_np(type1.np, type2.np))


def can_cast(from_: dtype, to: dtype) -> bool:
    from ._dtype import _category
    return _category(from_.np) <= _category(to.np)


def numel(input: Tensor) -> int:
    return input.numel()
from . import linalg as linalg  # noqa: E402
from . import fft as fft  # noqa: E402
from . import special as special  # noqa: E402
from . import signal as signal  # noqa: E402
from . import masked as masked  # noqa: E402
from .nn.functional import channel_shuffle as channel_shuffle  # noqa: E402
from .nn.functional import constant_pad_nd as constant_pad_nd  # noqa: E402
from .nn.functional import native_group_norm as native_group_norm  # noqa: E402
from .nn.functional import native_layer_norm as native_layer_norm  # noqa: E402
from . import accelerator as accelerator  # noqa: E402
from . import backends as backends  # noqa: E402
from . import onnx as onnx  # noqa: E402
from .backends import set_float32_matmul_precision as set_float32_matmul_precision  # noqa: E402
from .backends import get_float32_matmul_precision as get_float32_matmul_precision  # noqa: E402
from .backends import use_deterministic_algorithms as use_deterministic_algorithms  # noqa: E402
from .backends import are_deterministic_algorithms_enabled as are_deterministic_algorithms_enabled  # noqa: E402
from .backends import set_num_threads as set_num_threads  # noqa: E402
from .backends import get_num_threads as get_num_threads  # noqa: E402
from ._tensortype import *  # noqa: E402,F401,F403  (FloatTensor, LongTensor, ...: legacy constructors)
from ._torch_alias import install as install_torch_alias  # noqa: E402
from ._torch_alias import uninstall as uninstall_torch_alias  # noqa: E402


def is_floating_point(input: Tensor) -> bool:
    return input.is_floating_point()
