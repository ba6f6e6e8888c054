#!/usr/bin/env bash
# Issue 7's archive kind and layer extension, under `roam run` against nginx on loopback:
# 1. archives: listing a remote zip / tar (`ls -R NAME#`) and reading one member, against
#    what a user does without roam (download the whole archive with curl, then `unzip -l` /
#    `tar tf`, `unzip -p` / `tar xOf`); with the bytes each fetched (nginx's access log);
# 2. layers: reading a SIZE_MB file and listing a 500-name tree through the native `rot13:`
#    layer vs the wasm extension `ext:rot13:` (fresh cache each run).
# Prints markdown tables: median seconds of RUNS and the ratio to the first row.
#
# Usage: bench/archive_layer.sh   Environment: RUNS=5, SIZE_MB=64, ROAM=target/release/roam
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
SIZE_MB=${SIZE_MB:-64}
. bench/lib.sh
roam_binary
export ROAM_EXT_DIR=${ROAM_EXT_DIR:-$PWD/target/extensions}
[ -f "$ROAM_EXT_DIR/archive.wasm" ] || {
    echo "no $ROAM_EXT_DIR/archive.wasm: run \`cargo test -p roam --test archives\` once" >&2
    exit 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/roam-archive.XXXXXX")
export ROAM_CONFIG=$work/none.toml
cleanup() { stop_nginx "$work"; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/www" "$work/tree" "$work/out"

# 200 members of 256 KiB (50 MB): a photo album; the same tree as zip (stored) and tar.
python3 - "$work/tree" <<'PY'
import os, sys
for i in range(200):
    d = os.path.join(sys.argv[1], f"album{i // 50}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"p{i:03}.jpg"), "wb") as f:
        f.write(os.urandom(256 << 10))
PY
(cd "$work/tree" && zip -q -0 -r "$work/www/photos.zip" . && tar cf "$work/www/photos.tar" .)
head -c $((SIZE_MB << 20)) /dev/urandom > "$work/www/big.bin"
mkdir -p "$work/www/names"
for i in $(seq 500); do echo "$i" > "$work/www/names/file$i.txt"; done
start_nginx "$work"
URL=http://127.0.0.1:$PORT
H=/http/127.0.0.1:$PORT

echo "### Archives: a 200-member, $(($(stat -c %s "$work/www/photos.zip") >> 20)) MB album (median of $RUNS, roam run, fresh cache)"
echo
echo "| what | s | ratio | bytes fetched |"
echo "|---|---|---|---|"
BASE=
measure "curl whole zip + unzip -l" sh -c "curl -s $URL/photos.zip -o $work/out/p.zip && unzip -l $work/out/p.zip"
measure "roam: ls -R photos.zip#" "$ROAM" run -- ls -R "$H/photos.zip#"
measure "curl whole tar + tar tf" sh -c "curl -s $URL/photos.tar -o $work/out/p.tar && tar tf $work/out/p.tar"
measure "roam: ls -R photos.tar#" "$ROAM" run -- ls -R "$H/photos.tar#"
measure "curl whole zip + unzip -p one member" sh -c "curl -s $URL/photos.zip -o $work/out/p.zip && unzip -p $work/out/p.zip album2/p123.jpg"
measure "roam: cat one member" "$ROAM" run -- cat "$H/photos.zip#/album2/p123.jpg"
echo

echo "### Layers: native rot13: vs wasm ext:rot13: (median of $RUNS, roam run, fresh cache)"
echo
echo "| what | s | ratio | bytes fetched |"
echo "|---|---|---|---|"
BASE=
measure "rot13: cat $SIZE_MB MB" "$ROAM" run -m "/l=rot13:$URL" -- cat /l/ovt.ova
measure "ext:rot13: cat $SIZE_MB MB" "$ROAM" run -m "/l=ext:rot13:$URL" -- cat /l/ovt.ova
BASE=
measure "rot13: ls -l 500 names" "$ROAM" run -m "/l=rot13:$URL" -- ls -l /l/anzrf
measure "ext:rot13: ls -l 500 names" "$ROAM" run -m "/l=ext:rot13:$URL" -- ls -l /l/anzrf
