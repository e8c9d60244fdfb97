"""``torch.nn.parallel``: ``DataParallel`` and ``DistributedDataParallel`` as pass-through wrappers.

dynajax runs a step on one device eagerly; spreading it over devices is ``dynajax.compile(step,
mesh=dynajax.distributed.Mesh())`` (one executable, XLA's collectives). These wrappers keep PyTorch
scripts running: they hold the model as ``.module`` (so ``state_dict`` keys gain PyTorch's ``module.``
prefix) and call it unchanged. ``DistributedDataParallel`` expects a process group of one process
(``dynajax.distributed.init_process_group``); with several its gradients would not be averaged, so it
refuses them.
"""
from __future__ import annotations

import contextlib

from .. import distributed as _distributed
from .modules.module import Module

__all__ = ["DataParallel", "DistributedDataParallel"]


class DataParallel(Module):
    """Calls ``module`` on the whole batch, on its one device (see the module docstring)."""

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0) -> None:
        super().__init__()
        self.module = module
        self.device_ids = list(device_ids) if device_ids is not None else []
        self.output_device = output_device
        self.dim = dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


class DistributedDataParallel(Module):
    """One process's model, called unchanged; a process group of more than one process is refused."""

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters: bool = False, gradient_as_bucket_view: bool = False,
                 static_graph: bool = False, **kwargs) -> None:
        super().__init__()
        if _distributed.is_initialized() and _distributed.get_world_size() > 1:
            raise NotImplementedError(
                "dynajax has no multi-process torch.nn.parallel.DistributedDataParallel (its gradients would not "
                "be averaged across processes); use dynajax.compile(step, mesh=dynajax.distributed.Mesh())")
        self.module = module
        self.device_ids = list(device_ids) if device_ids is not None else []
        self.output_device = output_device
        self.dim = dim
        self.find_unused_parameters = find_unused_parameters

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Gradient accumulation without synchronisation: with one process there is nothing to skip."""
        yield
