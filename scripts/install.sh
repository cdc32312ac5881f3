#!/usr/bin/env bash
# Install WorldPager into the current Python environment with the torch build this machine can use.
#
# A plain `pip install -e .` takes torch's default wheel, which on Linux is the CUDA build: on a machine
# without an NVIDIA GPU that is several GB of CUDA libraries it never uses. This script installs torch's
# CPU-only build first when no NVIDIA GPU is visible (no `nvidia-smi` that lists one) and torch is not
# installed yet, then WorldPager itself (editable, with any extras given: `scripts/install.sh test`).
#
#   scripts/install.sh [EXTRA ...] [--dry-run]     --dry-run: print the pip commands, run nothing
#   WORLDPAGER_TORCH=cpu|cuda scripts/install.sh   choose the build instead of detecting it
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
dry=0
extras=()
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry=1 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "install.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) extras+=("$arg") ;;
  esac
done

run() {
  echo "+ $*" >&2
  [ "$dry" = 1 ] || "$@"
}

has_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

build=${WORLDPAGER_TORCH:-}
if [ -z "$build" ]; then
  if has_gpu; then build=cuda; else build=cpu; fi
fi
case "$build" in cpu|cuda) ;; *) echo "install.sh: WORLDPAGER_TORCH must be cpu or cuda, got '$build'" >&2; exit 2 ;; esac

if "$python" -c "import torch" >/dev/null 2>&1; then
  echo "install.sh: torch $("$python" -c 'import torch; print(torch.__version__)') is already installed; keeping it" >&2
elif [ "$build" = cpu ]; then
  echo "install.sh: no NVIDIA GPU found: installing torch's CPU-only build (no CUDA libraries)" >&2
  run "$python" -m pip install torch --index-url https://download.pytorch.org/whl/cpu
else
  echo "install.sh: an NVIDIA GPU found: torch's CUDA build comes with WorldPager's requirements" >&2
fi

target=.
if [ "${#extras[@]}" -gt 0 ]; then
  target=".[$(IFS=,; echo "${extras[*]}")]"
fi
run "$python" -m pip install -e "$target"
