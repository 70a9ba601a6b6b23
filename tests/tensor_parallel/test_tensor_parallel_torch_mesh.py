"""torch's tensor parallel example with one import changed: distlab's ``parallelize_module`` and
styles take torch's own ``DeviceMesh`` (1-D, and ``mesh["tp"]`` of a 2-D ``("dp", "tp")``
mesh) and train as torch's do.

On 2 gloo ranks, 10 AdamW steps of the example's ToyModel (tests/helpers/
tensor_parallel_torch_mesh.py): every output and every local parameter shard after the last step
equal torch's ``parallelize_module`` run within ``|a - b| / (1 + |a|) <= 1e-5`` (absolute below
1, relative above; float32: after 10 steps at lr 0.25 the outputs reach tens, and AdamW's
foreach step over DTensors and over plain tensors rounds differently in the last bits).
"""

from __future__ import annotations

import pytest
import torch.distributed as dist

from distlab import launch
from distlab.tensor_parallel import ColwiseParallel, init_mesh, parallelize_module, tp_group_of
from helpers.tensor_parallel_torch_mesh import ToyModel, torch_example

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def runs():
    return launch.run(torch_example, 2, timeout=180)


@pytest.mark.multiprocess
@pytest.mark.parametrize("mesh", ["1d", "2d['tp']"])
def test_torch_example_runs_on_torchs_mesh_as_torch_does(runs, mesh):
    for rank, r in enumerate(runs):
        got = r[mesh]
        assert got["n"] == 10 + 4  # 10 outputs, 4 parameters
        assert got["max_err"] <= TOLERANCE, (rank, got)
        # the split happened: the column layer keeps half the rows, the row layer half the cols
        assert got["shapes"] == {"in_proj.weight": (16, 10), "in_proj.bias": (16,),
                                 "out_proj.weight": (5, 16), "out_proj.bias": (5,)}


@pytest.mark.multiprocess
def test_a_2d_torch_mesh_and_a_wrong_type_are_named_errors(runs):
    errors = runs[0]["errors"]
    assert errors["2d"].startswith("ValueError: device_mesh must be one-dimensional")
    assert "['dp', 'tp']" in errors["2d"] and "pass mesh['tp']" in errors["2d"]
    assert errors["str"] == (
        "TypeError: device_mesh must be a one-dimensional distlab.tensor_parallel.DeviceMesh or "
        "torch.distributed.device_mesh.DeviceMesh (of a larger mesh, its named dimension: "
        "mesh['tp']), a torch.distributed.ProcessGroup, or None (the default group); got "
        "builtins.str")


def test_type_errors_name_the_accepted_types_qualified_without_contradiction():
    class DeviceMesh:  # a look-alike of the same name must not read as "got DeviceMesh"
        pass

    with pytest.raises(TypeError) as info:
        tp_group_of(DeviceMesh())
    text = str(info.value)
    assert "torch.distributed.device_mesh.DeviceMesh" in text
    given = text.rsplit("; got ", 1)[1]
    assert given.endswith("test_type_errors_name_the_accepted_types_qualified_without_"
                          "contradiction.<locals>.DeviceMesh"), given
    with pytest.raises(TypeError, match="got builtins.int"):
        parallelize_module(ToyModel(), 2, {"in_proj": ColwiseParallel()})
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError):  # distlab's own mesh still needs a process group
        init_mesh((1,), ("tp",))
