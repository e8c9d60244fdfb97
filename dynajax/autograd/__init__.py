"""Autograd: grad modes, the native tape engine, custom Functions."""
from .engine import backward as backward
from .engine import detect_anomaly as detect_anomaly
from .engine import grad as grad
from .engine import set_detect_anomaly as set_detect_anomaly
from .grad_mode import enable_grad as enable_grad
from .grad_mode import inference_mode as inference_mode
from .grad_mode import is_grad_enabled as is_grad_enabled
from .grad_mode import no_grad as no_grad
from .grad_mode import set_grad_enabled as set_grad_enabled
from .graph import Node as Node
from .function import Function as Function
from .function import FunctionCtx as FunctionCtx
from .function import once_differentiable as once_differentiable
