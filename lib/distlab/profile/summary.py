"""Headline figures of a profile as short Markdown (``summary.md``); pure: dicts in, text out."""

from __future__ import annotations

from typing import Any

from distlab.bench.allreduce import allreduce_table
from distlab.bench.ddp import COLUMNS as DDP_COLUMNS
from distlab.bench.ddp import OVERLAP_DEFINITION, with_overlap
from distlab.bench.versus import versus_lines
from distlab.profile.expected import MODEL_MIN_BYTES, low_lines, profile_verdicts
from distlab.report.table import format_table
from distlab.report.words import count
from distlab.transfers.paths import PIN_PATHS
from distlab.vocabulary import ErrorSummary, size_in, size_label

__all__ = ["headlines", "summary_markdown"]


def _env(p: dict[str, Any]) -> list[str]:
    f = p["facts"]
    mem = f"{size_in(f['memory_bytes'], 'GiB', '.1f')} RAM" if f.get("memory_bytes") \
        else "RAM unknown"
    out = [f"- CPU: {f['cpu_model']}, {f['cpu_cores']} cores, {mem}",
           f"- torch {f['torch']}, CUDA {f['cuda_runtime'] or 'none'}, NCCL {f['nccl'] or 'none'}"]
    if f["gpus"]:
        out += [f"- GPU {g['index']}: {g['name']}, {size_in(g['memory_bytes'], 'GiB', '.1f')}"
                for g in f["gpus"]]
        out += [f"- PCIe link GPU {ln.get('gpu')}: Gen{ln.get('gen')} x{ln.get('width')}"
                for ln in f["pcie_links"]]
    else:
        out.append("- GPU: none (torch sees no CUDA device)")
    return out


def _transfers(p: dict[str, Any]) -> list[str]:
    out = []
    ranks = len(p["devices"]) > 1   # under torchrun every rank measured: say whose line it is
    for d in p["devices"]:
        best: dict[str, tuple[float, int]] = {}
        for r in d["rows"]:  # a pin cost is a time, never a bandwidth (older profiles: by path)
            if r["gbps"] is not None and r["path"] not in PIN_PATHS:
                key = f"{r['path']}/{r['memory']}"
                if r["gbps"] > best.get(key, (0.0, 0))[0]:
                    best[key] = (r["gbps"], r["nbytes"])
        where = "host" if d.get("device") is None else f"cuda:{d['device']}"
        if ranks:
            where = f"rank {d.get('rank', '?')} {where}"
        for key, (gbps, nbytes) in best.items():
            out.append(f"- {where} {key}: peak {gbps:.2f} GB/s (at {nbytes} B)")
        pins = d.get("pin_costs") or [r for r in d["rows"] if r["path"] in PIN_PATHS]
        for method in PIN_PATHS:
            timed = [r for r in pins if r["path"] == method and r.get("time_us") is not None]
            if timed:
                big = max(timed, key=lambda r: r["nbytes"])
                out.append(f"- {where} {method}: {big['time_us']:.1f} us to pin {big['nbytes']} B "
                           f"({big['time_us'] / (big['nbytes'] / 2**20):.3g} us/MiB; a one-off "
                           "cost, not a bandwidth)")
        for loop in d.get("prefetch", []):
            out.append(f"- {where} {loop['mode']} loop: efficiency {loop['efficiency']:.2f}")
    return out


def _gpus(p: dict[str, Any]) -> list[str]:
    box = p.get("box") or {}
    out = [f"- box: {box.get('box')}, {box.get('gpus')} GPUs" +
           (" (REHEARSAL: host memory stands in for each GPU; no row is a GPU's)"
            if box.get("rehearsal") else "")]
    for r in p.get("host_to_all", []):
        if r["gpu"] == "all":
            out.append(f"- host-to-all {r['run']} {r['direction']}: {r['gbps']:.2f} GB/s "
                       f"aggregate over {box.get('gpus')} GPUs at once (#wrong {r['wrong']})")
    peer = [r for r in p.get("peer", []) if r["direction"] == "one-way"]
    if peer:
        top = max(r["nbytes"] for r in peer)
        rates = [r["gbps"] for r in peer if r["nbytes"] == top]
        out.append(f"- GPU-to-GPU one way at {top} B: {min(rates):.2f} .. {max(rates):.2f} GB/s "
                   f"over {len(rates)} ordered pairs (#wrong {sum(r['wrong'] for r in peer)})")
    lines = p.get("matrix_lines") or []
    return out + (["", "```", *lines, "```", ""] if lines else [])


