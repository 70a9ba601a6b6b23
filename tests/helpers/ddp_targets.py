"""Rank functions used only by tests/ddp (importable by spawned ranks)."""

from __future__ import annotations

from typing import Any

from distlab.nets import mlp


def train_compare_worker(rank: int, world_size: int, layers: int, width: int,
                         bucket_cap_mb: float | None, overlap: bool, naive: bool,
                         algorithm: str = "builtin") -> dict[str, Any]:
    """Train torch DDP and distlab DDP from the same rank-dependent initial weights (step 2 is a
    no_sync accumulation); return how the parameters compare and the allreduce counts."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from distlab.ddp import DDP

    ref = DistributedDataParallel(mlp(layers, width, 100 + rank), bucket_cap_mb=bucket_cap_mb)
    ours = DDP(mlp(layers, width, 100 + rank), bucket_cap_mb=bucket_cap_mb,
               overlap=overlap, naive=naive, algorithm=algorithm)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, ours)]
    counts = []
    g = torch.Generator().manual_seed(7 + rank)
    for step in range(5):
        x = torch.randn(8, width, generator=g)
        for m, opt in zip((ref, ours), opts, strict=True):
            if step == 2:
                with m.no_sync():
                    m(x).pow(2).mean().backward()
                continue
            m(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        counts.append(ours.allreduce_count)
    pr = [p.detach() for p in ref.module.parameters()]
    po = [p.detach() for p in ours.module.parameters()]
    strided = sum(not v.is_contiguous() and v.stride() == p.stride()
                  for lay in ours._layouts for v, p in zip(lay.views, lay.params, strict=True))
    return {"strided_views": strided,
            "equal": all(torch.equal(a, b) for a, b in zip(pr, po, strict=True)),
            "max_diff": max(float((a - b).abs().max()) for a, b in zip(pr, po, strict=True)),
            "counts": counts}


# ---- equality with torch DDP over flags and comm hooks (2 and 3 ranks) -----------------------

def _renamed(fn: Any) -> Any:
    """``fn`` under another ``__name__``: torch DDP refuses a hook *named* bf16_compress_hook
    unless CUDA and NCCL >= 2.10 are present (``_check_comm_hook``), though gloo sums bfloat16;
    the wrapper runs torch's own hook unchanged."""
    def hook(state, bucket):  # type: ignore[no-untyped-def]  (torch checks annotations)
        return fn(state, bucket)
    return hook


def _hooks(name: str | None) -> tuple[Any, Any]:
    """(hook for torch DDP, hook for distlab DDP) for a config's ``hook`` name: ``None``,
    ``allreduce``/``fp16``/``bf16`` (torch's default_hooks vs distlab.ddp.comm_hooks), or
    ``torch-fp16``/``torch-bf16`` (torch's own hook on both)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as th

    from distlab.ddp import comm_hooks as dh
    if name is None:
        return None, None
    torch_side = {"allreduce": th.allreduce_hook, "fp16": th.fp16_compress_hook,
                  "bf16": th.bf16_compress_hook}
    ours = {"allreduce": dh.allreduce_hook, "fp16": dh.fp16_compress_hook,
            "bf16": dh.bf16_compress_hook}
    if name.startswith("torch-"):
        fn = _renamed(torch_side[name[6:]])
        return fn, fn
    return _renamed(torch_side[name]), ours[name]


def make_conv_model(seed: int) -> Any:
    """Two 3x3 convolutions and a Linear, in channels_last memory format: the conv weights'
    strides are not row-major, so bucket views must take the parameters' strides."""
    import torch
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Flatten(),
                            torch.nn.Linear(8 * 6 * 6, 16))
    return m.to(memory_format=torch.channels_last)


