"""``python -m distlab.plan``: which layout fits a model on your GPUs, and how fast it runs.

    python -m distlab.plan llama3-8b --gpu h100 --gpus 8 --global-batch 64
    python -m distlab.plan llama3-70b --gpus 64 --network ib_ndr400x8 --seq-len 8192 \\
        --global-batch 512 --top 15
    python -m distlab.plan gpt3-175b --gpu a100 --gpus 1536 --global-batch 1536 \\
        --layout "dp=12,tp=8,pp=16,schedule=Interleaved1F1B,v=2,recompute=full"
    python -m distlab.plan my_model.json --gpus 16 --global-batch 128 --explain 1 \\
        --trace step.json
    python -m distlab.plan llama3-405b --gpus 64 --global-batch 64 --json plan.json
    python -m distlab.plan llama3-8b --gpus 8 --global-batch 16 --recompute none,op,full
    python -m distlab.plan qwen3-30b-a3b --gpus 16 --global-batch 512 --ep 4,8

MODEL is a preset (llama3-8b, llama3-70b, llama3-405b, llama2-7b, llama2-70b, gpt3-1.3b,
gpt3-6.7b, gpt3-13b, gpt3-175b; mixtures of experts: deepseek-v3, qwen3-30b-a3b,
qwen3-235b-a22b, mixtral-8x7b, gpt-oss-120b) or a JSON file of a dict with layers, hidden,
heads, kv_heads, ffn_hidden, vocab, seq_len (and optionally head_dim, gated_ffn,
tied_embeddings, norm, experts, top_k, expert_ffn, ...; without
gated_ffn the MLP is GPT's two matrices, and a note says so). GPT-3's presets learn positions
for 2048 tokens: a longer --seq-len is refused. A Hugging Face config.json, or the folder
holding one, is read as its model (distlab.hf_config: what it assumes is said in notes).

Every layout of dp x tp x cp x pp over the GPUs is priced (ZeRO 0/1/3, 1F1B or interleaved
1F1B, micro-batches 1/2/4, recompute none or full, or what --recompute lists; sequence
parallel with tp > 1):
memory per GPU with its parts (parameters, gradients, optimizer state, activations, the rest),
and the step with its parts (compute, exposed tensor/context-parallel communication, exposed
FSDP and data-parallel communication, the pipeline bubble: the busiest pipeline rank's idle
time), tokens/s per GPU and MFU. A model with experts is also laid out at every
expert-parallel degree ep that divides dp x cp and its routed experts (--ep narrows them), and
its step gains the ``ep a2a`` column: the dispatch and combine all-to-alls exposed. The table
ranks the layouts that fit, fastest first, in one
order whatever --top shows (each step charged up to 1% for the share of the GPU's memory the
layout takes, so of near-equal steps the layout with more headroom goes first); a layout that
fits with less to spare than the memory model's own error (the held-out p90 of its peak
reserved bytes on measured runs, distlab.plan.calibration.RESERVED_ERROR_P90, as a share of the
GPU's memory; the line under the table gives it) is marked ``tight`` and ranks after every
layout with more. The
count of layouts that fit is those within a lower bound of their memory, whatever --top. Where
none fits it names a GPU count that holds one, priced. A plan that takes more than a second
draws a progress bar on a terminal.
``--layout`` prices one given layout (as a published run states it); ``--framework megatron``
keeps what Megatron-Core's kernels keep (its fused SwiGLU, its experts' rows weighted inside
it), less than the default where a model is gated or has experts; ``--framework torch`` what
torch's modules keep as torchtitan runs them (the all-gathered input under sequence
parallelism, the routed input weighted before the experts, torchao's float8 linears' 16-bit
input without tensor parallelism), more; ``--explain N`` draws the
N-th ranked layout's step for one rank of each pipeline stage (``--trace OUT`` writes it as a
Chrome trace: the schedule's simulated actions, one lane per pipeline rank). Nothing is
measured: the
models are :mod:`distlab.plan.memory` and :mod:`distlab.plan.step`, calibrated on published
runs (``python -m distlab.judge plan``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distlab.cli import options
from distlab.cli.run import UsageError, run_main
from distlab.plan.table import columns, plan_rows, price_json, tight_note
from distlab.report.table import format_table

if TYPE_CHECKING:
    from distlab.plan.layout import Hardware, Layout
    from distlab.plan.planner import LayoutPrice
    from distlab.transformer import ModelSpec

__all__ = ["PROG", "columns", "main", "plan_rows", "price_json"]

PROG = "python -m distlab.plan"
GiB = 2**30


def _model(text: str, seq_len: int | None, notes: list[str]) -> ModelSpec:
    """The model of ``text`` (a preset, a JSON file of distlab's fields, or a Hugging Face
    ``config.json`` or the folder holding one: :mod:`distlab.hf_config`); lines for ``notes``
    where a file leaves out what decides the parameter count (which MLP) or where a config's
    reading assumed or left something out."""
    from distlab.hf_config import is_hf_config, read_hf_config
    from distlab.transformer import PRESETS, model_spec

    if text in PRESETS:
        try:
            return model_spec(text, seq_len=seq_len)
        except ValueError as exc:
            raise UsageError(f"MODEL {text}: {exc}") from None
    path = Path(text)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if not path.is_file():
        if path.suffix or os.sep in text or path.exists():
            what = ("is a folder without a config.json" if path.is_dir() else "no such file")
            raise UsageError(f"MODEL {text}: {what}")
        raise UsageError(f"MODEL {text!r} is neither a preset ({', '.join(PRESETS)}) nor a "
                         "JSON file")
    try:
        fields = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"MODEL {text}: not readable JSON ({exc})") from None
    if not isinstance(fields, dict):
        raise UsageError(f"MODEL {text}: the JSON must be an object of the model's fields")
    if is_hf_config(fields):
        try:
            read = read_hf_config(path, seq_len=seq_len)
        except ValueError as exc:
            raise UsageError(f"MODEL {text}: {exc}") from None
        notes += read.notes
        return read.spec
    fields.setdefault("name", path.stem)
    try:
        spec = model_spec(fields, seq_len=seq_len)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"MODEL {text}: {exc}") from None
    if "gated_ffn" not in fields:
        notes.append(f"note: {path.name} gives no gated_ffn: priced as a two-matrix MLP "
                     f"({spec.hidden} -> {spec.ffn} -> {spec.hidden}, GPT's); give "
                     '"gated_ffn": true for a gated one (SwiGLU: three matrices, Llama\'s)')
    return spec


def _parser() -> options.Parser:
    from distlab.gpus import GPU_SPEC_KEYS, gpu_aliases
    from distlab.plan.calibration import KERNEL_SPEED
    from distlab.plan.layout import ATTENTION_KERNELS, GPU_KINDS, PRECISIONS, RECOMPUTE
    from distlab.plan.libraries import COLLECTIVE_LIBRARIES
    from distlab.plan.memory import FRAMEWORKS
    from distlab.plan.planner import RECOMPUTE_TRIED
    from distlab.transformer import PRESETS

    p = options.parser(PROG, __doc__)
    p.add_argument("model", metavar="MODEL",
                   help=f"a preset ({', '.join(PRESETS)}), a JSON file of its shape, or a "
                        "Hugging Face config.json or the folder holding one")
    p.add_argument("--gpu", default="h100",
                   help=f"the GPU: {', '.join(GPU_KINDS)} or "
                        f"{', '.join(a for a, g in gpu_aliases().items() if g in GPU_KINDS)}")
    p.add_argument("--gpu-spec", default=None, metavar="SPEC",
                   help="your own GPU instead of --gpu: KEY=VALUE,... or a JSON file of "
                        f"{', '.join(GPU_SPEC_KEYS)} (memory_gib, bf16_tflops and "
                        "bandwidth_gbs required; its compute rate is assumed)")
    p.add_argument("--gpus", type=options.int_at_least(1), default=8, help="GPUs in all")
    p.add_argument("--gpus-per-node", type=options.int_at_least(1), default=8,
                   help="GPUs per node")
    networks = sorted({n for lib in COLLECTIVE_LIBRARIES.values() for n in lib.networks()})
    p.add_argument("--network", choices=networks, default=None,
                   help="between nodes (default: InfiniBand NDR, HDR for A100; on AMD GPUs "
                        "the NIC of their published clusters, one per GPU)")
    p.add_argument("--seq-len", type=options.int_at_least(1), default=None,
                   help="tokens per sequence (default: the model's)")
    p.add_argument("--global-batch", type=options.int_at_least(1), default=None,
                   help="sequences per optimizer step (default: the GPUs' count)")
    p.add_argument("--precision", choices=sorted(PRECISIONS), default=None,
                   help="bytes of the model states (see distlab.plan.layout.PRECISIONS; "
                        "default: mixed)")
    p.add_argument("--attention-kernel", choices=ATTENTION_KERNELS, default="flash",
                   help="the attention kernel the run uses: flash (FlashAttention-2, torch "
                        "SDPA's) or cudnn (cuDNN's fused attention, Transformer Engine's on "
                        "Hopper: measured " + ", ".join(f"{k} {v:g}x flash" for k, v in
                                                        KERNEL_SPEED.items()) + ")")
    p.add_argument("--recompute", type=options.comma_choices(RECOMPUTE),
                   default=list(RECOMPUTE_TRIED),
                   help="the activation recompute to try, a comma list of "
                        f"{', '.join(RECOMPUTE)} or 'all' (default: "
                        f"{','.join(RECOMPUTE_TRIED)}; op is torchtitan's per-op selective "
                        "checkpointing)")
    p.add_argument("--layout", default=None,
                   help="price this one layout: KEY=VALUE,... with dp tp pp cp zero sp "
                        "schedule v mb recompute (or 'fsdp'), each key once")
    p.add_argument("--ep", type=options.int_list(1), default=None, metavar="E[,E...]",
                   help="expert-parallel degrees to try (a model with experts; default every "
                        "divisor of dp*cp that divides its experts)")
    p.add_argument("--top", type=options.int_at_least(1), default=10,
                   help="layouts to show, the first of one ranking (default 10)")
    p.add_argument("--explain", type=options.int_at_least(1), default=None, metavar="N",
                   help="draw the N-th layout's step for one rank of each pipeline stage "
                        "(N at most --top)")
    p.add_argument("--json", metavar="OUT", default=None, type=options.output_file,
                   help="also write every layout shown as JSON to OUT")
    p.add_argument("--trace", metavar="OUT", default=None, type=options.output_file,
                   help="with --explain: write that layout's step as a Chrome trace (open it "
                        "in Perfetto or chrome://tracing)")
    p.add_argument("--framework", choices=sorted(FRAMEWORKS), default="default",
                   help="what the training code's kernels keep for backward: megatron "
                        "(Megatron-Core's fused SwiGLU, its grouped experts weighting each "
                        "routed row inside it) keeps less than the default, torch (torchtitan: "
                        "sequence parallelism's gathered inputs, torchao's float8 linears' "
                        "16-bit inputs without tp) more, hf (a Hugging Face model under tp: "
                        "the logits gathered, all the vocabulary on every rank) more again "
                        "(see distlab.plan.memory.FRAMEWORKS)")
    p.add_argument("--expandable-segments", action="store_true",
                   help="price the caching allocator with "
                        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (without it, the "
                        "command says what it would save on the first layout)")
    p.add_argument("--verify", type=options.int_at_least(1), nargs="?", const=3, default=None,
                   metavar="N",
                   help="run the N fastest layouts that fit (default 3; the --layout one) on "
                        "this machine for a few steps and print the measured step and peak "
                        "memory beside the prediction (GPUs: as many as it has or torchrun "
                        "gives; no GPU: gloo ranks on this host, small models only)")
    p.add_argument("--verify-layers", type=options.int_at_least(1), default=None, metavar="K",
                   help="with --verify: run the model with K layers (predicted for K layers "
                        "too; the full model's step scaled by the model)")
    p.add_argument("--verify-steps", type=options.int_at_least(1), default=3, metavar="S",
                   help="with --verify: timed steps per layout, after one untimed (default 3)")
    p.add_argument("--verify-device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="with --verify: where to run (default: CUDA if torch sees a GPU)")
    return p


def _layout_notes(layout: Layout, hw: Hardware) -> list[str]:
    """A line for each group of ``layout`` that crosses nodes where the planner keeps it in
    one (tensor parallelism: its collectives run between every layer's matrix products)."""
    from distlab.plan.layout import group_span

    span = group_span(layout.tp, layout.stride("tp"), hw.gpus_per_node)
    if span.nodes == 1:
        return []
    return [f"note: tp={layout.tp} spans {span.nodes} nodes ({span.per_node} GPUs of the group "
            f"per node): its collectives are priced across nodes over {hw.network}; the planner "
            f"itself keeps tp within a node (at most {hw.gpus_per_node})"]


def _library_notes(hw: Hardware) -> list[str]:
    """What the step of a GPU outside the calibration rests on: its collective library's model
    where that is not NCCL's (what it prices and what it does not), the stand-in box its
    collectives are priced in where none of its own is held, and its compute rate, assumed
    (with whose efficiency) where no published run calibrates it. Nothing for the calibrated
    GPUs on their own boxes."""
    from distlab.plan.calibration import SHIPPED, rate_key
    from distlab.plan.collectives import HALF_ALLREDUCE
    from distlab.plan.libraries import library_of

    notes = []
    lib = library_of(hw.gpu)
    if lib.name != "nccl":
        release = lib.resolve_release()
        notes.append(f"collectives priced by {lib.name.upper()}'s model (distlab.{lib.name}, "
                     f"release {release.priced_as}): allreduce over whole "
                     f"{lib.gpus_per_node(hw.gpu.box)}-GPU nodes; {HALF_ALLREDUCE}")
    if hw.gpu.box_stand_in and hw.gpus > 1:
        notes.append(f"collectives priced through {hw.gpu.box}, a stand-in: no box of "
                     f"{hw.gpu.name} is held")
    key = rate_key(hw, "bf16")
    if not hw.gpu.calibrated or key not in SHIPPED.efficiency:
        e = SHIPPED.efficiency.get(key, SHIPPED.efficiency.get("default", 0.6))
        arch = hw.gpu.architecture
        fitted = key in SHIPPED.efficiency
        whose = (f"{arch}'s efficiency, fitted on other GPUs' runs" if fitted
                 else "the planner's default efficiency")
        which = (hw.gpu.name if fitted else "an unnamed architecture" if arch == "unknown"
                 else f"{arch} in bf16")
        notes.append(f"compute rate ASSUMED: {e:.2f} of {hw.gpu.name}'s data-sheet peak "
                     f"({hw.gpu.peak_flops / 1e12:.0f} TFLOP/s bf16 dense), {whose}; no "
                     f"published run on {which} "
                     "calibrates it")
    return notes


def _check_ep(model: ModelSpec, degrees: list[int], with_layout: bool) -> None:
    """``UsageError`` (one line, exit 2) for an ``--ep`` the model cannot take."""
    if with_layout:
        raise UsageError("--ep narrows the layouts tried; with --layout give ep= in it")
    if not model.moe and degrees != [1]:
        raise UsageError(f"--ep {','.join(map(str, degrees))}: {model.name} is a dense model "
                         "(no experts to divide); only 1")
    bad = [e for e in degrees if model.moe and model.experts % e]
    if bad:
        raise UsageError(f"--ep {bad[0]}: must divide the {model.experts} routed experts of "
                         f"{model.name}")


def _plan_command(argv: list[str]) -> int:
    if "WORLD_SIZE" in os.environ and os.environ.get("RANK", "0") != "0":
        # under torchrun every rank plans (the same) and verifies together; one prints
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            return _plan(argv)
    return _plan(argv)


def _plan(argv: list[str]) -> int:
    p = _parser()
    args = p.parse_args(argv)
    from distlab.plan.calibration import SHIPPED
    from distlab.plan.layout import hardware, parse_layout, user_gpu_kind
    from distlab.plan.memory import FRAMEWORKS
    from distlab.plan.planner import plan, price
    from distlab.plan.step import step_timeline
    from distlab.report.jsonfile import write_json
    from distlab.trace.chrome import write_chrome_trace
    from distlab.vocabulary import size_in

    if args.trace is not None and args.explain is None:
        raise UsageError("--trace writes the --explain N layout's step: give --explain too")
    showing = 1 if args.layout is not None else args.top
    if args.explain is not None and args.explain > showing:
        raise UsageError(f"--explain {args.explain}: only {showing} "
                         f"{'layout is' if showing == 1 else 'layouts are'} shown"
                         + ("" if args.layout is not None else f" (--top {args.top})"))
    notes: list[str] = []
    mem = {**FRAMEWORKS[args.framework], "expandable_segments": args.expandable_segments}
    model = _model(args.model, args.seq_len, notes)
    try:
        gpu = args.gpu if args.gpu_spec is None else user_gpu_kind(args.gpu_spec)
        hw = hardware(gpu, args.gpus, gpus_per_node=args.gpus_per_node, network=args.network)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    batch = args.global_batch or args.gpus
    header = (f"# {model.name}: {model.params / 1e9:.2f}B parameters, sequence "
              f"{model.seq_len}, global batch {batch} sequences, on {hw.label}, "
              f"{size_in(hw.gpu.memory_bytes, 'GiB', '.1f')} each")
    notes += _library_notes(hw)
    if SHIPPED.kernel_factor(hw, args.attention_kernel) is None:
        notes.append(f"note: {args.attention_kernel} attention has no measured speed on "
                     f"{hw.gpu.name}: priced as flash")
    if args.ep is not None:
        _check_ep(model, args.ep, args.layout is not None)
    if args.layout is not None:
        try:
            layout = parse_layout(args.layout, gpus=hw.gpus, global_batch=batch,
                                  precision=args.precision or "mixed",
                                  attention_kernel=args.attention_kernel)
            if args.precision not in (None, layout.precision):
                raise ValueError(f"--precision {args.precision} and the layout's "
                                 f"precision={layout.precision} disagree: give it once")
            shown = [price(model, layout, hw, **mem)]
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        notes += _layout_notes(layout, hw)
        lines = [header, *(f"# {n}" for n in notes),
                 format_table(plan_rows(shown), columns(model))]
    else:
        with _progress_bar() as progress:
            result = plan(model, hw, batch, precision=args.precision or "mixed",
                          top=args.top,
                          attention_kernel=args.attention_kernel, recompute=args.recompute,
                          **({} if args.ep is None else {"expert_parallel": args.ep}),
                          memory_options=mem, progress=progress)
        shown = list(result.ranked) or list(result.rejected)
        if args.explain is not None and args.explain > len(shown):
            raise UsageError(f"--explain {args.explain}: only {len(shown)} layouts are shown")
        lines = [header, *(f"# {n}" for n in notes)]
        lines += [f"# not priced: {n} layout{'s' if n > 1 else ''} with {why}"
                  for why, n in result.not_priced]
        if not result.ranked:
            lines += result.advice
        lines.append(f"# at most {result.fitting} of {result.tried} layouts fit"
                     + (f"; the {len(shown)} first, fastest first, each checked by replaying "
                        "its step through the caching allocator:" if result.ranked else
                        "; the least short:"))
        lines.append(format_table(plan_rows(shown), columns(model)))
    note = tight_note(shown)
    if note is not None:
        lines += [f"# {line}" for line in note.splitlines()]
    if shown and not args.expandable_segments:
        lines += _expandable_note(model, hw, shown[0], mem)
    print("\n".join(lines))
    if args.explain is not None:
        _explain(shown[args.explain - 1])
        if args.trace is not None:
            write_chrome_trace(step_timeline(shown[args.explain - 1].step), args.trace)
            print(f"wrote {args.trace}")
    verified: list[dict[str, Any]] | None = None
    if args.verify is not None:
        verified = _verify(model, hw, [x for x in shown if x.fits][:args.verify], args)
    if args.json is not None:
        doc: dict[str, Any] = {"model": model.to_dict(), "hardware": hw.label,
                               "layouts": [price_json(x) for x in shown]}
        if verified is not None:
            doc["verify"] = verified
        write_json(args.json, doc)
    return 0


@contextlib.contextmanager
def _progress_bar() -> Any:
    """A progress bar on stderr for :func:`~distlab.plan.planner.plan` (its ``progress``
    hook): the layouts priced cheaply of those tried, then how many were priced in full. Shown
    only on a terminal, and only once the plan has run for a second (a small plan prints
    nothing)."""
    from tqdm.auto import tqdm

    bar = tqdm(total=0, desc="planning", unit=" layouts", file=sys.stderr, disable=None,
               delay=1.0, leave=False)

    def progress(bounded: int, total: int, priced: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.n = bounded
        if priced:
            bar.set_postfix_str(f"{priced} priced in full", refresh=False)
        bar.refresh() if priced or bounded == total else bar.update(0)

    try:
        yield progress
    finally:
        bar.close()


def _expandable_note(model: ModelSpec, hw: Any, first: LayoutPrice,
                     memory_options: dict[str, Any]) -> list[str]:
    """A line where expandable segments would make the first layout reserve at least half a
    GiB less (or fit where it does not), priced with ``memory_options`` otherwise."""
    from distlab.plan.planner import price
    from distlab.vocabulary import size_in

    other = price(model, first.layout, hw, **{**memory_options, "expandable_segments": True})
    saved = first.memory.total - other.memory.total
    if saved < 2**29:
        return []
    verdict = ("and fits" if other.fits and not first.fits else
               "" if other.fits else "and still does not fit")
    return [f"# with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the first layout "
            f"({first.layout.label}) needs {size_in(saved, 'GiB')} less, "
            f"{size_in(other.memory.total, 'GiB')} {verdict}".rstrip()]


def _verify(model: ModelSpec, hw: Any, prices: list[LayoutPrice], args: Any
            ) -> list[dict[str, Any]]:
    """Run ``prices``' layouts here (:func:`distlab.plan.verify.run.verify`), print the table,
    return its JSON rows."""
    if not prices:
        print("\n# verify: no layout fits, nothing to run")
        return []
    from distlab.plan.verify.report import verify_json, verify_table
    from distlab.plan.verify.run import verify

    if args.verify_layers is not None and args.verify_layers > model.layers:
        raise UsageError(f"--verify-layers {args.verify_layers}: {model.name} has "
                         f"{model.layers} layers")
    print(f"\n# verify: the {len(prices)} layout(s) above run here, {args.verify_steps} "
          "timed steps each after one untimed", flush=True)
    try:
        rows = verify(model, [p.layout for p in prices], hw=hw, layers=args.verify_layers,
                      steps=args.verify_steps, device=args.verify_device,
                      progress=lambda line: print(f"verify {line}", file=sys.stderr,
                                                  flush=True))
    except ValueError as exc:
        raise UsageError(f"--verify: {exc}") from None
    print(verify_table(rows))
    return verify_json(rows)


def _explain(p: LayoutPrice) -> None:
    """The layout's memory and step by part; with a pipeline, each pipeline rank's work and
    idle time, the two meanings of the bubble, and the last stage's output layer."""
    from distlab.plan.step import output_layer_s

    m, s = p.memory, p.step
    print(f"\n## {p.layout.label}")
    print("memory per GPU (GiB): " + ", ".join(f"{k} {v / GiB:.2f}"
                                               for k, v in m.parts().items())
          + f"; total {m.total / GiB:.2f}")
    print("step (s): " + ", ".join(f"{k} {v:.4f}" for k, v in s.parts().items())
          + f"; step {s.step_s:.4f}")
    if s.simulation is None:
        return
    sim = s.simulation
    last = sim.plan.rank_of(sim.plan.num_stages - 1)
    busiest = max(range(sim.plan.ranks), key=lambda r: sim.busy_s[r])
    output = output_layer_s(p.step.model, p.layout, p.step.hardware)
    for r in range(sim.plan.ranks):
        extra = (f"; {output:.4f} s of it the output layer, which only the last stage runs"
                 if r == last else "")
        print(f"pipeline rank {r}: busy {sim.busy_s[r]:.4f} s, idle {sim.idle_s[r]:.4f} s"
              + extra)
    print(f"bubble {s.bubble_s:.4f} s: the idle time of the busiest rank (rank {busiest}), "
          "what the pipeline adds to the step;\nthe other ranks idle longer by the work they "
          f"lack. Bubble fraction (idle share of every rank's time): {sim.bubble_fraction:.1%}")


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0, 2 with one error line, or 130 on Ctrl-C."""
    return run_main(PROG, _plan_command, argv, on_interrupt="nothing written")


if __name__ == "__main__":
    sys.exit(main())
