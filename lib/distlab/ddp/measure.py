"""Measure DDP variants side by side on live ranks (run through :func:`distlab.launch.run`).

``measure_worker`` runs on every rank: a local no-communication model gives the compute times
(per-parameter ready times, backward, forward + optimizer); then for ``rounds`` rounds each variant
(naive, bucketed without overlap, distlab overlap, torch DDP; per bucket cap) runs ``steps``
training steps, variants interleaved so machine load hits them alike; one more round, untimed,
records each distlab variant's spans (so tracing costs nothing in the timed rounds). All variants train on the
same batches from the same (rank-dependent) initial weights, so their parameters must equal torch
DDP's at the end (``wrong``: parameter tensors that differ). Times in seconds.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

VARIANTS = ("naive", "no-overlap", "overlap", "torch")


def _mlp(layers: int, width: int, seed: int) -> Any:
    import torch
    torch.manual_seed(seed)
    mods: list[Any] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


def _ready_times(model: Any, x: Any) -> tuple[list[int], list[float], list[float], float]:
    """(parameter sizes in ready order, their ready times, -, backward seconds) of one local step."""
    import torch
    params = list(model.parameters())
    marks: list[tuple[int, float]] = []
    hs = [p.register_post_accumulate_grad_hook(lambda _p, i=i: marks.append((i, time.perf_counter())))
          for i, p in enumerate(params)]
    loss = model(x).pow(2).mean()
    t0 = time.perf_counter()
    loss.backward()
    t1 = time.perf_counter()
    for h in hs:
        h.remove()
    model.zero_grad()
    del torch
    sizes = [params[i].numel() * params[i].element_size() for i, _ in marks]
    return sizes, [t - t0 for _, t in marks], [], t1 - t0


def measure_worker(rank: int, world_size: int, layers: int, width: int, batch: int,
                   caps: list[float], steps: int, rounds: int, calibrate_link: bool = True
                   ) -> dict[str, Any]:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from distlab.collectives import calibrate
    from distlab.ddp.model import allreduce_seconds, predict, simulate_step
    from distlab.ddp.reducer import DDP
    from distlab.timeline import Timeline

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1000 + rank)
    xs = [torch.randn(batch, width, generator=g) for _ in range(steps)]
    local = _mlp(layers, width, 1)
    opt = torch.optim.SGD(local.parameters(), lr=1e-3)
    bwd, step, ready_runs = [], [], []
    for _ in range(max(3, rounds)):
        for x in xs:
            t0 = time.perf_counter()
            sizes, ready, _, b = _ready_times(local, x)
            opt.step()
            step.append(time.perf_counter() - t0)
            bwd.append(b)
            ready_runs.append(ready)
    local_bwd, local_step = statistics.median(bwd), statistics.median(step)
    ready_med = [statistics.median(r[i] for r in ready_runs) for i in range(len(sizes))]
    link = calibrate(sizes=(65536, 262144, 1 << 20, 4 << 20), iters=5, warmup=2) \
        if calibrate_link else None

    models: dict[tuple[str, float], Any] = {}
    timelines: dict[tuple[str, float], Timeline] = {}
    for cap in caps:
        for v in VARIANTS:
            if v == "naive" and cap != caps[0]:
                continue
            m = _mlp(layers, width, 100 + rank)
            if v == "torch":
                w = DistributedDataParallel(m, bucket_cap_mb=cap)
            else:
                timelines[(v, cap)] = Timeline()
                w = DDP(m, bucket_cap_mb=cap, overlap=(v != "no-overlap"), naive=(v == "naive"),
                        timeline=timelines[(v, cap)])
            models[(v, cap)] = (w, torch.optim.SGD(w.parameters(), lr=1e-3))
    times: dict[tuple[str, float], dict[str, list[float]]] = {k: {"step": [], "bwd": []}
                                                             for k in models}
    for r in range(rounds + 1):  # round 0: warmup; last round: traced, not timed
        for key, (w, o) in models.items():
            if key in timelines:
                w.timeline = timelines[key] if r == rounds else None
            torch.distributed.barrier()
            for x in xs:
                t0 = time.perf_counter()
                loss = w(x).pow(2).mean()
                t1 = time.perf_counter()
                loss.backward()
                t2 = time.perf_counter()
                o.step()
                o.zero_grad()
                t3 = time.perf_counter()
                if 0 < r < rounds:  # round 0 is warmup (includes the bucket rebuild)
                    times[key]["step"].append(t3 - t0)
                    times[key]["bwd"].append(t2 - t1)
    rows = []
    other = max(local_step - local_bwd, 0.0)
    for (v, cap), (w, _) in models.items():
        ref = models[("torch", cap)][0].module
        mine = w.module
        wrong = sum(not torch.equal(a, b) for a, b in zip(ref.parameters(), mine.parameters(),
                                                          strict=True))
        st, bw = statistics.median(times[(v, cap)]["step"]), statistics.median(times[(v, cap)]["bwd"])
        pred = None
        if link is not None:
            if v == "naive":
                comm = [allreduce_seconds(s, world_size, link) for s in sizes]
                p = simulate_step([local_bwd] * len(sizes), comm, local_bwd, overlap=False,
                                  other_s=other)
            else:
                p = predict(sizes, ready_med, local_bwd, link, world_size, cap,
                            overlap=(v != "no-overlap"), other_s=other)
            pred = p
        exposed = max(bw - local_bwd, 0.0)
        comm_total = pred.comm_s if pred else float("nan")
        rows.append({"variant": v, "bucket_cap_mb": cap if v != "naive" else None,
                     "step_s": st, "backward_s": bw, "exposed_s": exposed,
                     "overlap_fraction": (min(1.0, max(0.0, 1 - exposed / comm_total))
                                          if pred and comm_total > 0 else None),
                     "predicted_step_s": pred.step_s if pred else None,
                     "error": (pred.step_s - st) / st if pred else None, "wrong": int(wrong),
                     "buckets": [len(b) for b in w.buckets] if v != "torch" else None,
                     "spans": timelines[(v, cap)].to_dicts()[-400:]
                     if (v, cap) in timelines else [],
                     "predicted_spans": list(pred.comm_spans) if pred else []})
    return {"rank": rank, "local_backward_s": local_bwd, "local_step_s": local_step,
            "ready_s": ready_med, "sizes": sizes, "rows": rows,
            "link": link.to_dict() if link is not None else None}


def torch_buckets_worker(rank: int, world_size: int, layers: int, width: int,
                         bucket_cap_mb: float | None, iters: int = 3) -> dict[str, Any]:
    """Record ``GradBucket.parameters()`` (names) of a real torch DDP for ``iters`` iterations
    through a comm hook (which allreduces as the built-in does); also distlab's prediction
    (:func:`torch_ddp_buckets`) and :class:`DDP`'s ``buckets`` after each iteration."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from distlab.ddp.buckets import torch_ddp_buckets
    from distlab.ddp.reducer import DDP

    model = _mlp(layers, width, 0)
    names = {id(p): n for n, p in model.named_parameters()}
    x = torch.randn(4, width)
    predicted = torch_ddp_buckets(model, bucket_cap_mb, example_input=x)
    ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    seen: list[list[list[str]]] = []

    def hook(state: Any, bucket: Any) -> Any:
        if bucket.index() == 0:
            seen.append([])
        seen[-1].append([names[id(p)] for p in bucket.parameters()])
        buf = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])

    hook.__annotations__ = {"state": object, "bucket": dist.GradBucket,
                            "return": torch.futures.Future[torch.Tensor]}
    ddp.register_comm_hook(None, hook)
    for _ in range(iters):
        ddp(x).sum().backward()
    ours = DDP(_mlp(layers, width, 0), bucket_cap_mb=bucket_cap_mb)
    ours_seen = []
    for _ in range(iters):
        ours(x).sum().backward()
        ours_seen.append([list(b) for b in ours.buckets])
    return {"torch": seen, "predicted": predicted, "ours": ours_seen}


def no_sync_worker(rank: int, world_size: int, layers: int, width: int,
                   accumulate: int) -> dict[str, Any]:
    """``accumulate`` micro-batches under ``no_sync`` then one synced, against one synced step on
    the summed loss: allreduce counts and whether the gradients are equal (allclose, 1e-6)."""
    import torch

    from distlab.ddp.reducer import DDP

    g = torch.Generator().manual_seed(5 + rank)
    xs = [torch.randn(4, width, generator=g) for _ in range(accumulate + 1)]
    a = DDP(_mlp(layers, width, 3))
    b = DDP(_mlp(layers, width, 3))
    for x in xs[:-1]:
        with a.no_sync():
            a(x).pow(2).mean().backward()
    after_no_sync = a.allreduce_count
    a(xs[-1]).pow(2).mean().backward()
    sum(b(x).pow(2).mean() for x in xs).backward()
    same = all(torch.allclose(p.grad, q.grad, rtol=1e-6, atol=1e-7)
               for p, q in zip(a.parameters(), b.parameters(), strict=True))
    return {"allreduces_during_no_sync": after_no_sync, "allreduces_total": a.allreduce_count,
            "reference_allreduces": b.allreduce_count, "same_grads": same}
