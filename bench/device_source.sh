#!/usr/bin/env bash
# Device sources (issue 20): a camera's store of PHOTOS JPEGs (EXIF dates made by Pillow,
# 256 KiB each) on nginx, under `roam run` with the `camera` extension (`src:camera:URL`),
# against what a user does without roam: download every photo with curl, then read each
# one's EXIF date locally (Pillow) to file it by day. With the bytes each fetched (nginx's
# access log). Prints a markdown table: median seconds of RUNS, a fresh cache each run.
#
# Usage: bench/device_source.sh   Environment: RUNS=5, PHOTOS=200, ROAM=target/release/roam
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
PHOTOS=${PHOTOS:-200}
. bench/lib.sh
roam_binary
export ROAM_EXT_DIR=${ROAM_EXT_DIR:-$PWD/target/extensions}
[ -f "$ROAM_EXT_DIR/camera.wasm" ] || {
    echo "no $ROAM_EXT_DIR/camera.wasm: run \`cargo test -p roam --test devices\` once" >&2
    exit 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/roam-camera.XXXXXX")
export ROAM_CONFIG=$work/none.toml
cleanup() { stop_nginx "$work"; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/www/DCIM" "$work/out"
for i in $(seq "$PHOTOS"); do
    day=$(printf '2024:06:%02d 12:00:00' $((i % 28 + 1)))
    python3 crates/roam/tests/fixtures/exif_jpeg.py "$work/www/DCIM/IMG_$(printf %04d "$i").jpg" \
        "$day" $((256 << 10)) "$i"
done
start_nginx "$work"
URL=http://127.0.0.1:$PORT/DCIM

# Without roam: every photo downloaded, then each one's DateTimeOriginal read locally.
by_day_locally() {
    for i in $(seq "$PHOTOS"); do echo "url = \"$URL/IMG_$(printf %04d "$i").jpg\""; echo "output = \"$work/out/$i.jpg\""; done |
        curl -s --parallel --parallel-max 8 -K - 2>/dev/null &&
        python3 -c 'import sys; from PIL import Image
for f in sys.argv[1:]: print(Image.open(f).getexif().get_ifd(0x8769).get(0x9003, "undated")[:10], f)' "$work"/out/*.jpg
}

echo "### Device sources: $PHOTOS photos of 256 KiB by EXIF day (median of $RUNS, fresh cache)"
echo
echo "| what | s | ratio | bytes fetched |"
echo "|---|---|---|---|"
BASE=
measure "curl every photo + read EXIF dates (Pillow)" by_day_locally
measure "roam: ls -R src:camera" "$ROAM" run -m "/cam=src:camera:$URL" -- ls -R /cam
measure "roam: ls -R src:camera, cat one photo" "$ROAM" run -m "/cam=src:camera:$URL" -- \
    sh -c 'ls -R /cam && cat /cam/2024-06-02/IMG_0001.jpg'
measure "roam: ls -R the plain directory" "$ROAM" run -m "/cam=$URL" -- ls -R /cam
