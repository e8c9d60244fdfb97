"""Many devices, one define-by-run step: data parallelism and parameter sharding on JAX's own sharding.

Nothing here is home-made communication: a compiled step is one ``jax.jit``
executable whose inputs carry ``NamedSharding``s over a ``jax.sharding.Mesh``;
XLA's SPMD partitioner splits the work and inserts the collectives (the
gradient all-reduce of a mean loss over a split batch, the all-gathers of
sharded parameters).

>>> mesh = dynajax.distributed.Mesh()                 # every visible device on one axis, "data"
>>> step = dynajax.compile(train_step, mesh=mesh)     # batch split over "data", state replicated
>>> step = dynajax.compile(train_step, mesh=mesh, param_sharding="fsdp")   # state sharded too

Placement rules of ``dynajax.compile(step, mesh=..., data_axis="data", param_sharding=None)``:

- *Batch*: every tensor passed to the step as an argument (positional or
  keyword, inside tuples/lists/dicts too) with at least one dimension is split
  along its first dimension over ``data_axis``; that dimension must be a
  multiple of the axis size, else the call raises ``ValueError`` (no silent
  padding: pad the batch, or drop the last partial batch with
  ``DataLoader(..., drop_last=True)``).
- *State*: everything else the step reads (parameters, buffers, optimizer
  state, grads, the RNG key, tensors captured from outer scopes) is
  replicated, or with ``param_sharding="fsdp"`` sharded over ``data_axis``
  along its largest dimension that is a multiple of the axis size (the first
  such, on ties); arrays without such a dimension (scalars, odd-sized biases)
  stay replicated. Each device then holds ~1/N of parameters and optimizer
  state, and XLA gathers a parameter where it is used (ZeRO-3 / FSDP).
- *User placement wins*: an array already laid out on the mesh with
  :meth:`Tensor.shard` keeps its layout (a replicated batch argument is still
  split). Results keep the layout of the tensor they replace; a new ``.grad``
  takes its parameter's layout; other new values (optimizer state on the
  first step, the loss) follow the state rule by shape, so the optimizer
  state of a parameter placed by hand is replicated under data parallelism.
- ``verify=True`` is not available with a mesh (it checks on one device).

The loss and parameters after each step equal single-device training on the
whole batch up to float reassociation; BatchNorm's statistics are over the
whole batch (the step is written for the global batch, as on one device).

Eager ops on sharded tensors run on the mesh too (JAX places an unplaced
operand there); an operand pinned to one device (``dj.tensor(a, device="cpu")``)
meeting a sharded one raises JAX's ``ValueError`` naming both device sets --
never a silent single-device result.

Several hosts (one process per host, every process runs the same script)::

    import dynajax as dj
    dj.distributed.initialize("10.0.0.1:1234", num_processes=2, process_id=RANK)   # before any computation
    mesh = dj.distributed.Mesh()                 # all devices of all processes
    step = dj.compile(train_step, mesh=mesh)
    step(x, y)                                   # x, y: the same global batch in every process

Every process passes the whole global batch (same data and seed everywhere)
and its devices keep their rows; or each process builds the batch from its own
rows with :func:`global_batch`. Parameters are initialised identically in
every process by seeding. A value split over other processes' devices cannot
be read with ``.numpy()``/``.item()``; :func:`gather` fetches it (a collective:
every process calls it). CPU processes communicate through gloo. Tested: two
processes with two CPU devices each on loopback (``tests/test_distributed.py``);
not tested here: real multi-host GPU/TPU clusters.

One machine, one CPU: :func:`simulate_cpu_devices` (or
``XLA_FLAGS=--xla_force_host_platform_device_count=8``) splits it into devices.
"""
from __future__ import annotations

import collections
import functools
import os
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding as NamedSharding
from jax.sharding import PartitionSpec as PartitionSpec

from . import _dtype
from ._device import STEP_COMPILER_OPTIONS
from ._lru import lru_get
from ._tensor import Tensor, _make, method
from .ops.registry import op, run

__all__ = ["Mesh", "devices", "PartitionSpec", "NamedSharding", "initialize", "shutdown", "simulate_cpu_devices",
           "process_index", "process_count", "shard", "global_batch", "gather", "per_device_bytes",
           "is_available", "is_initialized", "init_process_group", "destroy_process_group", "get_rank",
           "get_world_size", "barrier"]

