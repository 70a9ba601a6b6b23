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
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from .._lifetime import die_with_parent, spawned_from_main_thread
from ..timeline import Timeline
from .errors import StageError
from .executors import Executor, call_stage, check_int
from .procs import split_stages
from .stages import PinStage, Stage, accelerator_available

__all__ = ["StagesDataset", "TorchDataLoaderExecutor"]


class StagesDataset(Dataset):
    """``dataset[i]`` = (stages applied to ``items[i]``, list of span dicts).

    ``shared`` (a ``multiprocessing`` RawArray of doubles, or None) carries the start-up
    handshake: ``shared[0]`` is the *gate* (items wait until the parent sets it to 1) and
    ``shared[1 + k]`` is worker ``k``'s *ready* flag, set by :func:`_worker_init` once the worker
    has imported torch and unpickled this dataset.
    """

    def __init__(self, stages: list[Stage], items: list[Any], prefix: str,
                 shared: Any = None) -> None:
        self.stages, self.items, self.prefix, self.shared = stages, items, prefix, shared
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
        tl, x = Timeline(), self.items[i]
        for st in self.stages:
            x = call_stage(st, i, x, tl, lane)
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


class TorchDataLoaderExecutor(Executor):
    """torch ``DataLoader(num_workers=workers, pin_memory, prefetch_factor)`` as an executor.

    Args:
        workers: DataLoader ``num_workers``, >= 0.
        prefetch_factor: DataLoader ``prefetch_factor`` (items in flight per worker), >= 1.
        pin_memory: use DataLoader pinning when an accelerator exists (skipped, with a note,
            otherwise).
        timeout_s: DataLoader ``timeout`` per item when workers > 0.
    """

    name = "torch"

    def __init__(self, workers: int = 2, prefetch_factor: int = 2, pin_memory: bool = True,
                 timeout_s: float = 120.0) -> None:
        self.workers = check_int("workers", workers, 0)
        self.prefetch_factor = check_int("prefetch_factor", prefetch_factor, 1)
        self.pin_memory = bool(pin_memory)
        self.timeout_s = float(timeout_s)
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
            shared = None
            if self.workers > 0:
                shared = mp.get_context("spawn").RawArray("d", 1 + self.workers)
                kw = dict(prefetch_factor=self.prefetch_factor, persistent_workers=True,
                          multiprocessing_context="spawn", worker_init_fn=_worker_init,
                          timeout=self.timeout_s)
            self._loader = DataLoader(StagesDataset(wstages, items, prefix, shared), batch_size=None,
                                      shuffle=False, num_workers=self.workers,
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
                 prefix: str) -> bool:
        """Create the DataLoader iterator (this spawns the workers on the first run, or resets the
        persistent ones) and wait until every worker's ``worker_init_fn`` has run (torch
        imported, dataset unpickled); then open the gate that holds items back. Included in
        start-up: spawning, imports, dataset pickling, DataLoader's own set-up; not included:
        any stage work (no item is processed before the gate opens)."""
        wstages, _, _, pin = self._plan(stages)
        loader = self._loader_for(wstages, items, prefix, pin)
        ok = False
        try:
            self._it = iter(loader)
            shared = loader.dataset.shared
            if shared is not None and shared[0] == 0:
                deadline = time.monotonic() + self.timeout_s
                while not all(shared[1 + k] for k in range(self.workers)):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"DataLoader workers were not ready within "
                                           f"timeout_s={self.timeout_s:g} s")
                    time.sleep(_GATE_POLL_S)
                shared[0] = 1.0
            ok = True
        finally:
            if not ok:
                self.close()
        return self.workers > 0

    def _run(self, stages: list[Stage], items: list[Any], tl: Timeline, prefix: str,
             outputs: list[Any] | None) -> None:
        wstages, hstages, last, pin = self._plan(stages)
        if self.pin_memory and not pin:
            tl.add_note("torch DataLoader pin_memory skipped: no accelerator")
        it, self._it = self._it, None
        ok = False
        idx = 0
        try:
            for idx, (x, spans) in enumerate(it):
                tl.extend(spans)
                for st in hstages:
                    x = call_stage(st, idx, x, tl, f"{prefix}/{st.name}")
                y = call_stage(last, idx, x, tl, f"{prefix}/{last.name}")
                if outputs is not None:
                    outputs.append(y)
            ok = True
        except StageError as exc:
            if exc.stage is None:  # re-raised from a worker: message-only form
                raise StageError("?", idx, "see traceback", exc.traceback_text) from None
            raise
        finally:
            if not ok:
                self.close()