def _collectives(p: dict[str, Any]) -> list[str]:
    out = []
    for run in p["runs"]:
        rows = run["rows"]
        top = max(r["nbytes"] for r in rows)
        at = {r["algorithm"]: r for r in rows if r["nbytes"] == top}
        cells = ", ".join(f"{a} {r['busbw_gbps']:.3f}" for a, r in at.items())
        if run.get("rehearsal"):
            out.append(f"- {run['backend']} ws{run['world_size']}: REHEARSAL, ran on "
                       f"{run['rehearsal']['ran_on']}")
        out.append(f"- {run['backend']} ws{run['world_size']} busbw (GB/s) at {top} B: {cells}")
        errs = ErrorSummary.of(r["error_pct"] for r in rows if r["nbytes"] >= MODEL_MIN_BYTES)
        if errs.n:
            out.append(f"- {run['backend']} ws{run['world_size']} model |error| at >= "
                       f"{size_label(MODEL_MIN_BYTES)}: median {errs.median:.1f}%, max "
                       f"{errs.max:.1f}% ({count(errs.n, 'row')})")
        wrong = sum(r["wrong"] for r in rows)
        out.append(f"- {run['backend']} ws{run['world_size']} #wrong: {wrong}")
        out += versus_lines(rows, prefix=f"- {run['backend']} ws{run['world_size']} ")
        out += ["", "```", allreduce_table(rows), "```", ""]
    for run in p.get("collective_runs", []):  # all-gather ... broadcast (bench collective)
        rows = run["rows"]
        where = f"{run['backend']} ws{run['world_size']} {run['op']}" + \
            (" (REHEARSAL on gloo)" if run.get("rehearsal") else "")
        top = max(r["nbytes"] for r in rows)
        cells = ", ".join(f"{r['algorithm']} {r['busbw_gbps']:.3f}" for r in rows
                          if r["nbytes"] == top)
        out.append(f"- {where} busbw (GB/s) at {top} B: {cells}")
        out += versus_lines(rows, prefix=f"- {where} ")
        out.append(f"- {where} #wrong: {sum(r['wrong'] for r in rows)}")
    return out


def _ddp(p: dict[str, Any]) -> list[str]:
    out = [f"- no-communication backward {p['local_backward_s'] * 1e3:.2f} ms"]
    if p.get("rehearsal"):
        out.insert(0, f"- REHEARSAL: placed on {p['rehearsal']['stands_for']}, ran on "
                      f"{p['rehearsal']['ran_on']}")
    out += [f"- cap {cap} MB: distlab overlap step rate {ratio:.3f} x torch DDP"
            for cap, ratio in p["rate_vs_torch"].items()]
    # the overlap column is derived from the stored exposed times (profiles measured before the
    # definition was fixed stored another number there)
    out.append(f"- {OVERLAP_DEFINITION}")
    return out + ["", "```", format_table(with_overlap(p["rows"]), DDP_COLUMNS), "```", ""]


_HEADLINES = {"env": _env, "transfers": _transfers, "gpus": _gpus, "collectives": _collectives,
              "ddp": _ddp}


def headlines(name: str, part: dict[str, Any]) -> list[str]:
    """Markdown bullet lines for one part's JSON (``status`` ok) or its skip/fail reason."""
    if part.get("status") != "ok":
        return [f"- {part.get('status')}: {part.get('reason') or 'no reason given'}"]
    return _HEADLINES[name](part)


def summary_markdown(index: dict[str, Any], parts: dict[str, dict[str, Any]]) -> str:
    """``summary.md``: title, completeness, the verdict (what is low leads: :mod:`.expected`),
    one section per part, the skipped list."""
    prov = index["provenance"]
    state = "complete" if index["complete"] else f"INCOMPLETE ({index.get('stopped', 'stopped')})"
    title = f"# Profile of {prov['host']} ({prov['date']})"
    if index.get("rehearsal"):
        title += f", a REHEARSAL of box {index['rehearsal']}"
    lines = [title, "",
             f"{state}; command `{prov['command']}`; GB/s = 1e9 B/s; measured on a machine "
             "others may share (see provenance).", "", "## verdict",
             *low_lines(profile_verdicts(parts)), ""]
    for name, entry in index["parts"].items():
        lines.append(f"## {name}")
        lines += headlines(name, parts[name]) if name in parts else \
            [f"- {entry['status']}: {entry.get('reason', '')}"]
        lines.append("")
    skipped = [s for p in parts.values() for s in p.get("skipped", [])]
    if skipped:
        lines.append("## skipped here")
        lines += [f"- {s['what']}: {s['why']}" for s in skipped]
        lines.append("")
    return "\n".join(lines)