_P = PartitionSpec
_AUTO = jax.sharding.AxisType.Auto
_MODES = (None, "replicated", "fsdp")


def Mesh(shape: Sequence[int] | None = None, axis_names: Sequence[str] = ("data",), *,
         devices: Sequence | None = None) -> jax.sharding.Mesh:
    """A ``jax.sharding.Mesh`` of ``devices`` (default: every device of every process) shaped ``shape``.

    Axes use JAX's automatic (GSPMD) sharding mode, the one ``dynajax.compile`` relies on.

    >>> mesh = Mesh()                                  # all devices on axis "data"
    >>> mesh = Mesh((4, 2), ("data", "model"))         # 8 devices: 4-way data, 2-way model
    """
    devices = list(jax.devices() if devices is None else devices)
    axis_names = tuple(axis_names)
    shape = (len(devices),) if shape is None else tuple(shape)
    if len(shape) != len(axis_names):
        raise ValueError(f"Mesh: shape {list(shape)} has {len(shape)} axes but axis_names {list(axis_names)} "
                         f"names {len(axis_names)}")
    if int(np.prod(shape)) != len(devices):
        raise ValueError(f"Mesh: shape {list(shape)} needs {int(np.prod(shape))} devices, {len(devices)} given "
                         f"(visible: {jax.device_count()})")
    return jax.sharding.Mesh(np.array(devices, dtype=object).reshape(shape), axis_names,
                             axis_types=(_AUTO,) * len(shape))


def devices(kind: str | None = None) -> list:
    """Every device (of every process) of platform ``kind`` named as in PyTorch ("cpu", "cuda", "tpu");
    None: JAX's default platform.

    >>> mesh = Mesh(devices=devices("cuda"))
    """
    if kind is None:
        return jax.devices()
    from ._device import _PLATFORM, device
    device(kind).jax_device()   # raises PyTorch-style, naming the platforms JAX sees
    return jax.devices(_PLATFORM[device(kind).type])


def _auto(mesh) -> jax.sharding.Mesh:
    """``mesh`` with automatic axes (an explicit-axes mesh, ``jax.make_mesh``'s default, is rebuilt)."""
    if not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(f"expected a dynajax.distributed.Mesh / jax.sharding.Mesh, got {type(mesh).__name__}")
    if all(t == _AUTO for t in mesh.axis_types):
        return mesh
    return jax.sharding.Mesh(mesh.devices, mesh.axis_names, axis_types=(_AUTO,) * len(mesh.axis_names))


def _spec(spec) -> PartitionSpec:
    if isinstance(spec, PartitionSpec):
        return spec
    if spec is None:
        return _P()
    return _P(*spec) if isinstance(spec, (tuple, list)) else _P(spec)


