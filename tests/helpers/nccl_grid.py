"""The NCCL cost model's outputs over a grid, as plain JSON: the golden values that keep the
per-size pipeline from drifting (``tests/collectives/model/test_model_nccl_golden.py``).

Every float is kept exactly: JSON writes a float as Python's ``repr``, which reads back to the
same bits. Only public calls of the model are used, so the same grid runs on any refactoring of
its insides.

    python tests/helpers/nccl_grid.py OUT.json            # the small grid
    python tests/helpers/nccl_grid.py --full OUT.json     # every box x size x release x network,
                                                          # the refit, the judge command's output
    python tests/helpers/nccl_grid.py --golden OUT.json   # the small grid's digests (stored)
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

from distlab.collectives.model.predict import predict_builtin
from distlab.nccl.boxes import GPU_BOXES
from distlab.nccl.execution import HARNESSES, nccl_execution
from distlab.nccl.family import FAMILY as COLLECTIVES
from distlab.nccl.family import nccl_collective
from distlab.nccl.multinode import NETWORKS
from distlab.nccl.tuning import nccl_allreduce, tuning_table
from distlab.nccl.versions import NCCL_CONSTANTS, NcclReleaseWarning

TERMS = ("algorithm", "protocol", "channels", "channels_total", "threads", "chunk_bytes",
         "steps", "host_us", "latency_us", "transfer_us", "sync_us", "estimate_us", "serial")
"""The fields of one execution, in the order a row stores them (then seconds and busbw)."""


def _row(e: Any) -> list[Any]:
    return [getattr(e, k) for k in TERMS] + [e.seconds, e.busbw_gbps]


def _sizes(full: bool) -> list[int]:
    """1 KiB to 8 GiB: every power of two (full) or every factor 4, and two odd sizes."""
    step = 1 if full else 2
    return [1 << k for k in range(10, 34, step)] + [1000003, 3 * (1 << 27) + 5]


def _world_sizes(box: str, full: bool) -> list[int]:
    gpus = GPU_BOXES[box].gpus
    if gpus <= 8:
        return list(range(2, gpus + 1)) if full else sorted({2, 3, gpus})
    picks = {2, 4, 8, 16, 36, 72} if full else {2, 8, gpus}
    return sorted(w for w in picks if w <= gpus)


def _quiet(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(...)``, or the error's type and message where it refuses (refusals are part of the
    contract too)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NcclReleaseWarning)
        try:
            return fn(*args, **kwargs)
        except (ValueError, TypeError) as err:
            return {"error": f"{type(err).__name__}: {err}"}


def _executions(fn: Any, *args: Any, **kwargs: Any) -> Any:
    out = _quiet(fn, *args, **kwargs)
    return out if isinstance(out, dict) else [_row(e) for e in out]


def one_node(full: bool) -> dict[str, Any]:
    """``nccl_execution`` on one node: box x world size x harness x release, and a few forced
    algorithms and protocols."""
    sizes = _sizes(full)
    releases = [*NCCL_CONSTANTS, "2.25.1", "2.17.1"] if full else list(NCCL_CONSTANTS)
    out: dict[str, Any] = {}
    for box in GPU_BOXES:
        for n in _world_sizes(box, full):
            for harness in HARNESSES:
                versions = releases if (full or harness == "torch") else [None]
                for v in versions:
                    out[f"{box}|{n}|{harness}|{v}"] = _executions(
                        nccl_execution, box, n, sizes, harness=harness, nccl_version=v)
            for algos, protos in ((["ring"], None), (["tree"], None), (["nvls"], None),
                                  (None, ["LL"]), (None, ["LL128"]), (["ring", "tree"],
                                                                      ["Simple"])):
                out[f"{box}|{n}|torch|{algos}|{protos}"] = _executions(
                    nccl_execution, box, n, sizes, algorithms=algos, protocols=protos)
    box = GPU_BOXES["h100_sxm8"]  # a GpuBox itself, not its name
    out["GpuBox h100_sxm8|8"] = _executions(nccl_execution, box, 8, sizes)
    return out


def multi_node(full: bool) -> dict[str, Any]:
    """``nccl_execution`` across nodes: box x nodes x network x harness x release."""
    sizes = _sizes(full)
    out: dict[str, Any] = {}
    nodes_list = (2, 3, 4, 8, 16) if full else (2, 4)
    networks = list(NETWORKS) if full else ["ib_ndr400x8", "efa400", "tcp100",
                                             "ib_ndr400_nvl72"]
    for box in GPU_BOXES:
        gpus = GPU_BOXES[box].gpus
        for nodes in nodes_list:
            for net in networks:
                for harness in HARNESSES:
                    versions = list(NCCL_CONSTANTS) if (full or harness == "torch") else [None]
                    if not full and box not in ("h100_sxm8", "b200_sxm8", "gb200_nvl72"):
                        versions = [None]
                    for v in versions:
                        for ppn in sorted({gpus, 1} if full else {gpus}):
                            out[f"{box}|{nodes}x{ppn}|{net}|{harness}|{v}"] = _executions(
                                nccl_execution, box, nodes * ppn, sizes, nodes=nodes,
                                network=net, harness=harness, nccl_version=v)
                for algos in (["ring"], ["tree"], ["nvls_tree"]):
                    out[f"{box}|{nodes}|{net}|{algos}"] = _executions(
                        nccl_execution, box, nodes * gpus, sizes, nodes=nodes, network=net,
                        algorithms=algos)
    return out


def family(full: bool) -> dict[str, Any]:
    """``nccl_collective``: box x world size x collective x harness."""
    sizes = _sizes(full)
    out: dict[str, Any] = {}
    for box in GPU_BOXES:
        for n in _world_sizes(box, full):
            for c in COLLECTIVES:
                for harness in HARNESSES:
                    res = _quiet(nccl_collective, box, n, sizes, c, harness=harness)
                    out[f"{box}|{n}|{c}|{harness}"] = res if isinstance(res, dict) else [
                        [*_row(r), r.collective] for r in res]
    return out


def estimates(full: bool) -> dict[str, Any]:
    """NCCL's own estimate (``nccl_allreduce``, ``tuning_table``) and ``predict_builtin``."""
    sizes = _sizes(full)
    out: dict[str, Any] = {}
    for box in GPU_BOXES:
        for n in _world_sizes(box, full):
            for v in NCCL_CONSTANTS:
                ch = _quiet(nccl_allreduce, box, n, sizes, nccl_version=v)
                out[f"choice|{box}|{n}|{v}"] = ch if isinstance(ch, dict) else [
                    [c.algorithm, c.protocol, c.seconds, [list(asdict(k).values())
                                                          for k in c.candidates]] for c in ch]
                out[f"table|{box}|{n}|{v}"] = [list(asdict(e).values())
                                               for e in tuning_table(box, n, nccl_version=v)]
            for model in ("estimate", "measured"):
                out[f"builtin|{box}|{n}|{model}"] = _quiet(
                    predict_builtin, box, n, sizes, nccl_model=model)
            out[f"builtin|{box}|1|measured"] = _quiet(predict_builtin, box, 1, sizes,
                                                      nccl_model="measured")
        out[f"builtin|{box}|2x|ib_ndr400x8"] = _quiet(
            predict_builtin, box, 2 * GPU_BOXES[box].gpus, sizes, nodes=2,
            network="ib_ndr400x8")
        out[f"builtin|{box}|2x|ib_ndr400x8|measured"] = _quiet(
            predict_builtin, box, 2 * GPU_BOXES[box].gpus, sizes, nodes=2,
            network="ib_ndr400x8", nccl_model="measured")
    return out


