"""Loading pipelines: stages, executors, the async part loader, and their model.

    from distlab.loading import write_shards, ShardSet, loading_stages, run_pipeline
    shards = ShardSet(write_shards(tmpdir), record_nbytes=4096)
    res = run_pipeline(loading_stages(shards), 64, executor="threads", queue_depth=2)
    res.wall_s, res.stall_s, gantt(res.timeline)  # distlab.viz.gantt

A stage turns one item into the next (``process(item) -> item``); the chain read -> decode ->
collate -> pin -> h2d -> compute is storage -> pageable host memory -> pinned host memory -> GPU
with the training step at the end. ``"worker"`` stages may run in worker processes, ``"host"``
stages in the trainer; a stage that cannot do its job here (pinning without an accelerator)
passes the item through and sets ``skipped`` to the reason.

Modules: :mod:`.stage` (the Stage interface), :mod:`.synthetic_stages` (sleep, burn, identity,
function), :mod:`.data_stages` (read, decode, collate), :mod:`.device_stages` (pin, h2d,
compute), :mod:`.cpuwork` (CPU work), :mod:`.core` (run result, executor base class, timeouts),
:mod:`.executors` (sync, threads, the executor registry), :mod:`.procs` (worker processes),
:mod:`.torchref` (instrumented torch DataLoader), :mod:`.part_loader` (async part loader),
:mod:`.bottleneck` (bound and simulation of a line of stations), :mod:`.hop_cost` (the measured
hop of a worker's output into the trainer, for the process executors' plans),
:mod:`.part_loader_model` (the part loader's model), :mod:`.shards` (shard files), :mod:`.build`
(stages by name), :mod:`.errors`; real images: :mod:`.image_data` (seeded synthetic JPEGs, files
and a tar shard), :mod:`.image_stages` (read, decode, crop and flip, collate; the GPU-decode path)
and :mod:`.image_model` (decode cost, images/s for workers and cores, bytes over PCIe).
"""

from distlab.loading.bottleneck import (
                         Station,
                         bound_s,
                         measured_costs,
                         plan_for,
                         plan_for_stages,
                         simulate_pipeline,
                         sync_time_s,
)
from distlab.loading.build import STAGE_KINDS, equal_stages, loading_stages, make_stage
from distlab.loading.data_stages import CollateStage, DecodeStage, ReadStage
from distlab.loading.device_stages import ComputeStage, H2DStage, PinStage
from distlab.loading.errors import (
                         PartLoadError,
                         PipelineError,
                         PipelineTimeoutError,
                         ProducerExitedError,
                         StageError,
                         WorkerExitedError,
)
from distlab.loading.executors import EXECUTORS, Executor, RunResult, make_executor, run_pipeline
from distlab.loading.part_loader import Part, PartLoader, PartsResult, train_on_parts
from distlab.loading.shards import ShardSet, write_shards
from distlab.loading.stage import Stage, accelerator_available
from distlab.loading.synthetic_stages import BurnStage, FnStage, IdentityStage, SleepStage

__all__ = [
    "EXECUTORS", "STAGE_KINDS", "BurnStage", "CollateStage", "ComputeStage", "DecodeStage",
    "Executor", "FnStage", "H2DStage", "IdentityStage", "Part", "PartLoadError", "PartLoader",
    "PartsResult", "PinStage", "PipelineError", "PipelineTimeoutError", "ProducerExitedError",
    "ReadStage", "RunResult",
    "ShardSet", "SleepStage", "Stage", "StageError", "Station", "WorkerExitedError",
    "accelerator_available", "bound_s", "equal_stages", "loading_stages", "make_executor",
    "make_stage", "measured_costs", "plan_for", "plan_for_stages", "run_pipeline",
    "simulate_pipeline", "sync_time_s", "train_on_parts", "write_shards",
]
