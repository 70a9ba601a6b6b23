"""Every box, network and NCCL release the model knows, where its constants come from and how it
was judged (a report module; ``python -m distlab.nccl --boxes``).

For each GPU box (:data:`~distlab.nccl.boxes.GPU_BOXES`), network
(:data:`~distlab.nccl.multinode.NETWORKS`) and release
(:data:`~distlab.nccl.versions.NCCL_CONSTANTS`): the published tables that judge
it, their points, and the median and 90th percentile of the absolute time error. One-node tables
are judged leave-one-source-out (each source priced with constants fitted on the others: the
same judgement as ``python -m distlab.judge nccl --published``); multi-node tables are judged out
of sample (no constant is fitted on them). "-" where no published table judges it: the constants
are NCCL's and the vendor's, and nothing says how close the model comes there. Nothing is
measured.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distlab.nccl.boxes import GPU_BOXES, NCCL_TAG
from distlab.nccl.multinode import NETWORKS
from distlab.nccl.versions import NCCL_CONSTANTS, resolve_nccl_version
from distlab.report.jsonfile import write_json
from distlab.report.table import Column, format_table
from distlab.vocabulary import ErrorSummary

__all__ = ["CANNOT_PRICE", "Judged", "boxes_lines", "boxes_report"]

CANNOT_PRICE = (
    "NCCL with CollNet (NCCL_COLLNET_ENABLE=1 and the SHARP plugin): CollNet Direct / Chain and "
    "NVLS with SHARP are not modelled; ib_ndr400x8_sharp prices NCCL's default run",
    "PAT (one GPU per node) and NCCL's symmetric-memory kernels (2.27+, registered buffers)",
    "a PCIe box whose path NCCL credits below its lowest speed (e.g. RTX PRO 6000 across two AMD "
    "sockets: 16 GB/s against Blackwell's 18): NCCL falls back to a 0.1 GB/s search graph",
    "P2P off (consumer GPUs, NCCL_P2P_DISABLE): the SHM transport through host memory is priced "
    "as if P2P ran on the same paths",
    "GB200 racks joined by a network: priced with one NVLink domain as one node, as NCCL does, "
    "but NVLS-Tree's loss with the number of racks is not modelled (CoreWeave's 2 and 20 racks "
    "take more time than the model, the more so the more racks: `python -m distlab.judge nccl "
    "--published`); both move about 400 GB/s per rack each way (a tree sends D per node on 2 "
    "nodes, 2D from 4 on: NCCL's src/graph/trees.cc); what sets that rate (the NICs NCCL's "
    "MNNVL NVLS heads drive, or the fabric) was not found, nor what one rack adds (0.6-0.9 ms "
    "at 512 MiB-4 GiB)",
    "AWS EFA from 64 KiB to 16 MiB beyond what aws-ofi-nccl states (NCCL_PROTO=simple on p4d / "
    "p4de, the 128 KiB stripe threshold and 512 KiB NVLS chunk on p5 are priced): p5's 1.4-1.6x "
    "and p4de's rest need the plugin's per-message cost (the receiver's control message before "
    "an RDMA write over 8 KiB; libfabric's long-message protocols on EFA v1), not a figure in "
    "any source; EFA v1's rate at 1 GiB (2 x p4dn: 61% of 4 x 100 Gb/s) likewise",
    "NVLS-Tree across nodes below 16 MiB where it runs many small messages: Blackwell's 32 NVLS "
    "channels x 8 heads (B200 over InfiniBand, 512 KiB-16 MiB, 1.4-2.3x) and Hopper from 4 "
    "nodes (2-8 MiB, 1.2-2.2x): the proxy thread's cost per network message is not in NCCL's "
    "source",
    "per-release terms across nodes other than the Blackwell rows; the topology search of "
    "releases before 2.28 (2.28.9's is used)",
    "AMD GPUs (MI300X, MI325X, MI355X): torch's nccl backend is RCCL there, priced by its own "
    "model: `python -m distlab.rccl --boxes` lists those boxes, their NICs and what it prices",
)
"""What the model cannot price, in one line each (the report's last lines)."""


@dataclass(frozen=True)
class Judged:
    """How one thing was judged: ``tables`` published tables, ``points`` points, the median and
    90th percentile of absolute time error, percent (None without a table)."""

    tables: int
    points: int
    median_pct: float | None
    p90_pct: float | None

    @classmethod
    def of(cls, judged: Sequence[Any]) -> Judged:
        """From :class:`~distlab.evidence.nccl.fit_execution.JudgedPoint` s."""
        if not judged:
            return cls(0, 0, None, None)
        s = ErrorSummary.of(j.error_pct for j in judged)
        return cls(len({j.system for j in judged}), s.n, s.median, s.p90)

    def row(self) -> dict[str, Any]:
        """The columns :func:`boxes_lines` shows."""
        return {"tables": self.tables, "points": self.points, "median": self.median_pct,
                "p90": self.p90_pct}


def _group(judged: Iterable[Any], key_of: dict[str, str]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for j in judged:
        out.setdefault(key_of[j.system], []).append(j)
    return out


def boxes_report() -> dict[str, Any]:
    """Every box, network and release with its source and judgement (JSON-ready)."""
    from distlab.evidence.nccl import fit_execution as fx

    single = fx.calibration_points()
    multi = fx.multinode_points()
    loso = fx.leave_one_source_out(single)
    out_multi = fx.judge(multi, fx.shipped_constants())
    box_of = {str(p["system"]): fx.box_of(p) for p in single + multi}
    net_of = {str(p["system"]): str(p.get("network") or "none") for p in multi}
    release_of = {str(p["system"]): _release_of(p.get("nccl_version")) for p in single + multi}
    one, across = _group(loso, box_of), _group(out_multi, box_of)
    by_net, by_release = _group(out_multi, net_of), _group([*loso, *out_multi], release_of)
    boxes = [{"key": k, "name": b.name, "gpus": b.gpus, "sm": b.sm,
              "nccl_link_gbps": round(b.nccl_link_gbps, 1), "path": b.path,
              "source": b.link_source, "one_node": Judged.of(one.get(k, [])).row(),
              "multi_node": Judged.of(across.get(k, [])).row()} for k, b in GPU_BOXES.items()]
    nets = [{"key": k, "name": n.name, "nic_gbps": n.nic_gbps, "rails": n.rails,
             "nccl_devices": "{} x {:g}".format(*n.nccl_devices()),
             "plugin_latency_us": n.plugin_latency_us, "hop_floor_us": n.hop_floor_us,
             "source": n.source, **Judged.of(by_net.get(k, [])).row()}
            for k, n in NETWORKS.items()]
    releases = [{"key": k, "tag": v.tag, "source": f"NVIDIA/nccl {v.tag} (versions.py's table)",
                 **Judged.of(by_release.get(v.release, [])).row()}
                for k, v in NCCL_CONSTANTS.items()]
    return {"nccl_tag": NCCL_TAG, "boxes": boxes, "networks": nets, "releases": releases,
            "cannot_price": list(CANNOT_PRICE)}


def _release_of(stated: Any) -> str:
    """The modelled release a table's stated NCCL is priced with; "not stated" for None."""
    if not stated:
        return "not stated"
    return resolve_nccl_version(str(stated)).priced_as


_JUDGED = (Column("tables", "tables", "", missing="0"), Column("pts", "points", "", missing="0"),
           Column("med %", "median", ".1f"), Column("p90 %", "p90", ".0f"))


def boxes_lines(report: dict[str, Any] | None = None) -> list[str]:
    """:func:`boxes_report` as text: three tables, then each one's sources, then what the model
    cannot price."""
    r = boxes_report() if report is None else report
    box_rows = [{**b, "one": "", **{f"1{k}": v for k, v in b["one_node"].items()},
                 **{f"n{k}": v for k, v in b["multi_node"].items()}} for b in r["boxes"]]
    box_cols = (Column("box", "key"), Column("GPUs", "gpus", ""), Column("sm", "sm", ""),
                Column("NCCL GB/s", "nccl_link_gbps", ".1f"), Column("path", "path"),
                *(Column(f"1 box: {c.header}" if i == 0 else c.header, f"1{c.key}", c.spec,
                         missing=c.missing) for i, c in enumerate(_JUDGED)),
                *(Column(f"beyond: {c.header}" if i == 0 else c.header, f"n{c.key}", c.spec,
                         missing=c.missing) for i, c in enumerate(_JUDGED)))
    lines = [f"# GPU boxes (NCCL's constants: NVIDIA/nccl {r['nccl_tag']} and the releases below)",
             "# 1 box: its 8-GPU tables, judged leave-one-source-out; beyond: nodes, GB200 racks",
             "# and hosts (allreduce_multinode), judged out of sample. sm: the GPUs' compute",
             "# capability x 10 (NCCL's tuning reads it); NCCL GB/s: one GPU's bandwidth in NCCL's",
             "# graph; path: NCCL's path between two GPUs (NVL NVLink, PCI a PCIe switch, SYS",
             "# across the CPUs' interconnect); each box's GPU under 'where each constant comes",
             "# from'",
             *format_table(box_rows, box_cols).splitlines(),
             "# networks (multi-node tables, out of sample); as NCCL: its devices x GB/s (merged",
             "# ports, a plugin's rails; 2.28.9), plugin us: the latency a plugin reports (NCCL's",
             "# choice), hop us: the transport's own hop where longer than NCCL's (the run);",
             "# '-': no plugin, no longer hop",
             *format_table([{**n, "plugin_latency_us": n["plugin_latency_us"] or None,
                             "hop_floor_us": n["hop_floor_us"] or None} for n in r["networks"]],
                           (Column("network", "key"), Column("NIC GB/s", "nic_gbps", ".1f"),
                            Column("NICs", "rails", ""), Column("as NCCL", "nccl_devices"),
                            Column("plugin us", "plugin_latency_us", ".0f", missing="-"),
                            Column("hop us", "hop_floor_us", ".0f", missing="-"),
                            *_JUDGED)).splitlines(),
             "# NCCL releases (the tables that state one, 1 node and across nodes; a release",
             "# the model does not hold is priced with its neighbour)",
             *format_table(r["releases"], (Column("release", "key"), Column("tag", "tag"),
                                           *_JUDGED)).splitlines(),
             "# where each constant comes from"]
    for item in (*r["boxes"], *r["networks"]):
        name = f" ({item['name']})" if "name" in item else ""
        lines += textwrap.wrap(f"{item['key']}{name}: {item['source']}", 100,
                               initial_indent="  ", subsequent_indent="      ")
    lines.append("# what the model cannot price")
    for c in r["cannot_price"]:
        lines += textwrap.wrap(c, 100, initial_indent="  - ", subsequent_indent="    ")
    return lines


def print_boxes(json_out: Path | None = None) -> None:
    """``--boxes`` of ``python -m distlab.nccl`` and ``python -m distlab.judge nccl``: print
    :func:`boxes_lines` and, given ``json_out``, write :func:`boxes_report` there."""
    report = boxes_report()
    print("\n".join(boxes_lines(report)))
    if json_out is not None:
        write_json(json_out, report)