def fitted() -> dict[str, Any]:
    """The refit on every published table, and each published point judged with it."""
    from distlab.evidence.nccl import fit_execution as fx

    c = fx.refit(fx.calibration_points())
    judged = (fx.judge(fx.calibration_points(), c) + fx.judge(fx.multinode_points(), c)
              + fx.judge_collectives(fx.collective_points(), c))
    return {"refit": asdict(c),
            "judged": [[j.source, j.system, j.nbytes, j.published_us, j.error_pct,
                        _row(j.execution)] for j in judged]}


def command(argv: list[str]) -> str:
    """What ``python -m distlab.judge nccl ARGV`` prints."""
    from distlab.judge.nccl_command import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        main(argv)
    return buf.getvalue()


def grid(full: bool = False) -> dict[str, Any]:
    """Everything above, keyed by part."""
    out = {"one_node": one_node(full), "multi_node": multi_node(full), "family": family(full),
           "estimates": estimates(full)}
    if full:
        out["fitted"] = fitted()
        out["commands"] = {" ".join(a): command(a) for a in (
            ["--published"], ["--boxes"], ["h100_sxm8"], ["b200_sxm8", "--nccl-version", "2.30"],
            ["h100_sxm8", "--nodes", "4", "--network", "ib_ndr400x8"],
            ["h100_sxm8", "--collective", "all_gather"], ["gb200_nvl72", "--sizes", "1M,1G"])}
    return out


def digest(value: Any) -> str:
    """A short fingerprint of one case's outputs: sha256 of its compact JSON (floats as
    ``repr``, so one bit of one float changes it), 16 hex digits."""
    text = json.dumps(value, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def digests(data: dict[str, Any]) -> dict[str, str]:
    """``{"part|case": digest}`` of every case of :func:`grid`'s result."""
    return {f"{part}|{key}": digest(value) for part, cases in data.items()
            for key, value in cases.items()}


WITNESSES = ("one_node|h100_sxm8|8|torch|2.28", "multi_node|h100_sxm8|4x8|ib_ndr400x8|torch|2.28",
             "family|h100_sxm8|8|all_gather|torch", "one_node|gb200_nvl72|72|torch|2.30")
"""Cases stored whole beside the digests, so a drift there shows its numbers."""


def golden() -> dict[str, Any]:
    """What ``tests/collectives/model/data/nccl_golden.json`` holds: the small grid's digests
    and the :data:`WITNESSES` in full."""
    data = grid(full=False)
    flat = {f"{part}|{key}": value for part, cases in data.items()
            for key, value in cases.items()}
    return {"about": "Outputs of the NCCL model over tests/helpers/nccl_grid.py's small grid, "
                     "from the code before the per-size pipeline was shared: a "
                     "sha256 prefix per case and a few cases whole. Regenerate only for a "
                     "change meant to move the numbers: python tests/helpers/nccl_grid.py "
                     "--golden tests/collectives/model/data/nccl_golden.json",
            "digests": digests(data), "witnesses": {k: flat[k] for k in WITNESSES}}


if __name__ == "__main__":
    target = Path(sys.argv[-1])
    if "--golden" in sys.argv[1:]:
        body = json.dumps(golden(), indent=0, sort_keys=True)
    else:
        body = json.dumps(grid(full="--full" in sys.argv[1:]), separators=(",", ":"))
    target.write_text(body + "\n")
    print(f"wrote {target} ({target.stat().st_size} bytes)")
