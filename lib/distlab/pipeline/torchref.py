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

from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from ..timeline import Timeline
from .errors import StageError
from .executors import Executor, call_stage, check_int
from .procs import split_stages
from .stages import PinStage, Stage, accelerator_available

__all__ = ["StagesDataset", "TorchDataLoaderExecutor"]


class StagesDataset(Dataset):
    """``dataset[i]`` = (stages applied to ``items[i]``, list of span dicts)."""

    def __init__(self, stages: list[Stage], items: list[Any], prefix: str) -> None:
        self.stages, self.items, self.prefix = stages, items, prefix

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[Any, list[dict[str, Any]]]:
        info = get_worker_info()
        lane = f"{self.prefix}/dl_worker{info.id}" if info is not None else f"{self.prefix}/main"
        tl, x = Timeline(), self.items[i]
        for st in self.stages:
            x = call_stage(st, i, x, tl, lane)
        return x, tl.to_dicts()


def _passthrough(sample: Any) -> Any:
    return sample


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)


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

    def config(self) -> dict[str, Any]:
        return {"executor": self.name, "workers": self.workers,
                "prefetch_factor": self.prefetch_factor, "pin_memory": self.pin_memory}

    def close(self) -> None:
        """Shut DataLoader's persistent workers down and reap them; idempotent."""
        loader, self._loader, self._key = self._loader, None, None
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
            if self.workers > 0:
                kw = dict(prefetch_factor=self.prefetch_factor, persistent_workers=True,
                          multiprocessing_context="spawn", worker_init_fn=_worker_init,
                          timeout=self.timeout_s)
            self._loader = DataLoader(StagesDataset(wstages, items, prefix), batch_size=None,
                                      shuffle=False, num_workers=self.workers,
                                      collate_fn=_passthrough, pin_memory=pin, **kw)
            self._key, self._items = key, list(items)
        return self._loader

    def _run(self, stages: list[Stage], items: list[Any], tl: Timeline, prefix: str,
             outputs: list[Any] | None) -> None:
        wstages, hstages, last = split_stages(stages, self.workers)
        if not wstages:
            wstages, hstages = [], list(stages[:-1])
        pin = self.pin_memory and accelerator_available()
        if self.pin_memory and not pin:
            tl.add_note("torch DataLoader pin_memory skipped: no accelerator")
        if pin:
            hstages = [s for s in hstages if not isinstance(s, PinStage)]
        loader = self._loader_for(wstages, items, prefix, pin)
        ok = False
        idx = 0
        try:
            for idx, (x, spans) in enumerate(loader):
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
