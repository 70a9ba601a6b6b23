"""Loading pipelines: stages, executors, the async part loader, and their model.

    from distlab.pipeline import write_shards, ShardSet, loading_stages, run_pipeline
    shards = ShardSet(write_shards(tmpdir), record_nbytes=4096)
    res = run_pipeline(loading_stages(shards), 64, executor="threads", queue_depth=2)
    res.wall_s, res.stall_s, res.timeline.gantt()

Modules: :mod:`.stages` (the Stage interface and built-ins), :mod:`.core` (run result, base class, timeouts),
:mod:`.executors` (sync, threads, the executor registry),
:mod:`.procs` (worker processes), :mod:`.torchref` (instrumented torch DataLoader),
:mod:`.parts` (async part loader), :mod:`.model` (bound and simulation), :mod:`.shards`
(shard files), :mod:`.build` (stages by name), :mod:`.errors`.
"""

from .build import STAGE_KINDS, equal_stages, loading_stages, make_stage
from .errors import (PartLoadError, PipelineError, PipelineTimeoutError, ProducerExitedError,
                     StageError, WorkerExitedError)
from .executors import EXECUTORS, Executor, RunResult, make_executor, run_pipeline
from .model import (Station, bound_s, measured_costs, plan_for, plan_for_stages, simulate,
                    sync_time_s)
from .parts import Part, PartLoader, PartsResult, train_on_parts
from .shards import ShardSet, write_shards
from .stages import (BurnStage, CollateStage, ComputeStage, DecodeStage, FnStage, H2DStage,
                     IdentityStage, PinStage, ReadStage, SleepStage, Stage,
                     accelerator_available)

__all__ = [
    "EXECUTORS", "STAGE_KINDS", "BurnStage", "CollateStage", "ComputeStage", "DecodeStage",
    "Executor", "FnStage", "H2DStage", "IdentityStage", "Part", "PartLoadError", "PartLoader",
    "PartsResult", "PinStage", "PipelineError", "PipelineTimeoutError", "ProducerExitedError", "ReadStage", "RunResult",
    "ShardSet", "SleepStage", "Stage", "StageError", "Station", "WorkerExitedError",
    "accelerator_available", "bound_s", "equal_stages", "loading_stages", "make_executor",
    "make_stage", "measured_costs", "plan_for", "plan_for_stages", "run_pipeline", "simulate",
    "sync_time_s",
    "train_on_parts", "write_shards",
]
