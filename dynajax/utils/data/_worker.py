"""What runs in a ``DataLoader`` worker process: ``get_worker_info``, the per-worker seeding, and the loop
that fetches and collates the batches the main process asks for.

Workers are started with 'forkserver' or 'spawn' (JAX is not fork-safe), so everything here reaches them
pickled. They send numpy data (see ``_collate``) and never start JAX themselves: only a dataset or
``collate_fn`` that makes tensors does.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.queues
import pickle
import queue
import random as _py_random
import sys
import traceback
from multiprocessing.reduction import ForkingPickler

import jax
import numpy as np

from ... import random as _dj_random
from . import _collate

POLL_S = 1.0   # how often a waiting worker (or the main process) looks whether the other side is still there


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """What ``get_worker_info()`` returns in a worker: its ``id`` (0 to ``num_workers - 1``), ``num_workers``,
    the ``seed`` it was seeded with, and ``dataset``, this worker's own copy of the dataset."""

    id: int
    num_workers: int
    seed: int
    dataset: object


_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """This worker's ``WorkerInfo`` in a ``DataLoader`` worker process; ``None`` in the main process."""
    return _info


@dataclasses.dataclass(frozen=True)
class IterableEnd:
    """A worker's answer once its copy of an ``IterableDataset`` is exhausted."""

    worker_id: int


@dataclasses.dataclass(frozen=True)
class Resume:
    """Sent to persistent workers at the start of an epoch; echoed back once they are ready."""


class _KeyErrorMessage(str):
    """A ``KeyError``'s text that prints as text (``KeyError`` shows the repr of its argument)."""

    def __repr__(self) -> str:
        return str(self)


class WorkerError:
    """An exception raised in a worker (the one being handled, or ``exc``), carried to the main process as
    its type and traceback text."""

    def __init__(self, where: str, exc: BaseException | None = None) -> None:
        exc = exc if exc is not None else sys.exc_info()[1]
        self.exc_type, self.where = type(exc), where
        self.text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def reraise(self):
        """Raise it again here, as PyTorch does: the same type when it can be built from one message."""
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.text}"
        if self.exc_type is KeyError:
            msg = _KeyErrorMessage(msg)
        try:
            err = self.exc_type(msg)
        except Exception:
            raise RuntimeError(msg) from None
        raise err


class ResultQueue(multiprocessing.queues.Queue):
    """The workers' answers. A queue pickles what is put in it in a background thread; an answer that does
    not pickle (a sample holding a lambda) is replaced there by the error, so the main process hears of it
    instead of waiting for an answer that never comes."""

    def _on_queue_feeder_error(self, e, obj) -> None:
        task, _ = obj
        wid = _info.id if _info is not None else "?"
        self.put((task, WorkerError(f"in DataLoader worker process {wid}", e)))


class Deferred:
    """An object pickled as the bytes of its own pickle, so that it is unpickled only when ``load()`` is
    called (a worker first keeps JAX to the CPU). The inner pickle is made while the process starts, so
    what may only be pickled then (a ``multiprocessing`` lock or queue in a dataset) still can be; with
    'fork' nothing is pickled and the object is passed as it is."""

    def __init__(self, obj=None, data: bytes | None = None) -> None:
        self._obj, self._data = obj, data

    def __reduce__(self):
        data = self._data if self._data is not None else bytes(ForkingPickler.dumps(self._obj))
        return Deferred, (None, data)

    def load(self):
        return self._obj if self._data is None else pickle.loads(self._data)


def numpy_seed(base_seed: int, worker_id: int) -> list:
    """The 4 words numpy's global generator is seeded with in a worker: a ``SeedSequence`` of the worker id
    and the base seed's two halves (the state PyTorch's workers derive, so numpy's streams match theirs)."""
    words = [worker_id, base_seed & 0xFFFFFFFF, base_seed >> 32, 0]
    return np.random.SeedSequence(words).generate_state(4).tolist()


def seed_worker(base_seed: int, worker_id: int) -> int:
    """Seed Python's ``random``, numpy's and dynajax's global generators for one worker; its seed."""
    seed = base_seed + worker_id
    _py_random.seed(seed)
    np.random.seed(numpy_seed(base_seed, worker_id))
    _dj_random.manual_seed(seed)
    return seed


