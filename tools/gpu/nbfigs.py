"""Execute a notebook on a fresh kernel (env SMOKE as set) and save every PNG output.
usage: nbfigs.py NB OUTDIR"""
import base64
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

nbp, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
nb = nbformat.read(nbp, as_version=4)
t0 = time.time()
NotebookClient(nb, timeout=900, kernel_name="python3",
               resources={"metadata": {"path": str(nbp.parent)}}).execute()
print(f"executed {nbp.name} in {time.time() - t0:.0f} s")
for i, c in enumerate(nb.cells):
    if c.cell_type != "code":
        continue
    k = 0
    for o in c.get("outputs", []):
        if o.get("output_type") == "error":
            print("ERROR cell", i, o["ename"], o["evalue"][:400])
        data = o.get("data", {})
        if "image/png" in data:
            k += 1
            (out / f"{nbp.stem}_c{i}_{k}.png").write_bytes(base64.b64decode(data["image/png"]))
        if "text/plain" in data and o.get("output_type") == "execute_result":
            pass
        if o.get("output_type") == "stream" and os.environ.get("SHOW_TEXT"):
            print(f"--- cell {i} stream\n" + o["text"][:3000])
print(sorted(p.name for p in out.glob(f"{nbp.stem}_*.png")))
