#!/usr/bin/env bash
# Install distlab and its test tools into one Python environment.
#
# Called by `make install` (and so by `make lab` / `make test`) with:
#   PY             the interpreter of the target environment (an active venv/conda env, or $VENV)
#   VENV           where to create a project venv when no environment is active (default .venv)
#   TORCH_VERSION  torch pin installed first when the environment has no torch (default 2.13.0);
#                  "keep" never installs torch (the environment must already have one).
#   STACK          "tested" (default): the notebook and test stack at the exact versions of
#                  constraints.txt (tools/constraints.py); "latest": the newest releases instead.
# An installed torch is never replaced: if one imports, it stays, whatever the pin says, unless
# TORCH_FORCE=1 asks to install the pin over it.
set -euo pipefail
: "${PY:?PY must name the target interpreter}"
VENV="${VENV:-.venv}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
STACK="${STACK:-tested}"
CONSTRAINTS="constraints.txt"
if [[ "$STACK" != "tested" && "$STACK" != "latest" ]]; then
  echo "install: STACK must be tested or latest, got '$STACK'" >&2; exit 2
fi
if [[ "$STACK" == "tested" && ! -f "$CONSTRAINTS" ]]; then
  echo "install: $CONSTRAINTS is missing (STACK=latest installs without it)" >&2; exit 2
fi

if [[ ! -x "$PY" ]]; then
  if [[ "$PY" != "$VENV/bin/python" ]]; then
    echo "install: $PY does not exist (is the active environment broken?)" >&2; exit 1
  fi
  base="$(command -v python3 || command -v python)"
  echo "install: creating virtual environment $VENV with $base"
  "$base" -m venv "$VENV"
fi

stamp_dir="$("$PY" -c 'import sys; print(sys.prefix)')"
stamp="$stamp_dir/.distlab-install-stamp"
want="$( (cat pyproject.toml "$CONSTRAINTS" 2>/dev/null; echo "torch=$TORCH_VERSION stack=$STACK"; pwd) | sha256sum | cut -d' ' -f1)"
# STACK=latest asks the registry every time: today's newest may be newer than yesterday's.
if [[ "$STACK" == "tested" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
    && "$PY" -c 'import distlab, torch' 2>/dev/null; then
  exit 0
fi

pip_() { "$PY" -m pip --disable-pip-version-check "$@"; }

have_torch="$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)"
if [[ -n "$have_torch" && "${TORCH_FORCE:-0}" != "1" ]]; then
  echo "install: keeping the installed torch $have_torch"
elif [[ "$TORCH_VERSION" == "keep" ]]; then
  echo "install: TORCH_VERSION=keep but this environment has no torch" >&2; exit 1
else
  echo "install: installing torch==$TORCH_VERSION first"
  pip_ install "torch==$TORCH_VERSION"
fi

# Any torch that is installed now satisfies the project's unpinned "torch>=2.1", so this does
# not touch it (no --upgrade, no --force-reinstall).
if [[ "$STACK" == "tested" ]]; then
  echo "install: installing distlab (editable) with its test tools at the tested versions ($CONSTRAINTS)"
  pip_ install -e ".[test]" -c "$CONSTRAINTS"
else
  echo "install: installing distlab (editable) with the newest releases of its test tools (STACK=latest)"
  pip_ install -e ".[test]"
  # --upgrade of the stack's names only: torch and what only torch needs are never named.
  if [[ -f "$CONSTRAINTS" ]]; then
    mapfile -t names < <("$PY" tools/constraints.py names)
    pip_ install --upgrade --upgrade-strategy only-if-needed "${names[@]}"
  fi
fi
"$PY" - <<'PY'
import torch, distlab
print(f"install: ok: distlab {distlab.__version__}, torch {torch.__version__}")
from distlab.collectives.runtime import compiled
print("install: building distlab's compiled plan executor (about a minute, once)", flush=True)
print(f"install: collectives executor: {compiled.status()}")
PY
# torchvision (the image lab's second decoder and its GPU path) at the release built for the
# torch installed above, without its dependencies (--no-deps: it never touches torch). Kept only
# if it imports beside that torch: a CPU torch from the PyTorch index has no CPU torchvision on
# PyPI (PyPI's is built for PyPI's CUDA torch and fails with "operator torchvision::nms does not
# exist"), so there it is removed again and the image stages say, in one line, that it is absent.
# TORCHVISION=skip leaves torchvision alone.
tv_imports() { "$PY" -c 'import torchvision.io' >/dev/null 2>&1; }
if [[ "${TORCHVISION:-auto}" == "skip" ]]; then
  echo "install: TORCHVISION=skip: torchvision left as it is"
elif tv_imports; then
  echo "install: keeping the installed torchvision $("$PY" -c 'import torchvision; print(torchvision.__version__)')"
else
  tv="$("$PY" -c 'import torch; from distlab.pipeline.image_stages import matching_torchvision as m; print(m(torch.__version__))' 2>/dev/null || true)"
  if [[ -z "$tv" ]]; then
    echo "install: no torchvision release is known to match this torch; the image lab decodes with Pillow"
  elif pip_ install --quiet --no-deps "torchvision==$tv" && tv_imports; then
    echo "install: torchvision $tv installed (the release built for this torch)"
  else
    "$PY" -m pip --disable-pip-version-check uninstall --quiet -y torchvision >/dev/null 2>&1 || true
    echo "install: torchvision $tv does not import beside torch $("$PY" -c 'import torch; print(torch.__version__)'); removed again: the image lab decodes with Pillow and says why torchvision is absent"
  fi
fi
echo "$want" > "$stamp"