# ---------------------------------------------------------------- processes
def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, local_device_ids: int | Sequence[int] | None = None,
               **kwargs) -> None:
    """Join a multi-process run (``jax.distributed.initialize``); call first thing, in every process.

    On CPU, processes exchange data through gloo. Arguments left out are detected from the cluster
    environment (SLURM, Open MPI, cloud TPU) as JAX does.

    >>> dynajax.distributed.initialize("127.0.0.1:1234", num_processes=2, process_id=rank)
    """
    if jax.config.values.get("jax_cpu_collectives_implementation") in (None, "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address, num_processes, process_id, local_device_ids, **kwargs)


def simulate_cpu_devices(n: int) -> None:
    """Run on ``n`` simulated CPU devices (to try meshes on one machine); call before any JAX computation.

    >>> dynajax.distributed.simulate_cpu_devices(8); mesh = dynajax.distributed.Mesh()   # 8 devices
    """
    try:
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", int(n))
    except RuntimeError as exc:
        raise RuntimeError(f"simulate_cpu_devices({n}): JAX has already started its devices "
                           f"({jax.device_count()} visible); call it first thing, or set "
                           f"XLA_FLAGS=--xla_force_host_platform_device_count={n} before starting Python") from exc


def shutdown() -> None:
    """Leave the multi-process run (``jax.distributed.shutdown``)."""
    jax.distributed.shutdown()


def process_index() -> int:
    """This process's rank (0 in a single-process run)."""
    return jax.process_index()


def process_count() -> int:
    """Number of processes in the run."""
    return jax.process_count()


# ---------------------------------------------------------------- torch.distributed's process group, one process
_GROUP: dict = {}   # the default process group while one is initialised: {"world_size": 1, "rank": 0}
_NO_GROUP = "Default process group has not been initialized, please make sure to call init_process_group."


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return bool(_GROUP)


def init_process_group(backend=None, init_method=None, timeout=None, world_size: int = -1, rank: int = -1,
                       store=None, group_name: str = "", pg_options=None, device_id=None) -> None:
    """``torch.distributed.init_process_group`` for a run of one process (``WORLD_SIZE`` unset or 1), so
    scripts written for torchrun run as one process. Several processes are refused: dynajax's way is
    :func:`initialize` and ``dynajax.compile(step, mesh=Mesh())``."""
    if _GROUP:
        raise ValueError("trying to initialize the default process group twice!")
    world = int(world_size) if world_size != -1 else int(os.environ.get("WORLD_SIZE", 1))
    me = int(rank) if rank != -1 else int(os.environ.get("RANK", 0))
    if world != 1:
        raise NotImplementedError(
            f"dynajax has no torch.distributed process group of {world} processes; run one process, or use "
            "dynajax.distributed.initialize(...) with dynajax.compile(step, mesh=dynajax.distributed.Mesh())")
    if me != 0:
        raise ValueError(f"init_process_group: rank {me} is not below world_size 1")
    _GROUP.update(world_size=1, rank=0, backend=backend or "gloo")


def destroy_process_group(group=None) -> None:
    _GROUP.clear()


def get_rank(group=None) -> int:
    if not _GROUP:
        raise ValueError(_NO_GROUP)
    return _GROUP["rank"]


def get_world_size(group=None) -> int:
    if not _GROUP:
        raise ValueError(_NO_GROUP)
    return _GROUP["world_size"]


def barrier(group=None, async_op: bool = False, device_ids=None) -> None:
    """Every process of the (one-process) group has arrived."""
    if not _GROUP:
        raise ValueError(_NO_GROUP)


# ---------------------------------------------------------------- tensors
@_dtype.x64.wrap
def _put(arr, sharding):
    """``arr`` laid out as ``sharding`` as a new buffer (never an alias: the result may be donated).

    A sharding spanning other processes' devices takes the host value (every process holds the same).
    ``may_alias=False`` is not enough: jax 0.10's device_put of a one-device array onto a replicated
    sharding reuses the array's buffer as the shard on its device (so a step donating the result deleted
    the source under whoever else held it, and two inputs put from one array were one buffer donated
    twice); such a result is made again from a copy."""
    if not sharding.is_fully_addressable and isinstance(arr, jax.Array) and arr.is_fully_addressable:
        arr = np.asarray(arr)
    out = jax.device_put(arr, sharding, may_alias=False)
    if isinstance(arr, jax.Array) and _shares_a_buffer(out, arr):
        out = jax.device_put(jnp.copy(arr), sharding, may_alias=False)
    return out


def _shares_a_buffer(a: jax.Array, b: jax.Array) -> bool:
    """Whether arrays ``a`` and ``b`` have a shard in the same device buffer (True where a backend cannot say)."""
    try:
        mine = {s.data.unsafe_buffer_pointer() for s in a.addressable_shards}
        return any(s.data.unsafe_buffer_pointer() in mine for s in b.addressable_shards)
    except Exception:   # (a backend without buffer pointers: assume the worst, a copy is only slower)
        return True


@op("shard")
def _shard(x, *, sharding):
    return jax.lax.with_sharding_constraint(x, sharding)


_shard.defvjp(lambda g, out, x, **_: (g,))


@method()
def shard(self: Tensor, mesh, spec=None) -> Tensor:
    """This tensor laid out over ``mesh`` as ``spec`` (a :class:`PartitionSpec`; None: replicated).

    Differentiable (gradients flow back to ``self``); eager ops and ``dynajax.compile`` keep the
    layout, and inside a compiled step it constrains the layout XLA gives the value. To place a
    parameter: ``with dynajax.no_grad(): p.data = p.shard(mesh, spec)``.

    >>> w = dj.randn(1024, 512).shard(mesh, PartitionSpec("model", None))
    """
    spec = _spec(spec)
    mesh = _auto(mesh)
    if len(spec) > self.ndim:
        raise ValueError(f"shard: PartitionSpec {spec} has {len(spec)} entries for a tensor of shape "
                         f"{list(self.shape)}")
    for d, axes in enumerate(spec):
        for a in (axes if isinstance(axes, tuple) else (axes,)):
            if a is not None and a not in mesh.shape:
                raise ValueError(f"shard: mesh axis {a!r} of PartitionSpec {spec} is not in the mesh "
                                 f"(axes {list(mesh.axis_names)})")
        n = _axis_size(mesh, axes)
        if self.shape[d] % n:
            raise ValueError(f"shard: dim {d} of a tensor of shape {list(self.shape)} has size {self.shape[d]}, "
                             f"not divisible by the {n} devices of mesh axes {axes!r}")
    sharding = NamedSharding(mesh, spec)
    # eagerly a device_put, which also moves an array pinned to another device (a jitted
    # with_sharding_constraint would refuse it); capture records the constraint
    return run(_shard, functools.partial(_put, sharding=sharding), (self,), {"sharding": sharding})


@_dtype.x64.wrap
def global_batch(local, mesh, data_axis: str = "data") -> Tensor:
    """The global batch from this process's rows ``local`` (concatenated over processes in rank order),
    split along dim 0 over ``data_axis``."""
    local = local._value if isinstance(local, Tensor) else local
    sharding = NamedSharding(_auto(mesh), _P(data_axis))
    return _make(jax.make_array_from_process_local_data(sharding, np.asarray(local)), False)


@_dtype.x64.wrap
def gather(tensor) -> np.ndarray:
    """The full value of ``tensor`` as a numpy array, also when its shards live in other processes (then
    it is a collective: every process must call it, in the same order)."""
    arr = tensor._value if isinstance(tensor, Tensor) else tensor
    if arr.is_fully_addressable or arr.is_fully_replicated:
        return np.asarray(arr)
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(arr, tiled=True))


