#!/usr/bin/env bash
# The FUSE frontend against puffs' tables (seed 003), with `rclone mount` of the same
# backends in the same run:
# 1. tar extraction of a ~2,000-file tree (/usr/include subtrees), one and two at once,
#    into tmpfs vs `roam mount DIR mem:` (puffs' dtfs) vs `rclone mount :memory:`;
# 2. the same into a local directory vs `roam mount DIR null:LOCALDIR` (puffs' null layer)
#    vs `rclone mount LOCALDIR`, and into a directory in tmpfs vs the null layer over it;
# 3. a large file from nginx on loopback read with cat: uncached, cached (kernel page
#    cache, a second read), backend-cached (a new mount over roam's warm disk cache).
# Each roam row also runs with its requests through FUSE over io_uring (`-uring` rows,
# ROAM_FUSE_URING=1; /dev/fuse where the kernel does not allow it: see `roam doctor`).
# Prints markdown tables: median seconds of RUNS and the ratio to the native row; the rows
# of a tar table are interleaved run by run, so load on a shared machine hits them alike.
#
# Usage: bench/fuse.sh        Environment: RUNS=5, SIZE_MB=256, ROAM=target/release/roam
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
SIZE_MB=${SIZE_MB:-256}
. bench/lib.sh
roam_binary
command -v rclone >/dev/null || { echo "rclone is required (Debian: rclone)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/roam-fuse.XXXXXX")
mnt=$work/mnt
mkdir -p "$mnt" "$work/www" "$work/local" "$work/ram"
# A directory in memory too, so the null layer's own cost shows without the disk's noise.
mount -t tmpfs -o size=1g tmpfs "$work/ram"
mkdir "$work/ram/local"
export ROAM_CONFIG=$work/none.toml

cleanup() {
    fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
    stop_nginx "$work"
    umount "$work/ram" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

(cd /usr/include && tar cf "$work/tree.tar" linux c++ x86_64-linux-gnu asm-generic 2>/dev/null)
files=$(tar tf "$work/tree.tar" | wc -l)

wait_mounted() { for _ in $(seq 200); do mountpoint -q "$mnt" && return; sleep 0.05; done; echo "no mount on $mnt" >&2; cat "$ROAM_CACHE_DIR/mount.log" >&2; exit 1; }
wait_unmounted() { for _ in $(seq 200); do mountpoint -q "$mnt" || return 0; sleep 0.05; done; }

# mount_kind KIND: puts a file system of KIND on $mnt (roam with a fresh cache, unless
# WARM names the one to reuse).
mount_kind() {
    export ROAM_CACHE_DIR=$work/cache-${WARM:-$RANDOM$RANDOM}
    case $1 in
        tmpfs) mount -t tmpfs -o size=1g tmpfs "$mnt" ;;
        local) mount --bind "$work/local" "$mnt" ;;
        ram) mount --bind "$work/ram/local" "$mnt" ;;
        roam-*-uring) ROAM_FUSE_URING=1 mount_kind "${1%-uring}"; return ;;
        roam-null-ram) "$ROAM" mount "$mnt" "null:$work/ram/local" ;;
        roam-mem) "$ROAM" mount "$mnt" mem: ;;
        roam-null) "$ROAM" mount "$mnt" "null:$work/local" ;;
        rclone-mem) rclone mount :memory: "$mnt" --vfs-cache-mode writes --daemon ;;
        rclone-local) rclone mount "$work/local" "$mnt" --vfs-cache-mode writes --daemon ;;
        roam-http) "$ROAM" mount "$mnt" "http://127.0.0.1:$PORT/" ;;
        rclone-http) rclone mount :http: "$mnt" --http-url "http://127.0.0.1:$PORT/" --read-only --daemon ;;
        rclone-http-full) rclone mount :http: "$mnt" --http-url "http://127.0.0.1:$PORT/" --read-only --vfs-cache-mode full --cache-dir "$work/rclone-cache" --daemon ;;
    esac
    wait_mounted
}

unmount_kind() {
    case $1 in
        tmpfs | local | ram) umount "$mnt" ;;
        *) fusermount3 -u "$mnt" ;;
    esac
    wait_unmounted
}

secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f\n", b-a}'; }

