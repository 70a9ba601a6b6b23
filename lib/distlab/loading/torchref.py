"""The reference: torch's own ``DataLoader`` running the same stages, instrumented.

A map-style dataset runs the worker stages (see :func:`.procs.split_stages`) for item ``i`` inside
DataLoader's workers (``num_workers``, ``prefetch_factor``, spawn context, persistent workers)
and returns the output together with its spans (lanes ``"<prefix>/dl_worker<k>"``). DataLoader's
own ``pin_memory`` thread stands in for :class:`~.stages.PinStage` (only with an accelerator; it
is not instrumented: torch gives no hook, so its time shows as the gap before the consumer).
Other host stages and the consumer run in the caller's thread. ``batch_size=None``: items are
already batches.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from distlab._checks import check_bool
from distlab._lifetime import die_with_parent, spawned_from_main_thread
from distlab.loading.core import (
    DEFAULT_TIMEOUT_S,
    REARMED,
    STARTED,
    Executor,
    SlotProgress,
    Watch,
    call_stage,
    check_int,
    check_timeout,
    drive,
)
from distlab.loading.device_stages import PinStage
from distlab.loading.errors import StageError
from distlab.loading.procs import split_stages
from distlab.loading.stage import Stage, accelerator_available
from distlab.timeline import Timeline

__all__ = ["StagesDataset", "TorchDataLoaderExecutor", "absorbed_by_dataloader"]


class StagesDataset(Dataset):
    """``dataset[i]`` = (stages applied to ``items[i]``, list of span dicts).

    ``shared`` (a ``multiprocessing`` RawArray of doubles, see :func:`_shared_array`) carries
    the start-up handshake and the progress of each worker: ``shared[0]`` is the *gate* (items
    wait until the parent sets it to 1), ``shared[1 + k]`` is worker ``k``'s *ready* flag, set by
    :func:`_worker_init` once the worker has imported torch and unpickled this dataset, and from
    ``1 + workers`` on one :class:`~.core.SlotProgress` slot per worker (so a timeout can name
    the stuck stage and item).
    """

    def __init__(self, stages: list[Stage], items: list[Any], prefix: str,
                 shared: Any = None) -> None:
        self.stages, self.items, self.prefix, self.shared = stages, items, prefix, shared
        self.workers = max(1, int(len(shared) - 1) // 4) if shared is not None else 1
        self._progress: SlotProgress | None = None
        self.parent_pid, self.main_thread_spawn = os.getpid(), spawned_from_main_thread()

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[Any, list[dict[str, Any]]]:
        shared = self.shared
        if shared is not None:
            while shared[0] == 0:  # the parent opens the gate when every worker is ready
                time.sleep(_GATE_POLL_S)
        info = get_worker_info()
        lane = f"{self.prefix}/dl_worker{info.id}" if info is not None else f"{self.prefix}/main"
        if self._progress is None and shared is not None:
            self._progress = SlotProgress(shared, 1 + self.workers,
                                          info.id if info is not None else 0,
                                          [st.name for st in self.stages])
        tl, x = Timeline(), self.items[i]
        for st in self.stages:
            x = call_stage(st, i, x, tl, lane, self._progress)
        return x, tl.to_dicts()


def _passthrough(sample: Any) -> Any:
    return sample


_GATE_POLL_S = 0.0005


def _worker_init(wid: int) -> None:
    torch.set_num_threads(1)
    info = get_worker_info()
    if info is not None and hasattr(info.dataset, "parent_pid"):
        die_with_parent(info.dataset.parent_pid, main_thread_spawn=info.dataset.main_thread_spawn)
    shared = getattr(info.dataset, "shared", None) if info is not None else None
    if shared is not None:
        shared[1 + wid] = 1.0  # ready: imports and dataset unpickling are done


def absorbed_by_dataloader(stages: list[Stage], *, pin_memory: bool = True,
                           accelerator: bool | None = None) -> list[str]:
    """Names of the stages torch's DataLoader runs itself, uninstrumented, so the ``torch``
    executor records no span for them: the :class:`~.device_stages.PinStage` s when DataLoader
    pins (``pin_memory`` and an accelerator; ``accelerator=None``: this machine's). Every other
    executor records every stage; a check that every stage ran leaves these out for ``torch``."""
    if not (check_bool("pin_memory", pin_memory)
            and (accelerator_available() if accelerator is None else accelerator)):
        return []
    return [s.name for s in stages if isinstance(s, PinStage)]


class TorchDataLoaderExecutor(Executor):
    """torch ``DataLoader(num_workers=workers, pin_memory, prefetch_factor)`` as an executor.

    Args:
        workers: DataLoader ``num_workers``, >= 0.
        prefetch_factor: DataLoader ``prefetch_factor`` (items in flight per worker), >= 1.
        pin_memory: use DataLoader pinning when an accelerator exists (skipped, with a note,
            otherwise).
        timeout_s: longest one stage call may take, seconds > 0: beyond it the run raises
            :class:`PipelineTimeoutError` naming the stage and item (and DataLoader's own
            ``timeout``, set to twice this, is a backstop); start-up waits max(timeout_s, 120 s).
    """

    name = "torch"

    def __init__(self, workers: int = 2, prefetch_factor: int = 2, pin_memory: bool = True,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.workers = check_int("workers", workers, 0)
        self.prefetch_factor = check_int("prefetch_factor", prefetch_factor, 1)
        self.pin_memory = check_bool("pin_memory", pin_memory)
        self.timeout_s = check_timeout(timeout_s)
        self._loader: DataLoader | None = None
        self._key: tuple[Any, ...] | None = None
        self._items: list[Any] | None = None
        self._it: Any = None

    def config(self) -> dict[str, Any]:
        return {"executor": self.name, "workers": self.workers,
                "prefetch_factor": self.prefetch_factor, "pin_memory": self.pin_memory}

    def close(self) -> None:
        """Shut DataLoader's persistent workers down and reap them; idempotent."""
        loader, self._loader, self._key, self._it = self._loader, None, None, None
        it = getattr(loader, "_iterator", None) if loader is not None else None
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        if loader is not None:
            loader._iterator = None

    def _loader_for(self, wstages: list[Stage], items: list[Any], prefix: str,
                    pin: bool) -> DataLoader:
        key = (tuple(id(s) for s in wstages), prefix, pin)
        if self._loader is None or self._key != key or self._items != items:
            self.close()
            kw: dict[str, Any] = {}
            n = max(1, self.workers)
            shared = mp.get_context("spawn").RawArray("d", 1 + 4 * n)
            SlotProgress.clear(shared, 1 + n, n)
            if self.workers == 0:
                shared[0] = 1.0  # no workers: nothing to wait for
            else:
                kw = dict(prefetch_factor=self.prefetch_factor, persistent_workers=True,
                          multiprocessing_context="spawn", worker_init_fn=_worker_init,
                          timeout=2 * self.timeout_s)
            self._loader = DataLoader(StagesDataset(wstages, items, prefix, shared),
                                      batch_size=None, shuffle=False, num_workers=self.workers,
                                      collate_fn=_passthrough, pin_memory=pin, **kw)
            self._key, self._items = key, list(items)
        return self._loader

    def _plan(self, stages: list[Stage]) -> tuple[list[Stage], list[Stage], Stage, bool]:
        wstages, hstages, last = split_stages(stages, self.workers)
        if not wstages:
            wstages, hstages = [], list(stages[:-1])
        pin = self.pin_memory and accelerator_available()
        if pin:
            hstages = [s for s in hstages if not isinstance(s, PinStage)]
        return wstages, hstages, last, pin

    def _startup(self, stages: list[Stage], items: list[Any], tl: Timeline,
                 prefix: str) -> str | None:
        """Create the DataLoader iterator (this spawns the workers on the first run, or resets the
        persistent ones) and wait until every worker's ``worker_init_fn`` has run (torch
        imported, dataset unpickled); then open the gate that holds items back. Included in
        start-up: spawning, imports, dataset pickling, DataLoader's own set-up; not included:
        any stage work (no item is processed before the gate opens). Returns ``STARTED`` when
        a new DataLoader spawned its workers, ``REARMED`` when the persistent ones were reset,
        None without workers."""
        wstages, _, _, pin = self._plan(stages)
        before = self._loader
        loader = self._loader_for(wstages, items, prefix, pin)
        phase = STARTED if loader is not before else REARMED
        ok = False
        try:
            self._it = iter(loader)
            shared = loader.dataset.shared
            if shared[0] == 0:
                limit_s = max(self.timeout_s, DEFAULT_TIMEOUT_S)  # not a stage call
                deadline = time.monotonic() + limit_s
                while not all(shared[1 + k] for k in range(self.workers)):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"DataLoader workers were not ready within "
                                           f"{limit_s:g} s of start-up")
                    time.sleep(_GATE_POLL_S)
                shared[0] = 1.0
            ok = True
        finally:
            if not ok:
                self.close()
        return phase if self.workers > 0 else None

    def _run(self, stages: list[Stage], items: list[Any], tl: Timeline, prefix: str,
             outputs: list[Any] | None) -> None:
        wstages, hstages, last, pin = self._plan(stages)
        if self.pin_memory and not pin:
            tl.add_note("torch DataLoader pin_memory skipped: no accelerator")
        it, self._it = self._it, None
        shared = self._loader.dataset.shared
        n = max(1, self.workers)
        stop, errors, watch = threading.Event(), [], Watch()
        SlotProgress.clear(shared, 1 + n, n)
        watch.add_slots(shared, 1 + n, n, [st.name for st in wstages])
        ok = False
        idx = 0

        def consume() -> None:
            nonlocal idx
            for idx, (x, spans) in enumerate(it):
                if stop.is_set():
                    return
                tl.extend(spans)
                for st in hstages:
                    x = call_stage(st, idx, x, tl, f"{prefix}/{st.name}", watch)
                y = call_stage(last, idx, x, tl, f"{prefix}/{last.name}", watch)
                if outputs is not None:
                    outputs.append(y)

        try:
            drive(consume, name=f"{last.name}-consumer", stop=stop, errors=errors, watch=watch,
                  timeout_s=self.timeout_s, executor=self.name)
            ok = True
        except StageError as exc:
            if exc.stage is None:  # re-raised from a worker: message-only form
                raise StageError("?", idx, "see traceback", exc.traceback_text) from None
            raise
        finally:
            if not ok:
                self.close()