def per_device_bytes(tensors) -> dict:
    """Bytes each device holds for ``tensors`` (Tensors or arrays, e.g. ``model.parameters()``): a dict
    device -> bytes, counting only this process's devices."""
    total: collections.Counter = collections.Counter()
    for t in tensors:
        arr = t._value if isinstance(t, Tensor) else t
        for s in arr.addressable_shards:
            total[s.device] += s.data.nbytes
    return dict(total)


def _axis_size(mesh, axes) -> int:
    if axes is None:
        return 1
    return int(np.prod([mesh.shape[a] for a in (axes if isinstance(axes, tuple) else (axes,))]))


# ---------------------------------------------------------------- compile
class Layout:
    """Where a compiled step's inputs and outputs live on a mesh (``dynajax.compile(mesh=...)``)."""

    def __init__(self, mesh, data_axis: str = "data", param_sharding: str | None = None,
                 cache_size: int = 64) -> None:
        self.mesh = _auto(mesh)
        if data_axis not in self.mesh.shape:
            raise ValueError(f"dynajax.compile: data_axis {data_axis!r} is not an axis of the mesh "
                             f"(axes {list(self.mesh.axis_names)})")
        if param_sharding not in _MODES:
            raise ValueError(f"dynajax.compile: param_sharding must be one of {list(_MODES)}, "
                             f"got {param_sharding!r}")
        self.data_axis = data_axis
        self.fsdp = param_sharding == "fsdp"
        self.n = self.mesh.shape[data_axis]
        self.replicated = NamedSharding(self.mesh, _P())
        self.batch = NamedSharding(self.mesh, _P(data_axis))
        self.cache_size = cache_size
        self._exes: collections.OrderedDict = collections.OrderedDict()
        self._state: dict = {}

    def state_sharding(self, shape: tuple) -> NamedSharding:
        """Replicated, or under FSDP split along the largest dimension divisible by the data axis size."""
        if not self.fsdp:
            return self.replicated
        s = self._state.get(shape)
        if s is None:
            dims = [d for d in range(len(shape)) if shape[d] >= self.n and shape[d] % self.n == 0]
            if not dims:
                s = self.replicated
            else:
                d = max(dims, key=lambda i: (shape[i], -i))
                s = NamedSharding(self.mesh, _P(*([None] * d + [self.data_axis])))
            self._state[shape] = s
        return s

    def input_shardings(self, cap, args, kwargs) -> list:
        """The sharding of each executable input (see the module docstring's rules)."""
        batch_ids = {id(t) for t in jax.tree_util.tree_leaves((args, kwargs), is_leaf=lambda a: isinstance(a, Tensor))
                     if isinstance(t, Tensor)}
        pos_of_var = {v: i for i, v in enumerate(cap.in_vars)}
        batch: dict = {}   # input position -> the argument tensor
        for t, arr, _, sym in cap.adopted:
            if id(t) in batch_ids:
                p = pos_of_var.get(sym.idx) if sym is not None else cap.in_of.get(id(arr))
                if p is not None:
                    batch.setdefault(p, t)
        out, mesh = [], self.mesh
        for i, arr in enumerate(cap.inputs):
            shape = tuple(arr.shape)
            sh = getattr(arr, "sharding", None)
            if (type(sh) is NamedSharding and (sh.mesh is mesh or sh.mesh == mesh)
                    and not (i in batch and sh.is_fully_replicated)):
                out.append(sh)
            elif i in batch and shape:
                if shape[0] % self.n:
                    from .compile.bucketing import mask_array
                    fix = (f"Declare bucket sizes in dynamic= that are multiples of {self.n} (this batch ran at "
                           f"its bucket size, {shape[0]})." if mask_array(shape[0]) is not None else
                           f"Pad the batch to a multiple of {self.n} or drop the last partial batch "
                           "(DataLoader(..., drop_last=True)).")
                    raise ValueError(f"dynajax.compile(mesh=...): {_arg_name(batch[i], args, kwargs)} of shape "
                                     f"{list(shape)} cannot be split over the {self.n} devices of mesh axis "
                                     f"{self.data_axis!r}: its first dimension {shape[0]} is not a multiple of "
                                     f"{self.n}. {fix}")
                out.append(self.batch)
            else:
                out.append(self.state_sharding(shape))
        return out

    def output_shardings(self, plan, cap, ins: list) -> list:
        """Each output keeps the layout of the tensor it replaces; a new grad takes its parameter's."""
        pos_of_var = {v: i for i, v in enumerate(cap.in_vars)}
        of_tensor, of_grad = {}, {}
        for t, arr, _, sym in cap.adopted:
            p = pos_of_var.get(sym.idx) if sym is not None else cap.in_of.get(id(arr))
            if p is None:
                continue
            of_tensor.setdefault(id(t), ins[p])
            if t.grad is not None:
                of_grad.setdefault(id(t.grad), ins[p])
        by_var: dict = {}   # var -> (rank, sharding): a value several tensors hold takes the best-ranked
        for obj, var, kind in plan.targets:   # targets still hold the recorded Syms (shapes) here
            if kind == "g":
                got = (0, self.replicated)
            elif id(obj) in of_tensor:
                got = (0, of_tensor[id(obj)])
            elif id(obj) in of_grad:
                got = (1, of_grad[id(obj)])
            else:
                got = (2, self.state_sharding(tuple(obj._v.shape)))
            if var not in by_var or got[0] < by_var[var][0]:
                by_var[var] = got
        return [by_var[v][1] for v in plan.outs]

    def prepare(self, exe, plan, cap, args, kwargs, donate: bool):
        """Lay the step's inputs out on the mesh (in ``cap.inputs``) and return the executable for that
        layout: ``exe``'s function under ``jax.jit`` with the output shardings."""
        ins = self.input_shardings(cap, args, kwargs)
        for i, (arr, s) in enumerate(zip(cap.inputs, ins)):
            sh = getattr(arr, "sharding", None)
            if sh is not s and sh != s:
                cap.inputs[i] = _put(arr, s)
        key = (exe, tuple(ins))   # exe: the cached executable of this graph (identity; held while cached here)

        def make():
            d = plan.donate if donate else ()
            return jax.jit(exe.__wrapped__, out_shardings=self.output_shardings(plan, cap, ins),
                           donate_argnums=(0,) if d else (), compiler_options=STEP_COMPILER_OPTIONS)
        return lru_get(self._exes, key, self.cache_size, make)


def _arg_name(t: Tensor, args, kwargs) -> str:
    """How the step received batch tensor ``t``: "argument 1", "argument 'y'" (or "a batch argument")."""
    for i, a in enumerate(args):
        if a is t:
            return f"argument {i}"
    for k, a in kwargs.items():
        if a is t:
            return f"argument {k!r}"
    return "a batch argument"
