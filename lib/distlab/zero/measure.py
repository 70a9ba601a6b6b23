"""What each rank of a ZeRO run really holds, measured, beside the model.

:func:`storage_bytes` sums the bytes of the distinct storages behind a list of tensors (views of
one buffer count once: the storage's ``nbytes``, deduplicated by its data pointer), so a flat
buffer with parameter views into it is counted as the buffer. :func:`measure_zero_memory` trains
a small MLP with :class:`~distlab.zero.optimizer.ZeroDataParallel` on live gloo ranks for each
stage and returns, per stage and rank, the measured bytes of parameters, gradients and optimizer
state after the last step, the model's bytes for the same parameter count
(:func:`~distlab.zero.memory_model.zero_memory`) and the process's peak resident memory
(``ru_maxrss``, reported, not modelled: it includes the interpreter, torch and activations).

Stage 3's peak is measured without asking the class: :func:`live_tensor_bytes` finds every
tensor the process holds (``gc.get_objects``), counts each distinct storage once, and
:func:`stage3_peak_rank` samples it at every unit's forward and before every unit's backward
(hooks of its own, after the class's), keeping the largest value above the bytes held before
the model was built; :func:`distlab.zero.memory_model.stage3_memory` is the model beside it.

    from distlab.zero.measure import measure_zero_memory
    rows = measure_zero_memory(world_size=2, stages=(0, 1, 2))
    for r in rows: print(r["stage"], r["measured"]["total"], r["model"]["total"])
"""

from __future__ import annotations

import gc
import resource
from typing import Any

import torch

from distlab import launch
from distlab._checks import check_choice, check_int
from distlab.collectives.runtime.steps import workspaces
from distlab.nets import mlp
from distlab.timeline import Timeline
from distlab.zero.memory_model import PRECISIONS, check_stage, stage3_memory, zero_memory
from distlab.zero.optimizer import ZeroDataParallel

__all__ = ["held_bytes", "live_tensor_bytes", "measure_stage3_peak", "measure_zero_memory",
           "stage3_peak_rank", "storage_bytes", "trace_stage3_step", "trace_zero_step",
           "zero_memory_rank"]

_DTYPES = {"fp32": torch.float32, "mixed": torch.bfloat16}


def storage_bytes(tensors: list[torch.Tensor], exclude: set[int] | None = None) -> int:
    """Bytes of the distinct storages behind ``tensors`` (each counted once, by data pointer),
    leaving out storages whose data pointer is in ``exclude``."""
    seen: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        if exclude is None or st.data_ptr() not in exclude:
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def held_bytes(zdp: ZeroDataParallel) -> dict[str, int]:
    """Measured bytes per state of ``zdp`` on this rank (a storage counts once, in the first
    state that holds it: params, then grads, then optimizer)."""
    st = zdp.state_tensors()
    out: dict[str, int] = {}
    seen: set[int] = set()
    for key in ("params", "grads", "optimizer"):
        out[key] = storage_bytes(st[key], exclude=seen)
        seen |= {t.untyped_storage().data_ptr() for t in st[key]}
    out["total"] = out["params"] + out["grads"] + out["optimizer"]
    return out


def zero_memory_rank(rank: int, world_size: int, stages: list[int], layers: int, width: int,
                     precision: str, steps: int, bucket_cap_mb: float,
                     algorithm: str | None = None) -> list[dict[str, Any]]:
    """Rank function: for each stage train ``mlp(layers, width)`` for ``steps`` steps and
    return the measured and modelled bytes and the peak RSS (bytes) of this process so far."""
    torch.set_num_threads(1)
    out = []
    for stage in stages:
        zdp = ZeroDataParallel(mlp(layers, width, 0), stage, param_dtype=_DTYPES[precision],
                               bucket_cap_mb=bucket_cap_mb, algorithm=algorithm)
        g = torch.Generator().manual_seed(rank)
        for _ in range(steps):
            x = torch.randn(4, width, generator=g).to(zdp.dtype)
            zdp(x).float().pow(2).mean().backward()
            zdp.step()
        model = zero_memory(zdp.param_count, world_size, stage, precision)
        out.append({"stage": stage, "rank": rank, "world_size": world_size,
                    "params": zdp.param_count, "precision": precision,
                    "measured": held_bytes(zdp),
                    "model": {"params": model.params, "grads": model.grads,
                              "optimizer": model.optimizer, "total": model.total},
                    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})
        del zdp
    return out


