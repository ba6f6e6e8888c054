#!/usr/bin/env bash
# The FUSE frontend against puffs' tables (seed 003), with `rclone mount` of the same
# backends in the same run:
# 1. tar extraction of a ~2,000-file tree (/usr/include subtrees), one and two at once,
#    into tmpfs vs `roam mount DIR mem:` (puffs' dtfs) vs `rclone mount :memory:`;
# 2. the same into a local directory vs `roam mount DIR null:LOCALDIR` (puffs' null layer)
#    vs `rclone mount LOCALDIR`, and into a directory in tmpfs vs the null layer over it;
# 3. a large file from nginx on loopback read with cat: uncached, cached (kernel page
#    cache, a second read), backend-cached (a new mount over roam's warm disk cache);
#    beside curl to /dev/null and to a file, and cat of the file in ext4's page cache;
# 4. 4 KiB reads at random offsets of an S3 object (SIZE_MB, moto from roam-fixtures, as
#    the tests use) for RAND_SECS through `roam mount` and `rclone mount`: reads/s;
# 5. the Andrew-like phases (copy, list, scan, make -j2, delete of a FILES-file C tree)
#    through `roam mount` of each of ANDREW_PROTOS (the tests' servers), on both
#    transports, and through sshfs of the same SFTP server.
# Each roam row also runs with its requests through FUSE over io_uring (`-uring` rows,
# ROAM_FUSE_URING=1; /dev/fuse where the kernel does not allow it: see `roam doctor`).
# Prints markdown tables: median seconds of RUNS and the ratio to the native row; the rows
# of a tar table are interleaved run by run, so load on a shared machine hits them alike.
#
# Usage: bench/fuse.sh        Environment: RUNS=5, SIZE_MB=256, ROAM=target/release/roam,
#                                          PARTS="tar large s3 andrew" (the tables),
#                                          RAND_SECS=20, FIXTURES=target/release/roam-fixtures,
#                                          FILES=300, ANDREW_PROTOS="dav sftp s3 ftp"
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
SIZE_MB=${SIZE_MB:-256}
PARTS=${PARTS:-tar large s3 andrew}
RAND_SECS=${RAND_SECS:-20}
FILES=${FILES:-300}
ANDREW_PROTOS=${ANDREW_PROTOS:-dav sftp s3 ftp}
FIXTURES=${FIXTURES:-target/release/roam-fixtures}
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

