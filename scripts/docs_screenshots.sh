#!/bin/sh
# The screenshots of docs/conventions.md, made again: a 12-chunk arena run (CPU) and its report page,
# and `worldpager generate --help`, each shot with headless Chromium and reduced to a small palette.
# Run from the repository's root: sh scripts/docs_screenshots.sh
set -eu
ROOT=$(pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
WP="python3 -c 'from worldpager_cli.main import cli; cli()'"
export PYTHONPATH="$ROOT" OMP_NUM_THREADS=1 COLUMNS=80
cd "$WORK"
eval "$WP generate --chunks 12 --out arena.mp4 --spill arena.spill --pool-slots 4 --quiet --json" > summary.json
eval "$WP report arena.log.jsonl --out report" > /dev/null
eval "$WP generate --help" | sed 's/^Usage: -c /Usage: worldpager /' > help.txt
python3 - <<'EOF'
from html import escape
text = open("help.txt").read()
page = ('<!DOCTYPE html><html><head><meta charset="utf-8"><style>body{margin:0;background:#1e1e1e}'
        'pre{color:#e6e6e6;font:13px/1.35 "DejaVu Sans Mono",monospace;padding:16px;margin:0}</style></head>'
        '<body><pre>$ worldpager generate --help\n' + escape(text) + '</pre></body></html>')
open("help.html", "w").write(page)
EOF
shoot() { chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --screenshot="$1" --window-size="$2" "$3" 2>/dev/null; }
shoot report_page.png 1200,1600 "file://$WORK/report/report.html"
shoot generate_help.png 820,$(( $(wc -l < help.txt) * 18 + 60 )) "file://$WORK/help.html"
mkdir -p "$ROOT/docs/screenshots"
python3 - "$ROOT/docs/screenshots" <<'EOF'
import sys
from PIL import Image
for name, colours in (("report_page", 64), ("generate_help", 16)):
    with Image.open(f"{name}.png") as image:
        image.convert("RGB").quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(
            f"{sys.argv[1]}/{name}.png", optimize=True)
EOF
cat summary.json