class _MapFetcher:
    """Batches (or single samples) of a map-style dataset by index."""

    def __init__(self, dataset, batched: bool, collate_fn) -> None:
        self.dataset, self.batched, self.collate_fn = dataset, batched, collate_fn
        self.at = None   # the index being read, named if it fails

    def fetch(self, index):
        ds = self.dataset
        if not self.batched:
            self.at = index
            sample = ds[index]
        elif hasattr(ds, "__getitems__"):
            self.at = index
            sample = ds.__getitems__(index)
        else:
            sample = []
            for i in index:
                self.at = i
                sample.append(ds[i])
        self.at = None
        return self.collate_fn(sample)


class _IterableFetcher:
    """The next batch (``batch_size`` samples) or sample (``None``) of this worker's iterator."""

    def __init__(self, dataset, drop_last: bool, collate_fn) -> None:
        self.samples, self.drop_last, self.collate_fn = iter(dataset), drop_last, collate_fn
        self.ended, self.at = False, None

    def fetch(self, batch_size):
        if self.ended:
            raise StopIteration
        if batch_size is None:
            return self.collate_fn(next(self.samples))
        batch = []
        for _ in range(batch_size):
            try:
                batch.append(next(self.samples))
            except StopIteration:
                self.ended = True
                break
        if not batch or (self.drop_last and len(batch) < batch_size):
            raise StopIteration
        return self.collate_fn(batch)


def worker_loop(iterable: bool, pickled: "Deferred", index_queue, result_queue, done_event, batched: bool,
                drop_last: bool, base_seed: int, worker_id: int, num_workers: int) -> None:
    """Serve the main process: each ``(task, what)`` from ``index_queue`` (indices, or for an iterable
    dataset a batch size) is answered on ``result_queue`` with ``(task, batch)``, a ``WorkerError`` or an
    ``IterableEnd``; ``Resume`` restarts the epoch; ``None`` ends the loop. ``pickled``: the dataset,
    ``collate_fn`` and ``worker_init_fn``, unpickled here once JAX is kept to the CPU: tensors they hold
    (or make) stay off an accelerator, where each worker would start its own backend and take memory."""
    global _info
    where = f"in DataLoader worker process {worker_id}"
    try:
        jax.config.update("jax_platforms", "cpu")
        # the worker is dynajax's own process: the user's dataset code runs in it as it would in the main
        # process inside dynajax's ops (PyTorch's int64/float64 exist)
        jax.config.update("jax_enable_x64", True)
        seed = seed_worker(base_seed, worker_id)
        failed_init = failed_load = fetcher = None

        def new_fetcher():
            if iterable:
                return _IterableFetcher(dataset, drop_last, collate)
            return _MapFetcher(dataset, batched, collate)

        try:
            dataset, collate_fn, init_fn = pickled.load()
        except Exception:   # (the module defining the dataset does not import here): the answer to every task
            failed_load = WorkerError(where)
        else:
            _info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
            collate = _collate.for_worker(collate_fn)
            try:
                if init_fn is not None:
                    init_fn(worker_id)
                fetcher = new_fetcher()
            except Exception:
                failed_init = WorkerError(where)   # the answer to the first task, as in PyTorch
        exhausted = False
        parent = multiprocessing.parent_process()
        while parent is None or parent.is_alive():
            try:
                task = index_queue.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if task is None:
                break
            if isinstance(task, Resume):
                result_queue.put((task, None))
                exhausted = False
                if failed_load is None:
                    try:
                        fetcher = new_fetcher()
                    except Exception:
                        failed_init = WorkerError(where)
                continue
            if done_event.is_set() or exhausted:
                continue    # shutting down, or nothing left to give this epoch: wait for None or Resume
            task_id, what = task
            if failed_load is not None:
                answer = failed_load
            elif failed_init is not None:
                answer, failed_init = failed_init, None
            else:
                try:
                    answer = fetcher.fetch(what)
                except Exception as e:
                    if iterable and isinstance(e, StopIteration):
                        answer, exhausted = IterableEnd(worker_id), True
                    else:
                        at = fetcher.at
                        answer = WorkerError(where if at is None else f"{where} (fetching dataset index {at})")
            result_queue.put((task_id, answer))
            del answer, task
    except KeyboardInterrupt:
        pass   # the main process has one too, and reports it
    if done_event.is_set():
        # the main process has stopped reading: do not wait at exit for results nobody will take
        result_queue.cancel_join_thread()
        result_queue.close()
