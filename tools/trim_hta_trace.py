"""Trim one of HolisticTraceAnalysis's test traces to what pricing its NCCL kernels needs.

    python tools/trim_hta_trace.py HTA_TRACE.json.gz OUT.json.gz

Keeps the trace's metadata (``schemaVersion``, ``deviceProperties``, ``distributedInfo``), every
``nccl:<collective>`` annotation span (category ``user_annotation``), every NCCL GPU kernel, and
the CUDA runtime launch each kernel's ``correlation`` names: what ``python -m distlab.judge
trace`` links to read each kernel's size from its span (``distlab.trace.annotations``). Every kept
event is written as it was. Used for ``results/traces/hta_a100_a2a_*`` (README there: the HTA
commit and paths).
"""

from __future__ import annotations

import gzip
import json
import sys


def trim(src: str, dst: str) -> tuple[int, int]:
    """Write the trimmed trace of ``src`` to ``dst``; returns (events read, events kept)."""
    with gzip.open(src, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "nccl" in e.get("name", "")]
    corr = {e.get("args", {}).get("correlation") for e in kernels}
    kept = [e for e in events
            if (e.get("cat") == "user_annotation" and e.get("name", "").startswith("nccl:"))
            or e in kernels
            or (e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in corr)]
    out = {k: v for k, v in doc.items() if k in ("schemaVersion", "deviceProperties",
                                                 "distributedInfo")}
    out["traceEvents"] = kept
    with gzip.open(dst, "wt") as fh:
        json.dump(out, fh)
    return len(events), len(kept)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python tools/trim_hta_trace.py HTA_TRACE.json.gz OUT.json.gz",
              file=sys.stderr)
        sys.exit(2)
    read, kept = trim(sys.argv[1], sys.argv[2])
    print(f"{sys.argv[2]}: {kept} of {read} events kept")
