#!/usr/bin/env bash
# Large remote files through roam (issue: open must not wait for the whole file):
# head -c 1000, tail -c 1000 and a full sequential read (roam run; head and cat under
# roam run --fuse too) of a 1 GiB file served by nginx on
# loopback, with the bytes each transferred (from nginx's log), against curl on the same
# server in the same run. Prints a markdown table (median of RUNS).
#
# Usage: bench/largefile.sh        Environment: RUNS=3, SIZE_MB=1024, ROAM=target/release/roam
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
SIZE_MB=${SIZE_MB:-1024}
. bench/lib.sh
roam_binary

work=$(mktemp -d "${TMPDIR:-/tmp}/roam-largefile.XXXXXX")
trap 'stop_nginx "$work"; rm -rf "$work"' EXIT
mkdir -p "$work/www"
head -c "${SIZE_MB}M" /dev/urandom > "$work/www/big.bin"
start_nginx "$work"
port=$PORT
url=http://127.0.0.1:$port/big.bin
path=/http/127.0.0.1:$port/big.bin
export ROAM_CONFIG=$work/none.toml

sent() { awk '/GET \/big.bin /{s+=$10} END{print s+0}' "$work/run/access.log"; }
# One measurement: prints "seconds bytes".
measure() {
    : > "$work/run/access.log"
    rm -rf "$work"/cache-* "$work/curl.out"
    export ROAM_CACHE_DIR=$work/cache-$RANDOM
    sync # no writeback of an earlier run's data in this one's time
    local t0 t1
    t0=$(date +%s.%N); "$@" > /dev/null; t1=$(date +%s.%N)
    echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}') $(sent)"
}

declare -A rows=(
    ["roam: head -c 1000"]="$ROAM run -- head -c 1000 $path"
    ["roam: tail -c 1000"]="$ROAM run -- tail -c 1000 $path"
    ["roam: cat"]="$ROAM run -- cat $path"
    ["roam --fuse: head -c 1000"]="$ROAM run --fuse -- head -c 1000 $path"
    ["roam --fuse: cat"]="$ROAM run --fuse -- cat $path"
    ["curl > /dev/null"]="curl -s $url -o /dev/null"
    ["curl > file"]="curl -s $url -o $work/curl.out"
)
# roam keeps what it fetches on disk, so `curl > file` is the like-for-like anchor.
order=("roam: head -c 1000" "roam: tail -c 1000" "roam: cat" "roam --fuse: head -c 1000"
    "roam --fuse: cat" "curl > /dev/null" "curl > file")
for r in $(seq "$RUNS"); do
    for name in "${order[@]}"; do
        read -r -a cmd <<< "${rows[$name]}"
        measure "${cmd[@]}" >> "$work/$(echo "$name" | tr -c 'a-z0-9' _).tsv"
    done
done
echo "| $SIZE_MB MiB remote file | seconds | MB/s | bytes transferred |"
echo "|---|---|---|---|"
for name in "${order[@]}"; do
    f="$work/$(echo "$name" | tr -c 'a-z0-9' _).tsv"
    s=$(awk '{print $1}' "$f" | median); b=$(awk '{print $2}' "$f" | median)
    echo "| $name | $s | $(awk -v s="$s" -v m="$SIZE_MB" 'BEGIN{printf "%.0f", m*1.048576/s}') | $b |"
done
echo
echo "Median of $RUNS runs; nginx on loopback; $(date -u +%Y-%m-%d). MB/s is the file size over the time (meaningful for cat and curl)."
