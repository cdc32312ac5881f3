#!/bin/sh
# Train the arena model on a CUDA device for a number of minutes (docs/arena_model.md, "Training on a
# device"): from the packaged weights, batch 32, batches rendered by worker processes; the fp16 weights
# (arena.safetensors), the training log (train.log.jsonl) and a summary (device_train.json) go to $OUT
# (./device_train/ without $OUT). The checkpoint with the optimiser stays in $WORK (/tmp/arena-train):
# a later run with the same WORK resumes it. Needs python3 with torch, numpy, safetensors and tqdm; no
# network, no PyAV.
#
#   OUT=/path sh scripts/device_train.sh 8          # 8 minutes of training (the default)
#   sh scripts/device_train.sh --dry-run            # the same path on the CPU in seconds (CI runs this)
# Other arguments go to `python3 -m engine.arena.device_train` (--batch, --lr, --workers, --init).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out="${OUT:-$PWD/device_train}"
work="${WORK:-/tmp/arena-train}"
case "${1:-}" in
    --dry-run) work="${WORK:-$(mktemp -d)}"; trap 'rm -rf "$work"' EXIT ;;
    ''|-*) ;;
    *) first="$1"; shift; set -- --minutes "$first" "$@" ;;
esac
python3 -m engine.arena.device_train --out "$out" --work "$work" "$@"
rc=$?
echo "device_train: exit $rc; weights, log and summary in $out" >&2
exit $rc