# tar_once KIND N: seconds to extract the tree N times at once into a fresh KIND.
tar_once() {
    rm -rf "${work:?}/local/"* "$work/ram/local/"* "$work"/cache-*
    mount_kind "$1"
    local t0 t1
    t0=$(date +%s.%N)
    for i in $(seq "$2"); do
        mkdir "$mnt/x$i"
        { tar xf "$work/tree.tar" -C "$mnt/x$i" || echo "tar into $1 failed" >&2; } &
    done
    wait
    t1=$(date +%s.%N)
    unmount_kind "$1"
    secs "$t0" "$t1"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }

# tar_table TITLE BASE KIND...: every run times each row once, in turn, so a burst of load
# on the shared machine falls on all rows alike; prints medians and ratios to BASE.
tar_table() {
    local title=$1 base=$2 times=$work/times kind
    shift
    : > "$times"
    for _ in $(seq "$RUNS"); do
        for kind in "$@"; do
            echo "$kind $(tar_once "$kind" 1) $(tar_once "$kind" 2)" >> "$times"
        done
    done
    echo "### $title ($files files, $((($(stat -c %s "$work/tree.tar") + 524288) / 1048576)) MB; median of $RUNS, rows interleaved)"
    echo
    echo "| into | 1 tar (s) | ratio | 2 tars at once (s) | ratio |"
    echo "| --- | --- | --- | --- | --- |"
    local b1 b2 s1 s2
    b1=$(awk -v k="$base" '$1 == k {print $2}' "$times" | median)
    b2=$(awk -v k="$base" '$1 == k {print $3}' "$times" | median)
    for kind in "$@"; do
        s1=$(awk -v k="$kind" '$1 == k {print $2}' "$times" | median)
        s2=$(awk -v k="$kind" '$1 == k {print $3}' "$times" | median)
        echo "| $kind | $s1 | $(ratio "$s1" "$b1") | $s2 | $(ratio "$s2" "$b2") |"
    done
    echo
}

tar_table "tar extraction: tmpfs vs in-memory file systems" tmpfs roam-mem roam-mem-uring rclone-mem
tar_table "tar extraction: local directory vs null layers over it" local roam-null roam-null-uring rclone-local
tar_table "tar extraction: a directory in tmpfs vs the null layer over it (the layer alone, no disk)" ram roam-null-ram roam-null-ram-uring

# Large file.
head -c "${SIZE_MB}M" /dev/urandom > "$work/www/big.bin"
start_nginx "$work"

read_secs() {
    local t0 t1 kind=$1
    t0=$(date +%s.%N)
    cat "$mnt/big.bin" > /dev/null || echo "cat from $kind failed" >&2
    t1=$(date +%s.%N)
    secs "$t0" "$t1"
}

# large_once KIND: "uncached cached backend-cached" seconds.
large_once() {
    rm -rf "$work"/cache-* "$work/rclone-cache"
    mount_kind "$1"
    local u c b
    u=$(read_secs "$1")
    c=$(read_secs "$1")
    local warm=${ROAM_CACHE_DIR##*cache-}
    unmount_kind "$1"
    WARM=$warm mount_kind "$1"
    b=$(read_secs "$1")
    unmount_kind "$1"
    echo "$u $c $b"
}

col() { awk -v c="$1" '{print $c}' | median; }

echo "### large file read with cat ($SIZE_MB MiB from nginx on loopback; median of $RUNS)"
echo
echo "| mount | uncached (s) | cached: page cache (s) | backend-cached: new mount (s) |"
echo "| --- | --- | --- | --- |"
curl_runs=$(for _ in $(seq "$RUNS"); do
    a=$(date +%s.%N); curl -s "http://127.0.0.1:$PORT/big.bin" > /dev/null; b=$(date +%s.%N)
    secs "$a" "$b"
done | median)
echo "| curl (no mount) | $curl_runs | - | - |"
for kind in roam-http roam-http-uring rclone-http rclone-http-full; do
    runs=$(for _ in $(seq "$RUNS"); do large_once "$kind"; done)
    echo "| $kind | $(col 1 <<< "$runs") | $(col 2 <<< "$runs") | $(col 3 <<< "$runs") |"
done
