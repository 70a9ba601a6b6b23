"""DDP benchmark: naive, bucketed without overlap, distlab overlap and torch DDP side by side.

    python -m distlab.bench ddp --world-size 2 --layers 8 --width 1024 --bucket-cap-mb 1,5,25

Runs ``world-size`` gloo ranks on this host. Each round runs every variant for ``--steps`` training
steps (variants interleaved; round 0 is warmup); times are medians over ranks 0's steps. Columns:
step and backward time, exposed communication (backward minus the no-communication backward),
overlap fraction (1 - exposed / modelled allreduce time), the model's predicted step time
(alpha-beta-gamma calibrated in the same run) and its error, and #wrong (parameter tensors that
differ from torch DDP's after the same steps).
"""

from __future__ import annotations

import sys
from typing import Any

from distlab.bench import options
from distlab.bench.provenance import provenance, write_json

TARGET_RATE = 0.9  # distlab overlap step rate / torch DDP step rate


def _parse(argv: list[str]) -> Any:
    p = options.parser("python -m distlab.bench ddp", __doc__)
    p.add_argument("--world-size", type=options.int_at_least(2), default=2, help="ranks (gloo)")
    p.add_argument("--layers", type=options.positive_int, default=8, help="Linear layers")
    p.add_argument("--width", type=options.positive_int, default=1024, help="layer width")
    p.add_argument("--batch", type=options.positive_int, default=32, help="rows per batch")
    p.add_argument("--bucket-cap-mb", type=options.float_list(0.001), default=[1.0, 5.0, 25.0],
                   help="bucket caps in MiB (comma list)")
    p.add_argument("--steps", type=options.positive_int, default=5, help="steps per round")
    p.add_argument("--rounds", type=options.int_at_least(2), default=4,
                   help="rounds (the first is warmup)")
    p.add_argument("--timeout", type=options.positive_float, default=600.0,
                   help="seconds for the whole run")
    p.add_argument("--json", default=None, help="write results with provenance to this path")
    return p.parse_args(argv)


def parse_args(argv: list[str]) -> Any:
    """The Namespace :func:`run_benchmark` takes, from this command's options (``["-b", "4K"]``);
    a bad option exits 2 with one line, as on the command line."""
    return _parse(list(argv))


def run_benchmark(a: Any) -> dict[str, Any]:
    from distlab import launch
    from distlab.ddp.measure import measure_worker
    out = launch.run(measure_worker, a.world_size,
                     args=(a.layers, a.width, a.batch, list(a.bucket_cap_mb), a.steps, a.rounds),
                     timeout=a.timeout)
    rows = out[0]["rows"]
    for r in rows:  # #wrong: any rank
        r["wrong"] = max(o["rows"][rows.index(r)]["wrong"] for o in out)
    by = {(r["variant"], r["bucket_cap_mb"]): r for r in rows}
    ratios = {str(c): by[("torch", c)]["step_s"] / by[("overlap", c)]["step_s"]
              for c in a.bucket_cap_mb}
    cfg = {k: v for k, v in vars(a).items() if k != "json"}
    return {"config": cfg, "rows": rows, "rate_vs_torch": ratios,
            "local_backward_s": out[0]["local_backward_s"], "link": out[0]["link"]}


def _fmt(v: Any, scale: float = 1e3, spec: str = "9.2f") -> str:
    return format(v * scale, spec) if isinstance(v, float) else format("-", ">" + spec[:-2].split(".")[0])


def _print(payload: dict[str, Any]) -> None:
    c = payload["config"]
    print(f"# ddp: {c['layers']} x Linear({c['width']}), batch {c['batch']}, world {c['world_size']}"
          f" (gloo, one host), {c['steps']} steps x {c['rounds'] - 1} rounds (+1 warmup); "
          f"no-comm backward {payload['local_backward_s'] * 1e3:.2f} ms")
    print(f"{'variant':>11} {'cap(MB)':>7} {'step(ms)':>9} {'bwd(ms)':>9} {'exposed':>9} "
          f"{'overlap':>7} {'pred(ms)':>9} {'err%':>7} {'#wrong':>6}")
    for r in payload["rows"]:
        cap = "-" if r["bucket_cap_mb"] is None else f"{r['bucket_cap_mb']:g}"
        ov = "-" if r["overlap_fraction"] is None else f"{r['overlap_fraction']:.2f}"
        err = "-" if r["error"] is None else f"{r['error'] * 100:+.1f}"
        print(f"{r['variant']:>11} {cap:>7} {_fmt(r['step_s'])} {_fmt(r['backward_s'])} "
              f"{_fmt(r['exposed_s'])} {ov:>7} {_fmt(r['predicted_step_s'])} {err:>7} "
              f"{r['wrong']:>6}")
    for cap, ratio in payload["rate_vs_torch"].items():
        print(f"# cap {cap} MB: distlab overlap step rate = {ratio:.3f} x torch DDP "
              f"(target >= {TARGET_RATE}) {'PASS' if ratio >= TARGET_RATE else 'MISS'}")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    a = _parse(list(sys.argv[1:] if argv is None else argv))
    payload = run_benchmark(a)
    _print(payload)
    if a.json:
        path = write_json(a.json, {"provenance": provenance(backend="gloo",
                                                           world_size=a.world_size), **payload})
        print(f"# wrote {path}")
    return 0
