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
#   INSTALL_DRY_RUN  a path: bring pip up to date as below, then only resolve what would be
#                  installed (pip --dry-run) and write pip's JSON report there; nothing else is
#                  installed (tests/test_install.py runs this against an old pip).
# An installed torch is never replaced: if one imports, it stays, whatever the pin says, unless
# TORCH_FORCE=1 asks to install the pin over it.
#
# pip first. A pip older than PIP_MIN backtracks for more than 20 minutes on constraints.txt
# ("pip is looking at multiple versions of ..."): Debian 12's python3 brings pip 23.0.1, and a
# venv made from it gets that pip; pip 23.2.1 resolves the same install in seconds. So:
#   - the project venv ($VENV, made or reused here) has pip, setuptools and wheel upgraded in
#     place before anything is installed: distlab owns it;
#   - an environment the user made (an active venv, a conda env, conda's base included) keeps
#     its own pip: a newer pip runs from a temporary folder for this install only. Replacing
#     conda's pip with pip's own leaves conda's records wrong, and a venv's pip is its owner's
#     to change; one line says which pip ran and how to upgrade the environment's own.
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
if [[ -z "${INSTALL_DRY_RUN:-}" && "$STACK" == "tested" && -f "$stamp" \
      && "$(cat "$stamp")" == "$want" ]] && "$PY" -c 'import distlab, torch' 2>/dev/null; then
  exit 0
fi

PIP_MIN="23.2"
side_pip=""   # a folder holding a newer pip for an environment distlab did not make
pip_() { PYTHONPATH="$side_pip${PYTHONPATH:+${side_pip:+:}$PYTHONPATH}" \
  "$PY" -m pip --disable-pip-version-check "$@"; }
pip_version() { pip_ --version 2>/dev/null | awk '{print $2}'; }
pip_is_recent() {  # the pip pip_ runs is PIP_MIN or newer
  PYTHONPATH="$side_pip${PYTHONPATH:+${side_pip:+:}$PYTHONPATH}" "$PY" - "$PIP_MIN" <<'PY'
import re, sys
import pip
have = tuple(int(x) for x in re.findall(r"\d+", pip.__version__)[:2])
need = tuple(int(x) for x in sys.argv[1].split("."))
sys.exit(0 if have >= need else 1)
PY
}
if ! "$PY" -c 'import pip' 2>/dev/null; then
  echo "install: $PY has no pip (a conda env: conda install pip; a venv: $PY -m ensurepip)" >&2
  exit 1
fi
if ! pip_is_recent; then
  old="$(pip_version)"
  if [[ "$PY" == "$VENV/bin/python" ]]; then
    echo "install: upgrading pip $old in $VENV (older than $PIP_MIN, whose resolver takes constraints.txt in seconds) with setuptools and wheel, before anything else"
    pip_ install --quiet --upgrade "pip>=$PIP_MIN" "setuptools>=68" wheel
  else
    side_pip="$(mktemp -d "${TMPDIR:-/tmp}/distlab-pip.XXXXXX")"
    trap 'rm -rf "$side_pip"' EXIT
    pip_ install --quiet --target "$side_pip" "pip>=$PIP_MIN"
    echo "install: this environment's pip $old is older than $PIP_MIN (it backtracks for many minutes on constraints.txt); installing with pip $(pip_version) from a temporary folder and leaving the environment's own pip as it is (to upgrade it yourself: conda install 'pip>=$PIP_MIN' in a conda env, $PY -m pip install -U pip in a venv)"
  fi
  if ! pip_is_recent; then
    echo "install: pip is still $(pip_version), older than $PIP_MIN; upgrade it and run again" >&2
    exit 1
  fi
fi

if [[ -n "${INSTALL_DRY_RUN:-}" ]]; then
  want_torch=()
  if [[ "$TORCH_VERSION" != "keep" ]] && ! "$PY" -c 'import torch' 2>/dev/null; then
    want_torch=("torch==$TORCH_VERSION")
  fi
  constrain=()
  [[ "$STACK" == "tested" ]] && constrain=(-c "$CONSTRAINTS")
  echo "install: resolving only (INSTALL_DRY_RUN) with pip $(pip_version): report in $INSTALL_DRY_RUN"
  pip_ install --dry-run --quiet --report "$INSTALL_DRY_RUN" ${want_torch[@]+"${want_torch[@]}"} \
    -e ".[test]" ${constrain[@]+"${constrain[@]}"}
  exit 0
fi

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
  tv="$("$PY" -c 'import torch; from distlab.loading.image_stages import matching_torchvision as m; print(m(torch.__version__))' 2>/dev/null || true)"
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