def train_compare_config(rank: int, world_size: int, *, layers: int = 3, width: int = 64,
                         bucket_cap_mb: float | None = 0.01, overlap: bool = True,
                         naive: bool = False, algorithm: str = "builtin",
                         gradient_as_bucket_view: bool = False, hook: str | None = None,
                         set_to_none: bool = True, steps: int = 5,
                         conv: bool = False) -> dict[str, Any]:
    """Train torch DDP and distlab DDP with the same settings from the same rank-dependent
    weights (step 2 accumulates under no_sync before its synced step; ``zero_grad`` runs at the
    start of each step, so the last gradients stay for inspection). Returns whether parameters
    and gradients are bitwise equal, the allreduce counts per step, and whether each ``.grad``
    lives in a bucket (distlab) / shares storage with other grads (torch)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from distlab.ddp import DDP

    if conv:
        ref_m, our_m = make_conv_model(100 + rank), make_conv_model(100 + rank)
    else:
        ref_m, our_m = mlp(layers, width, 100 + rank), mlp(layers, width, 100 + rank)
    ref = DistributedDataParallel(ref_m, bucket_cap_mb=bucket_cap_mb,
                                  gradient_as_bucket_view=gradient_as_bucket_view)
    ours = DDP(our_m, bucket_cap_mb=bucket_cap_mb, overlap=overlap, naive=naive,
               algorithm=algorithm, gradient_as_bucket_view=gradient_as_bucket_view)
    th, oh = _hooks(hook)
    if th is not None:
        ref.register_comm_hook(None, th)
        ours.register_comm_hook(None, oh)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, ours)]
    counts = []
    g = torch.Generator().manual_seed(7 + rank)
    for step in range(steps):
        x = torch.randn(8, width, generator=g)
        if conv:
            x = torch.randn(8, 4, 6, 6, generator=g).contiguous(memory_format=torch.channels_last)
        for m, opt in zip((ref, ours), opts, strict=True):
            opt.zero_grad(set_to_none=set_to_none)
            if step == 2:
                with m.no_sync():
                    m(x).pow(2).mean().backward()
            m(x).pow(2).mean().backward()
            opt.step()
        counts.append(ours.allreduce_count)
    pr, po = list(ref_m.parameters()), list(our_m.parameters())
    flats = [lay.flat for lay in ours._layouts]
    in_bucket = [any(torch._C._is_alias_of(p.grad, f) for f in flats) for p in po]
    ref_storages = {p.grad.untyped_storage().data_ptr() for p in pr}
    strided = sum(not v.is_contiguous() and v.stride() == p.stride()
                  for lay in ours._layouts for v, p in zip(lay.views, lay.params, strict=True))
    return {"strided_views": strided,
            "equal": all(torch.equal(a, b) for a, b in zip(pr, po, strict=True)),
            "grads_equal": all(torch.equal(a.grad, b.grad) for a, b in zip(pr, po, strict=True)),
            "max_diff": max(float((a - b).detach().abs().max())
                            for a, b in zip(pr, po, strict=True)),
            "grads_close": all(torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7)
                               for a, b in zip(pr, po, strict=True)),
            "counts": counts, "grads_in_buckets": sum(in_bucket), "params": len(po),
            "torch_grad_storages": len(ref_storages), "buckets": len(flats)}


def train_compare_many(rank: int, world_size: int, configs: list[dict[str, Any]]
                       ) -> list[dict[str, Any]]:
    """:func:`train_compare_config` for every config (one launch for many cases)."""
    return [train_compare_config(rank, world_size, **c) for c in configs]


def comm_hook_errors(rank: int, world_size: int) -> dict[str, str]:
    """The exception type raised by each misuse of ``register_comm_hook`` (one rank)."""
    from distlab.ddp import DDP
    from distlab.ddp.comm_hooks import allreduce_hook

    out: dict[str, str] = {}

    def attempt(name: str, fn: Any) -> None:
        try:
            fn()
            out[name] = "no error"
        except Exception as exc:  # noqa: BLE001 - the type is the result
            out[name] = type(exc).__name__

    attempt("not callable", lambda: DDP(mlp(1, 4, 0)).register_comm_hook(None, 3))
    attempt("one argument", lambda: DDP(mlp(1, 4, 0)).register_comm_hook(
        None, lambda bucket: bucket))
    attempt("naive", lambda: DDP(mlp(1, 4, 0), naive=True).register_comm_hook(
        None, allreduce_hook))
    attempt("ring", lambda: DDP(mlp(1, 4, 0), algorithm="ring").register_comm_hook(
        None, allreduce_hook))
    twice = DDP(mlp(1, 4, 0))
    twice.register_comm_hook(None, allreduce_hook)
    attempt("twice", lambda: twice.register_comm_hook(None, allreduce_hook))

    def not_a_future() -> None:
        d = DDP(mlp(1, 4, 0))
        d.register_comm_hook(None, lambda s, b: b.buffer())
        d(__import__("torch").ones(2, 4)).sum().backward()
    attempt("returns a tensor", not_a_future)
    return out


def timeline_worker(rank: int, world_size: int, hook: bool, steps: int = 3) -> dict[str, Any]:
    """Train a traced distlab DDP (a timeline on the middle step only) and return the recorded
    spans (name, category, lane) of that step, the bucket count and the module names."""
    import torch

    from distlab.ddp import DDP
    from distlab.ddp.comm_hooks import allreduce_hook
    from distlab.timeline import Timeline

    ddp = DDP(mlp(3, 64, 1), bucket_cap_mb=0.01)
    if hook:
        ddp.register_comm_hook(None, allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    tl = Timeline()
    for step in range(steps):
        ddp.timeline = tl if step == steps - 2 else None
        opt.zero_grad()
        ddp(torch.ones(4, 64)).sum().backward()
        opt.step()
    spans = [(s.name, s.category, s.lane, s.duration_us) for s in tl.spans]
    return {"spans": spans, "buckets": len(ddp.buckets)}


def reducer_ops_worker(rank: int, world_size: int, layers: int, width: int,
                       bucket_cap_mb: float, gradient_as_bucket_view: bool) -> dict[str, Any]:
    """Tensor ops the reducer issues in one steady-state synced backward (after the rebuild and
    a warm step), counted with a TorchDispatchMode; the model's own backward ops use none of
    mul_, mul.out, div_ or _foreach_copy_. Also the buckets and their large parameters."""
    import collections

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from distlab.ddp import DDP
    from distlab.ddp.grad_bucket import FUSE_MIN_NUMEL

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: collections.Counter = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.ops[f"{func.overloadpacket.__name__}.{func._overloadname}"] += 1
            return func(*args, **(kwargs or {}))

    ddp = DDP(mlp(layers, width, 0), bucket_cap_mb=bucket_cap_mb,
              gradient_as_bucket_view=gradient_as_bucket_view)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.ones(2, width)
    for _ in range(3):
        opt.zero_grad(set_to_none=False)
        ddp(x).sum().backward()
        opt.step()
    opt.zero_grad(set_to_none=False)
    loss = ddp(x).sum()
    mode = Count()
    with mode:
        loss.backward()
    keep = ("mul_", "mul.out", "div_", "_foreach_copy_", "copy_")
    ops = {k: v for k, v in mode.ops.items() if k.split(".")[0] in keep or k == "mul.out"}
    return {"ops": ops, "buckets": len(ddp.buckets),
            "big": sum(p.numel() >= FUSE_MIN_NUMEL for p in ddp.parameters()),
            "runs": sum(len(lay.small_runs) for lay in ddp._layouts)}


def slow_record_worker(rank: int, world_size: int) -> dict[str, Any]:
    """A traced step whose comm hook's future is completed on another thread and whose timeline
    records slowly (0.2 s a span): the spans of the step must all be there when backward returns
    (the reducer waits on the future that records, not on the hook's own)."""
    import threading
    import time

    import torch
    import torch.distributed as dist

    from distlab.ddp import DDP
    from distlab.timeline import Timeline

    class SlowTimeline(Timeline):
        def record(self, name, category, lane, start_us, duration_us, args=None):  # type: ignore[no-untyped-def]
            if category == "allreduce":
                time.sleep(0.2)
            return super().record(name, category, lane, start_us, duration_us, args)

    def threaded_hook(state: Any, bucket: Any) -> torch.futures.Future:
        buf = bucket.buffer()
        dist.all_reduce(buf)
        fut: torch.futures.Future = torch.futures.Future()

        def complete() -> None:
            time.sleep(0.05)  # after the reducer attached its callback
            fut.set_result(buf)

        threading.Thread(target=complete).start()
        return fut

    ddp = DDP(mlp(3, 64, 1), bucket_cap_mb=0.01)
    ddp.register_comm_hook(None, threaded_hook)
    tl = SlowTimeline()
    for step in range(2):  # the second step: the rebuilt buckets
        ddp.timeline = tl if step == 1 else None
        ddp(torch.ones(4, 64)).sum().backward()
    names = sorted(s.name for s in tl.spans if s.category == "allreduce")
    return {"names": names, "buckets": len(ddp.buckets)}