# The servers of roam-fixtures (start_fixtures), while a table uses them.
fixture_pid=
cleanup() {
    fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
    [ -z "$fixture_pid" ] || kill "$fixture_pid" 2>/dev/null || true
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

# reads_per_sec FILE: 4 KiB preads at random page-aligned offsets of FILE for RAND_SECS.
reads_per_sec() {
    python3 - "$1" "$RAND_SECS" <<'PY'
import os, random, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
pages = os.fstat(fd).st_size // 4096
rnd, n = random.Random(7), 0
start = time.monotonic()
while time.monotonic() < start + float(sys.argv[2]):
    assert len(os.pread(fd, 4096, rnd.randrange(pages) * 4096)) == 4096
    n += 1
print(f"{n / (time.monotonic() - start):.1f}")
PY
}

fixtures_binary() {
    [ -x "$FIXTURES" ] || cargo build --release -q -p roam-testkit --bin roam-fixtures >&2
}

# andrew_on DIR: the Andrew-like phases from the C tree into DIR/a (lib.sh's ANDREW_PHASES).
andrew_on() { sh -c "$ANDREW_PHASES" sh "$work/ctree" "$1/a" 2>>"$work/andrew.err" | tail -1; }

# The Andrew table: each protocol through roam mount, and SFTP through sshfs too.
andrew_table() {
    [[ $PARTS == *andrew* ]] || return 0
    local p var url env rows=$work/andrew
    fixtures_binary
    c_tree "$work/ctree" "$FILES"
    mkdir -p "$work/fa"
    chmod 755 "$work" "$work/fa" # the servers' workers (nobody) reach their trees
    # shellcheck disable=SC2086 # the protocols are words
    start_fixtures "$FIXTURES" "$work/fa" $ANDREW_PROTOS
    : > "$rows"
    for p in $ANDREW_PROTOS; do
        var=$(echo "$p" | tr a-z A-Z)
        url=${var}_URL env=${var}_ENV
        for uring in 0 1; do
            export ROAM_CACHE_DIR=$work/cache-andrew-$p-$uring
            # shellcheck disable=SC2086 # ENV is space-separated assignments
            env ${!env} ROAM_FUSE_URING=$uring "$ROAM" mount "$mnt" "${!url}"
            wait_mounted
            echo "roam-$p$([ $uring = 0 ] || echo -uring) $(andrew_on "$mnt")" >> "$rows"
            fusermount3 -u "$mnt"
            wait_unmounted
        done
    done
    if [[ " $ANDREW_PROTOS " == *" sftp "* ]]; then
        sshfs -o "IdentityFile=$SFTP_KEY,UserKnownHostsFile=$SFTP_KNOWN_HOSTS,port=$SFTP_PORT" \
            "root@127.0.0.1:$SFTP_PATH" "$mnt"
        wait_mounted
        echo "sshfs $(andrew_on "$mnt")" >> "$rows"
        fusermount3 -u "$mnt"
        wait_unmounted
    fi
    kill "$fixture_pid"
    wait "$fixture_pid" || true
    fixture_pid=
    echo "### Andrew-like through the mount ($FILES files; seconds, one run)"
    echo
    echo "| mount | copy | list | scan | make -j2 | delete | total | phases |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
    awk '{printf "| %s | %s | %s | %s | %s | %s | %.3f | %s |\n", $1, $2, $3, $4, $5, $6, $2+$3+$4+$5+$6, $7}' "$rows"
    echo
}

# The S3 table: one object of SIZE_MB in moto, read at random through each mount.
s3_random_reads() {
    [[ $PARTS == *s3* ]] || return 0
    fixtures_binary
    mkdir -p "$work/fx/srv/s3"
    head -c "${SIZE_MB}M" /dev/urandom > "$work/fx/srv/s3/big.bin"
    start_fixtures "$FIXTURES" "$work/fx" s3
    local roam rclone
    export ROAM_CACHE_DIR=$work/cache-s3
    # shellcheck disable=SC2086 # S3_ENV is space-separated assignments
    env $S3_ENV "$ROAM" mount "$mnt" "$S3_URL"
    wait_mounted
    roam=$(reads_per_sec "$mnt/big.bin")
    fusermount3 -u "$mnt"
    wait_unmounted
    # The image exports AWS_CA_BUNDLE, which rclone's S3 client refuses on plain http.
    env -u AWS_CA_BUNDLE rclone mount ":s3:$S3_BUCKET" "$mnt" --s3-provider Other \
        --s3-endpoint "$S3_ENDPOINT" --s3-access-key-id "$S3_ACCESS_KEY" \
        --s3-secret-access-key "$S3_SECRET_KEY" --read-only --daemon
    wait_mounted
    rclone=$(reads_per_sec "$mnt/big.bin")
    fusermount3 -u "$mnt"
    wait_unmounted
    kill "$fixture_pid"
    wait "$fixture_pid" || true
    fixture_pid=
    echo "### 4 KiB random reads of a $SIZE_MB MiB S3 object (moto on loopback; $RAND_SECS s each, cold)"
    echo
    echo "| mount | reads/s |"
    echo "| --- | --- |"
    echo "| roam mount | $roam |"
    echo "| rclone mount (no cache) | $rclone |"
    echo
}

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

if [[ $PARTS == *tar* ]]; then
tar_table "tar extraction: tmpfs vs in-memory file systems" tmpfs roam-mem roam-mem-uring rclone-mem
tar_table "tar extraction: local directory vs null layers over it" local roam-null roam-null-uring rclone-local
tar_table "tar extraction: a directory in tmpfs vs the null layer over it (the layer alone, no disk)" ram roam-null-ram roam-null-ram-uring
fi
s3_random_reads
andrew_table
[[ $PARTS == *large* ]] || exit 0

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

# curl_once: "to-/dev/null to-a-file" seconds; page_cache_once: cat of the served file,
# in ext4's page cache (read once before).
curl_once() {
    local a b c
    a=$(date +%s.%N); curl -s "http://127.0.0.1:$PORT/big.bin" > /dev/null; b=$(date +%s.%N)
    curl -s "http://127.0.0.1:$PORT/big.bin" -o "$work/curl.out"; c=$(date +%s.%N)
    rm -f "$work/curl.out"
    echo "$(secs "$a" "$b") $(secs "$b" "$c")"
}
page_cache_once() {
    cat "$work/www/big.bin" > /dev/null
    local a b
    a=$(date +%s.%N); cat "$work/www/big.bin" > /dev/null; b=$(date +%s.%N)
    secs "$a" "$b"
}

# Rows interleaved run by run, as for the tars.
large_kinds="roam-http roam-http-uring rclone-http rclone-http-full"
: > "$work/large"
for _ in $(seq "$RUNS"); do
    echo "curl $(curl_once)" >> "$work/large"
    echo "ext4 $(page_cache_once)" >> "$work/large"
    for kind in $large_kinds; do echo "$kind $(large_once "$kind")" >> "$work/large"; done
done
row() { awk -v k="$1" -v c="$2" '$1 == k {print $c}' "$work/large" | median; }
to_file=$(row curl 3)
page=$(row ext4 2)
echo "### large file read with cat ($SIZE_MB MiB from nginx on loopback; median of $RUNS, rows interleaved)"
echo
echo "| mount | uncached (s) | curl > file / uncached | cached: page cache (s) | ext4 page cache / cached | backend-cached: new mount (s) |"
echo "| --- | --- | --- | --- | --- | --- |"
echo "| curl > /dev/null (no mount) | $(row curl 2) | - | - | - | - |"
echo "| curl > file (no mount) | $to_file | 1.00 | - | - | - |"
echo "| cat, ext4 page cache (no mount) | - | - | $page | 1.00 | - |"
for kind in $large_kinds; do
    u=$(row "$kind" 2) c=$(row "$kind" 3)
    echo "| $kind | $u | $(ratio "$to_file" "$u") | $c | $(ratio "$page" "$c") | $(row "$kind" 4) |"
done
