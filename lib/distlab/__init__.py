"""distlab: show, measure and model how distributed training moves data.

The package is built in floors; a module imports only its own floor or lower ones
(``docs/DESIGN.md``; ``tests/test_import_graph.py`` checks it):

Core (floor 0):

- :mod:`distlab.timeline`: one span type for everything timed; :mod:`distlab.trace`: Chrome and
  Kineto traces in and out; :mod:`distlab.clock`: the one clock benchmarks time with (the
  timeline's, read after the device's queued work).
- :mod:`distlab.vocabulary`: the names every floor shares, defined once: collectives, bus
  bandwidth, the error sign (measured vs model), error summaries, size labels, NCCL releases.
- :mod:`distlab.nets`: the one small model (``mlp``) the labs and benchmarks train.
- :mod:`distlab.transformer`: the one description of a decoder transformer (``ModelSpec``, its
  presets, parameters and FLOPs) every model that prices a layer reads; :mod:`distlab.hf_config`:
  a Hugging Face ``config.json`` read as one (what it assumes or leaves out said in notes);
  :mod:`distlab.recompute`: activation recompute as policies (what a layer keeps, what its
  backward runs again, which tensor-parallel collectives that repeats).
- :mod:`distlab.gpus`: the one GPU registry (name, aliases, memory, peak per dtype,
  architecture, collective library, box, network, sources); :mod:`distlab.collective_library`:
  the one interface NCCL's and RCCL's models fill (a release, the choice and the time per size,
  in seconds).
- :mod:`distlab.scratch`: scratch folders the notebooks write to, removed when their kernel exits.
- :mod:`distlab.fit`: the one latency + bandwidth fit; :mod:`distlab.links`: the one table of
  link peaks; :mod:`distlab.devices`: decisions that depend on the GPU count, as pure functions;
  :mod:`distlab.envinfo`: what this machine is.
- :mod:`distlab.launch`: run a function on N local ``torch.distributed`` ranks (or under
  torchrun); :mod:`distlab.launch_demos`: small rank functions that show it.
- :mod:`distlab.report`: text tables, provenance, JSON results; :mod:`distlab.cli`: option types
  and the one way a command ends (bad input: exit 2, Ctrl-C: exit 130).
- :mod:`distlab.logs`: logs users bring, read as the facts they state (nccl-tests' output).
- :mod:`distlab.uneven`: uneven inputs across ranks: the bounded wait that makes a hang an error,
  and what DDP's and ZeRO's hooks for torch's ``Join`` share.

Labs (floor 1):

- :mod:`distlab.samplers`: torch- and libtorch-identical distributed samplers, the assignment
  model, a constant-memory permutation.
- :mod:`distlab.collectives`: every collective's algorithms as plans; simulate, verify, cost,
  calibrate, and run them on real ranks.
- :mod:`distlab.loading`: data-loading stages, executors, the async part loader and their
  models.
- :mod:`distlab.transfers`: host and GPU copies, the process hop, a prefetcher, and their models.
- :mod:`distlab.ddp`: DDP's gradient buckets, distlab's bucketed allreduce, the step model.
- :mod:`distlab.zero`: ZeRO's memory and communication models and ZeRO stages on live ranks.
- :mod:`distlab.hogwild`: processes training one ``share_memory()`` model without locks.
- :mod:`distlab.pipeline_parallel`: pipeline parallelism: torch's seven schedules as plans,
  simulated, costed and run on real ranks with torch.distributed.pipelining's API.
- :mod:`distlab.tensor_parallel`: tensor and sequence parallelism (Megatron's column and row
  split, loss parallel) on real ranks with torch's ``parallelize_module`` API.
- :mod:`distlab.moe`: mixture of experts (top-k router, grouped SwiGLU experts, shared experts,
  the balance loss) and expert parallelism on real ranks as torchtitan's ``ExpertParallel``.

Above them: :mod:`distlab.bench` (floor 2: every benchmark beside its torch reference),
:mod:`distlab.nccl` (floor 1, beside the labs: NCCL's model, ``python -m distlab.nccl``),
:mod:`distlab.rccl` (floor 1: what RCCL, ROCm's NCCL, runs for an allreduce on MI300X nodes),
:mod:`distlab.plan` (floor 2: which parallel layout fits a model on some GPUs and how fast it
runs, ``python -m distlab.plan``),
:mod:`distlab.profile` (floor 3: the one-command machine profile), :mod:`distlab.evidence`
(floor 3: each model's published data, the fits of its constants and its judgement on them;
no model imports it), :mod:`distlab.judge` (floor 4: the cost model judged on profiles and
published tables), :mod:`distlab.health` (floor 4: a user's nccl-tests log judged against
what NCCL should do on that box, ``python -m distlab.health``) and :mod:`distlab.viz` (floor 5:
figures and explorers).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
