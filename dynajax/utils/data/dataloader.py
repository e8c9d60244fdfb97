"""``DataLoader``: batches from a dataset with samplers, shuffling from the seeded generator,
``drop_last``, PyTorch's default collation, and loading in worker processes (``num_workers``)."""
from __future__ import annotations

import itertools
import multiprocessing
import pickle
import queue
import weakref

import jax
import numpy as np

from ... import random
from ..._tensor import Tensor
from ...ops.creation import randint, randperm
from . import _worker
from ._collate import default_collate as default_collate
from ._collate import default_convert as default_convert
from ._collate import from_worker
from .dataset import IterableDataset

DRAW_CHUNK = 1024   # indices RandomSampler draws at a time with replacement


def _seed_from(generator) -> int:
    """A non-negative 63-bit seed drawn from ``generator`` (the default stream if None)."""
    hi, lo = (int(w) for w in np.asarray(random.next_key(generator)))
    return ((hi << 32) | lo) & (2**63 - 1)


# ---------------------------------------------------------------- samplers
class Sampler:
    """Yields dataset indices."""

    def __init__(self, data_source=None) -> None:
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., len-1."""

    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation (or draws with ``replacement``) from the seeded generator."""

    def __init__(self, data_source, replacement: bool = False, num_samples=None, generator=None) -> None:
        self.data_source, self.replacement, self._num_samples = data_source, replacement, num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={replacement}")
        n = self.num_samples
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={n}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        # drawn lazily, a chunk (or one permutation) at a time, so num_samples may be huge; without a
        # generator, one seed from the default stream starts a private one, as PyTorch does, so the
        # indices do not depend on what else draws from the default stream meanwhile
        n, total = len(self.data_source), self.num_samples
        gen = self.generator if self.generator is not None else random.Generator().manual_seed(_seed_from(None))
        if self.replacement:
            for start in range(0, total, DRAW_CHUNK):
                # always a full chunk: one shape, so one compiled sampler
                yield from randint(0, n, (DRAW_CHUNK,), generator=gen).tolist()[:total - start]
        else:
            for start in range(0, total, n):
                yield from randperm(n, generator=gen).tolist()[:total - start]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in random order."""

    def __init__(self, indices, generator=None) -> None:
        self.indices, self.generator = indices, generator

    def __iter__(self):
        return iter([self.indices[i] for i in randperm(len(self.indices), generator=self.generator).tolist()])

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """Indices drawn with probability proportional to ``weights`` (with or without replacement)."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None) -> None:
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        w = np.asarray(weights.tolist() if isinstance(weights, Tensor) else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {tuple(w.shape)}")
        # PyTorch checks the weights when drawing (torch.multinomial); checked here once, as they are fixed
        if not np.isfinite(w).all():
            raise RuntimeError("invalid multinomial distribution (encountering probability entry = infinity or NaN)")
        if (w < 0).any():
            raise RuntimeError("invalid multinomial distribution (encountering probability entry < 0)")
        if w.sum() <= 0:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        if not replacement and num_samples > len(w):
            raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        self.weights, self.num_samples, self.replacement, self.generator = w, num_samples, replacement, generator

    def __iter__(self):
        idx = jax.random.choice(random.next_key(self.generator), len(self.weights), (self.num_samples,),
                                replace=self.replacement, p=self.weights / self.weights.sum())
        return iter(np.asarray(idx).tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Groups another sampler's indices into lists of ``batch_size``."""

    def __init__(self, sampler, batch_size: int, drop_last: bool) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


# ---------------------------------------------------------------- loader
class DataLoader:
    """Iterate over ``dataset`` in batches.

    >>> loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, drop_last=True)
    >>> for xb, yb in loader: ...

    With ``num_workers > 0``, batches are made in that many worker processes, delivered in order, as
    PyTorch's: ``worker_init_fn``, ``get_worker_info()``, ``prefetch_factor`` (batches asked of each worker
    ahead, default 2), ``persistent_workers``, ``timeout`` and ``in_order`` work as there. JAX is not
    fork-safe, so workers are started with 'forkserver' (where the platform has it, else 'spawn'; pass
    ``multiprocessing_context`` to choose): the dataset, ``collate_fn`` and ``worker_init_fn`` must be
    picklable (defined at module level), and a script must guard its entry point with
    ``if __name__ == "__main__":``. The forkserver is told to preload dynajax, so a worker starts in a few
    milliseconds, then imports the main script and the modules that define the dataset. Workers keep JAX
    to the CPU and do not start it unless the dataset or ``collate_fn`` makes tensors; they send numpy
    data, and tensors are made in the main process. ``pin_memory`` is accepted and does nothing.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True) -> None:
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing. Let num_workers "
                             "> 0 to enable multiprocessing, otherwise set prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.worker_init_fn, self.prefetch_factor = worker_init_fn, prefetch_factor
        self.persistent_workers, self.in_order = persistent_workers, in_order
        self.pin_memory_device = pin_memory_device
        self.multiprocessing_context = _checked_context(multiprocessing_context, num_workers)
        self._workers = None   # the persistent workers' iterator
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout
        self.generator = generator
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 f"shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler option, but got "
                                 f"sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified batch_sampler option, but "
                                 f"got batch_sampler={batch_sampler}")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size, drop_last = None, False
            self.batch_size, self.drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with "
                             "drop_last")
        if sampler is None and not self._iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.collate_fn = collate_fn or (default_collate if (batch_size is not None or batch_sampler is not None)
                                         else default_convert)

    @property
    def _index_sampler(self):
        """What yields the work of one batch: the batch sampler, the sampler (no auto-batching), or for an
        iterable dataset the batch size (or None) forever."""
        if self._iterable:
            return itertools.repeat(self.batch_size)
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def __iter__(self):
        # a new iterator draws the workers' base seed, also without workers, as PyTorch's does: the default
        # stream then moves alike with and without workers, so a seeded shuffle gives the same batches
        if self.persistent_workers and self._workers is not None and self._workers.alive:
            self._workers.restart(self)
            return self._workers
        base_seed = _seed_from(self.generator)
        if self.num_workers == 0:
            return self._batches()
        it = _WorkerIterator(self, base_seed)
        if self.persistent_workers:
            self._workers = it
        return it

    def _batches(self):
        if self._iterable:
            yield from self._iter_iterable()
            return
        if self.batch_sampler is None:
            for i in self.sampler:
                yield self.collate_fn(self.dataset[i])
            return
        for indices in self.batch_sampler:
            yield self.collate_fn(self._fetch(indices))

    def _fetch(self, indices):
        ds = self.dataset
        if hasattr(ds, "__getitems__"):
            return ds.__getitems__(indices)
        return [ds[i] for i in indices]

    def _iter_iterable(self):
        if self.batch_size is None:
            for s in self.dataset:
                yield self.collate_fn(s)
            return
        batch = []
        for s in self.dataset:
            batch.append(s)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler) if self.batch_sampler is not None else len(self.sampler)


# ---------------------------------------------------------------- worker processes
_preloaded = False


def _checked_context(context, num_workers: int):
    """``multiprocessing_context`` checked as PyTorch checks it: a start method's name or a context, and
    only with workers."""
    if context is None:
        return None
    if num_workers == 0:
        raise ValueError(f"multiprocessing_context can only be used with multi-process loading (num_workers > 0), "
                         f"but got num_workers={num_workers}")
    if isinstance(context, str):
        methods = multiprocessing.get_all_start_methods()
        if context not in methods:
            raise ValueError(f"multiprocessing_context option should specify a valid start method in {methods!r}, "
                             f"but got multiprocessing_context={context!r}")
        context = multiprocessing.get_context(context)
    if not isinstance(context, multiprocessing.context.BaseContext):
        raise TypeError(f"multiprocessing_context option should be a valid context object or a string specifying "
                        f"the start method, but got multiprocessing_context={context}")
    return context


def _context(chosen):
    """The context workers start in: ``chosen``, else 'forkserver' where the platform has it, else 'spawn';
    never 'fork' unless chosen, as JAX's threads do not survive one. A forkserver that this process starts
    preloads the worker module (so dynajax and JAX, imported but not started), and not ``__main__``: a
    script's top-level code could start JAX there, and every worker is forked from that server."""
    global _preloaded
    if chosen is None:
        forkserver = "forkserver" in multiprocessing.get_all_start_methods()
        chosen = multiprocessing.get_context("forkserver" if forkserver else "spawn")
    if chosen.get_start_method() == "forkserver" and not _preloaded:
        chosen.set_forkserver_preload([_worker.__name__])   # no effect once the server runs
        _preloaded = True
    return chosen


def _stop_workers(workers: list, index_queues: list, done) -> None:
    """Tell the workers to stop and wait for them (killing any that do not stop within a few seconds).
    Run by a ``weakref.finalize``, which holds the queues: were they garbage with the iterator, their own
    finalizers could stop the threads that send what is put in them, before this runs."""
    try:
        done.set()
        for q in index_queues:
            q.put(None)
        for w in workers:
            w.join(timeout=5 * _worker.POLL_S)
        for q in index_queues:
            q.close()
    finally:
        for w in workers:
            if w.is_alive():
                w.terminate()
                w.join(timeout=_worker.POLL_S)


class _WorkerIterator:
    """Batches from worker processes, in order: up to ``prefetch_factor`` tasks are handed to each worker
    ahead (round robin); answers that arrive early wait in ``_pending`` for their turn."""

    def __init__(self, loader: DataLoader, base_seed: int) -> None:
        if loader.prefetch_factor <= 0:
            raise AssertionError("prefetch_factor must be greater than 0 for multi-process loading")
        # the loader is not held: a persistent loader holds this iterator, and the cycle would leave the
        # workers running until a garbage collection
        self._n = loader.num_workers
        self._timeout, self._in_order = loader.timeout, loader.in_order
        self._persistent, self._ahead = loader.persistent_workers, loader.prefetch_factor * loader.num_workers
        self._workers, self._index_queues = [], []
        ctx = _context(loader.multiprocessing_context)
        self._results, self._done = _worker.ResultQueue(ctx=ctx), ctx.Event()
        # also run at exit, before multiprocessing's exit handler kills daemon processes
        self._stopper = weakref.finalize(self, _stop_workers, self._workers, self._index_queues, self._done)
        batched = loader.batch_size is not None or loader.batch_sampler is not None
        try:
            pickled = _worker.Deferred((loader.dataset, loader.collate_fn, loader.worker_init_fn))
            for wid in range(self._n):
                q = ctx.Queue()
                q.cancel_join_thread()   # what is left in it at shutdown is dropped, not waited for
                w = ctx.Process(target=_worker.worker_loop, daemon=True, args=(
                    loader._iterable, pickled, q, self._results, self._done, batched, loader.drop_last, base_seed,
                    wid, self._n))
                w.start()
                self._workers.append(w)
                self._index_queues.append(q)
        except (TypeError, AttributeError, pickle.PicklingError) as e:
            self.shutdown()
            e.add_note(f"DataLoader workers are started with the {ctx.get_start_method()!r} start method "
                       "(JAX is not fork-safe), which pickles the dataset, collate_fn and worker_init_fn: "
                       "define them at module level.")
            raise
        self._start_epoch(loader)

    # ------------------------------------------------------------ bookkeeping
    def _start_epoch(self, loader: DataLoader) -> None:
        self._sampler = loader._index_sampler
        self._indices = iter(self._sampler)
        self._sent = self._next_out = 0              # tasks handed out; the task whose batch is due next
        self._owner: dict = {}                       # task -> worker, for tasks not yet delivered
        self._pending: dict = {}                     # task -> answer that came before its turn
        self._active = [True] * self._n              # False once a worker's iterable copy ran out
        self._load = [0] * self._n                   # tasks handed to each worker and not yet delivered
        self._turn = itertools.cycle(range(self._n))
        for _ in range(self._ahead):
            self._hand_out()

    @property
    def alive(self) -> bool:
        """Whether the workers have not been shut down."""
        return self._stopper.alive

    def restart(self, loader: DataLoader) -> None:
        """A new epoch on the same (persistent) workers."""
        for q in self._index_queues:
            q.put(_worker.Resume())
        acks = 0
        while acks < self._n:   # answers of the last epoch's unfinished tasks come first: dropped
            task, _ = self._receive()
            acks += isinstance(task, _worker.Resume)
        self._start_epoch(loader)

    def _hand_out(self) -> None:
        """Give the next task to the next worker still active, if there is a task and such a worker."""
        try:
            what = next(self._indices)
        except StopIteration:
            return
        for _ in range(self._n):
            wid = next(self._turn)
            if self._active[wid] and (self._in_order or self._load[wid] < self._ahead // sum(self._active)):
                break
        else:
            return
        self._index_queues[wid].put((self._sent, what))
        self._owner[self._sent] = wid
        self._load[wid] += 1
        self._sent += 1

    def _receive(self):
        """The next ``(task, answer)`` from any worker, watching for workers that died and for ``timeout``."""
        wait = self._timeout if self._timeout > 0 else _worker.POLL_S
        while True:
            try:
                return self._results.get(timeout=wait)
            except queue.Empty:
                dead = [w for wid, w in enumerate(self._workers) if self._active[wid] and not w.is_alive()]
                if dead:
                    pids = ", ".join(str(w.pid) for w in dead)
                    self.shutdown()
                    raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly") from None
                if self._timeout > 0:
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds") from None

    # ------------------------------------------------------------ iteration
    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._sampler)

    def __next__(self):
        if not self.alive:
            raise StopIteration
        while True:
            # skip tasks that will never be answered (their worker's iterable ran out) or were delivered
            while self._next_out < self._sent:
                wid = self._owner.get(self._next_out)
                if self._next_out in self._pending or (wid is not None and self._active[wid]):
                    break
                self._owner.pop(self._next_out, None)
                self._next_out += 1
            else:
                if not self._persistent:
                    self.shutdown()
                raise StopIteration
            if self._next_out in self._pending:
                task = self._next_out
                self._next_out += 1
                return self._deliver(task, self._pending.pop(task))
            task, answer = self._receive()
            if isinstance(answer, _worker.IterableEnd):
                self._active[answer.worker_id] = False
                if not self._persistent:
                    self._index_queues[answer.worker_id].put(None)   # done for good: let it exit
                self._hand_out()
                continue
            if task == self._next_out or not self._in_order:
                self._next_out += task == self._next_out
                return self._deliver(task, answer)
            self._pending[task] = answer

    def _deliver(self, task: int, answer):
        wid = self._owner.pop(task)
        self._load[wid] -= 1
        self._hand_out()
        if isinstance(answer, _worker.WorkerError):
            answer.reraise()
        return from_worker(answer)

    def shutdown(self) -> None:
        """Stop the workers now (else when this iterator is garbage, or at exit)."""
        self._stopper()
