"""Rank functions for tests/tensor_parallel/test_tensor_parallel_torch_mesh.py: torch's tensor
parallel example run as a torch script is written, once with torch's ``parallelize_module`` and
styles and once with distlab's, on the same torch ``DeviceMesh``.

The example is pytorch/examples' ``distributed/tensor_parallelism/tensor_parallel_example.py``
in shape: ``ToyModel`` (Linear(10, 32), ReLU, Linear(32, 5)), plan ``{"in_proj":
ColwiseParallel(), "out_proj": RowwiseParallel()}``, AdamW (lr 0.25, foreach), 10 iterations of
``torch.manual_seed(i); inp = torch.rand(20, 10); tp_model(inp).sum().backward();
optimizer.step()``. Each rank builds the model from its own seed, as the example does (its
ranks never seed alike): ``parallelize_module``'s default ``src_data_rank=0`` makes them agree.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

ITERATIONS = 10
LR = 0.25


class ToyModel(nn.Module):
    """The example's MLP: Linear(10, 32), ReLU, Linear(32, 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.in_proj = nn.Linear(10, 32)
        self.relu = nn.ReLU()
        self.out_proj = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.relu(self.in_proj(x)))


def _local(t: Any) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return (t.to_local() if isinstance(t, DTensor) else t).detach().clone()


def _train(tp_lib: Any, mesh: Any, rank: int) -> dict[str, Any]:
    """The example's body with ``parallelize_module`` and the styles taken from ``tp_lib``."""
    torch.manual_seed(1000 + rank)  # ranks differ; src_data_rank=0 gives them rank 0's model
    model = tp_lib.parallelize_module(
        module=ToyModel(), device_mesh=mesh,
        parallelize_plan={"in_proj": tp_lib.ColwiseParallel(),
                          "out_proj": tp_lib.RowwiseParallel()})
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, foreach=True)
    outputs = []
    for i in range(ITERATIONS):
        torch.manual_seed(i)
        inp = torch.rand(20, 10)
        output = model(inp)
        output.sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        outputs.append(_local(output))
    return {"outputs": outputs,
            "params": {n: _local(p) for n, p in model.named_parameters()}}


def torch_example(rank: int, world: int) -> dict[str, Any]:
    """The example on a 1-D mesh and on the ``"tp"`` dimension of a ``("dp", "tp")`` mesh of
    shape ``(1, world)``, with torch's API and with distlab's; the largest difference of every
    output and every local parameter shard after the last step, per mesh; and the errors a
    2-D mesh and a wrong type give."""
    import torch.distributed.tensor.parallel as torch_tp
    from torch.distributed.device_mesh import init_device_mesh

    import distlab.tensor_parallel as distlab_tp

    meshes = {"1d": init_device_mesh("cpu", (world,)),
              "2d['tp']": init_device_mesh("cpu", (1, world),
                                           mesh_dim_names=("dp", "tp"))["tp"]}
    out: dict[str, Any] = {}
    for name, mesh in meshes.items():
        theirs, ours = _train(torch_tp, mesh, rank), _train(distlab_tp, mesh, rank)
        pairs = list(zip(theirs["outputs"], ours["outputs"], strict=True))
        pairs += [(theirs["params"][n], ours["params"][n]) for n in theirs["params"]]
        # |a - b| / (1 + |a|): absolute for values below 1, relative above
        diffs = [float(((a - b).abs() / (1 + a.abs())).max()) for a, b in pairs]
        out[name] = {"max_err": max(diffs), "n": len(diffs),
                     "max_abs": max(float((a - b).abs().max()) for a, b in pairs),
                     "largest": max(float(a.abs().max()) for a, _ in pairs),
                     "shapes": {n: tuple(p.shape) for n, p in ours["params"].items()}}
    errors = {}
    whole = init_device_mesh("cpu", (1, world), mesh_dim_names=("dp", "tp"))
    for label, mesh in (("2d", whole), ("str", "tp")):
        try:
            distlab_tp.parallelize_module(ToyModel(), mesh,
                                          {"in_proj": distlab_tp.ColwiseParallel()})
        except (TypeError, ValueError) as e:
            errors[label] = f"{type(e).__name__}: {e}"
    out["errors"] = errors
    return out