def measure_zero_memory(world_size: int = 2, stages: tuple[int, ...] = (0, 1, 2), *,
                        layers: int = 4, width: int = 256, precision: str = "fp32",
                        steps: int = 2, bucket_cap_mb: float = 0.25,
                        timeout: float = 300.0) -> list[dict[str, Any]]:
    """Run :func:`zero_memory_rank` on ``world_size`` gloo ranks; one dict per (stage, rank)
    with ``measured`` and ``model`` bytes (keys params, grads, optimizer, total)."""
    world_size = check_int("world_size", world_size, minimum=1)
    for s in stages:
        if check_stage(s) == 3:
            raise ValueError("stage 3's bytes change within a step: measure_stage3_peak "
                             "measures its peak; measure_zero_memory takes stages 0, 1, 2")
    check_choice("precision", precision, PRECISIONS)
    res = launch.run(zero_memory_rank, world_size,
                     args=(list(stages), layers, width, precision, steps, bucket_cap_mb),
                     timeout=timeout)
    return [row for rank_rows in res for row in rank_rows]


def trace_zero_step(rank: int, world_size: int, stage: int, layers: int = 3, width: int = 64,
                    steps: int = 3) -> list[dict[str, Any]]:
    """Rank function: train ``steps`` steps with a timeline on the last one; its spans as
    dicts (lanes ``rank{r}/backward``, ``/reduce_scatter`` or ``/allreduce``, ``/step``,
    ``/all_gather``)."""
    zdp = ZeroDataParallel(mlp(layers, width, 0), stage, bucket_cap_mb=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(steps):
        zdp.timeline = Timeline() if step == steps - 1 else None
        zdp(torch.randn(4, width, generator=g)).pow(2).mean().backward()
        zdp.step()
    assert zdp.timeline is not None
    return zdp.timeline.to_dicts()


def live_tensor_bytes(exclude: list[torch.Tensor] | None = None) -> int:
    """Bytes of the distinct storages behind every tensor object this process holds (found by
    ``gc.get_objects``; a storage counts once, by data pointer; empty storages count 0),
    leaving out the storages of ``exclude``. Tensors that exist only inside C++ (autograd's
    saved activations with no Python object, a backend's own buffers) are not seen."""
    skip = {t.untyped_storage().data_ptr() for t in exclude or []}
    seen: dict[int, int] = {}
    for obj in gc.get_objects():
        try:
            if not issubclass(type(obj), torch.Tensor) or obj.is_meta \
                    or obj.layout != torch.strided:
                continue
            st = obj.untyped_storage()
        except (RuntimeError, TypeError, NotImplementedError):
            continue
        if st.nbytes() and st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def stage3_peak_rank(rank: int, world_size: int, layers: int, width: int, precision: str,
                     prefetch: int, steps: int = 2, batch: int = 4,
                     algorithm: str | None = None) -> dict[str, Any]:
    """Rank function: train ``mlp(layers, width)`` at stage 3 for ``steps`` (>= 2) steps,
    sampling :func:`live_tensor_bytes` at each unit's forward and before each unit's backward
    from the second step on (the first holds no Adam state yet, so it cannot hold the peak,
    and each sample scans every object); returns
    ``peak_bytes`` (largest sample minus the bytes held before the model was built, distlab's
    collective workspaces left out: communication buffers, reported as ``workspace_bytes``),
    the ``samples``, and ``model`` (:func:`~distlab.zero.memory_model.stage3_memory` bytes:
    ``states``, ``forward``, ``backward``, ``total``)."""
    torch.set_num_threads(1)
    steps = check_int("steps", steps, minimum=2)
    g = torch.Generator().manual_seed(rank)
    dtype = _DTYPES[precision]
    xs = [torch.randn(batch, width, generator=g).to(dtype) for _ in range(steps)]
    gc.collect()
    base = live_tensor_bytes()
    zdp = ZeroDataParallel(mlp(layers, width, 0), 3, param_dtype=dtype, prefetch=prefetch,
                           algorithm=algorithm)
    samples: list[tuple[str, int]] = []
    sampling = [False]

    def sample(where: str) -> None:
        if sampling[0]:
            samples.append((where, live_tensor_bytes(exclude=workspaces()) - base))

    stage3 = zdp._stage3
    assert stage3 is not None
    for u in stage3.units:
        u.module.register_forward_pre_hook(lambda _m, _a, k=u.index: sample(f"forward {k}"))

        def after(_m: Any, _a: Any, out: torch.Tensor, k: int = u.index) -> None:
            out.register_hook(lambda grad: sample(f"backward {k}"))
        u.module.register_forward_hook(after)
    for x in xs:
        zdp(x).float().pow(2).mean().backward()
        sample("after backward")
        zdp.step()
        sampling[0] = True
        sample("after step")
    model = stage3_memory([u.layout.numel for u in stage3.units], world_size, precision,
                          prefetch)
    peak = max(samples, key=lambda s: s[1])
    out = {"rank": rank, "world_size": world_size, "precision": precision,
           "prefetch": prefetch, "params": zdp.param_count, "units": len(stage3.units),
           "peak_bytes": peak[1], "peak_at": peak[0], "samples": samples,
           "held_after_step": held_bytes(zdp),
           "workspace_bytes": storage_bytes(workspaces()),
           "model": {"states": model.states.total, "forward": model.forward,
                     "backward": model.backward, "total": model.total}}
    zdp.close()
    return out


def measure_stage3_peak(world_size: int = 2, *, layers: int = 4, width: int = 128,
                        precision: str = "fp32", prefetch: int = 1, steps: int = 2,
                        algorithm: str | None = None, timeout: float = 300.0
                        ) -> list[dict[str, Any]]:
    """Run :func:`stage3_peak_rank` on ``world_size`` gloo ranks; one dict per rank."""
    world_size = check_int("world_size", world_size, minimum=1)
    check_choice("precision", precision, PRECISIONS)
    prefetch = check_int("prefetch", prefetch, minimum=0)
    return launch.run(stage3_peak_rank, world_size,
                      args=(layers, width, precision, prefetch, steps, 4, algorithm),
                      timeout=timeout)


def trace_stage3_step(rank: int, world_size: int, prefetch: int, layers: int = 4,
                      width: int = 256, batch: int = 64, steps: int = 3,
                      algorithm: str | None = "builtin") -> list[dict[str, Any]]:
    """Rank function: train ``mlp(layers, width)`` at stage 3 with ``prefetch`` for ``steps``
    steps, the last traced; its spans as dicts (lanes ``rank{r}/forward``, ``/backward``,
    ``/all_gather``, ``/reduce_scatter``, ``/wait``, ``/step``)."""
    torch.set_num_threads(1)
    zdp = ZeroDataParallel(mlp(layers, width, 0), 3, prefetch=prefetch, algorithm=algorithm)
    g = torch.Generator().manual_seed(rank)
    for step in range(steps):
        zdp.timeline = Timeline() if step == steps - 1 else None
        zdp(torch.randn(batch, width, generator=g)).pow(2).mean().backward()
        zdp.step()
    assert zdp.timeline is not None
    spans = zdp.timeline.to_dicts()
    zdp.close()
    return spans
