#!/usr/bin/env bash
# The GPU check in one command (docs/device_check.md): every step that needs a CUDA device, in under
# 8 minutes, written to $OUT/device_check.json and $OUT/device_check.md (./device_check/ without $OUT).
#
# Run from anywhere inside a checkout; the repository need not be installed. Wheels in .whl/ at the
# repository root (PyAV for the MP4 steps: the device image has none) are installed into /tmp/site
# first. Arguments are passed to `worldpager bench device` (e.g. --dry-run, --steps env,quant).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" > /dev/null; then
    if python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl; then
        export PYTHONPATH="/tmp/site:$PYTHONPATH"
        echo "device_check: installed $(ls .whl/*.whl | xargs -n1 basename | tr '\n' ' ')into /tmp/site" >&2
    else
        echo "device_check: the wheels in .whl/ did not install; steps that need them will say so" >&2
    fi
fi
out="${OUT:-$PWD/device_check}"
python3 -c "from worldpager_cli.main import cli; cli()" bench device --out "$out" "$@"
rc=$?
echo "device_check: exit $rc; results in $out/device_check.json and $out/device_check.md" >&2
exit $rc
