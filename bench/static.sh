#!/usr/bin/env bash
# The static roam (scripts/static.sh) in a root that holds nothing but itself, a static
# busybox and a data file — no libc, no ld.so, no /etc — entered with `unshare -rm` and
# chroot (/proc bound in): `roam doctor`, then `roam run` of busybox reading the local file
# and a file of an HTTP server outside the root. Not part of ./test.sh: the musl build of
# roam (wasmtime and Cranelift included) takes far longer than the test suite.
#
# Usage: bench/static.sh [release|dev]   Needs busybox-static, python3, and root or
# unprivileged user namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(scripts/static.sh "${1:-release}")
busybox=$(command -v busybox)
if readelf -l "$busybox" | grep -q 'program interpreter'; then
    echo "$busybox is not static (install busybox-static)" >&2
    exit 1
fi
root=$(mktemp -d) www=$(mktemp -d)
server=
trap '[ -z "$server" ] || kill "$server"; rm -rf "$root" "$www"' EXIT
install -m755 "$bin" "$root/roam"
install -m755 "$busybox" "$root/busybox"
mkdir -p "$root/proc" "$root/tmp" "$root/data"
echo "a local file" >"$root/data/local.txt"
echo "a remote file" >"$www/remote.txt"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$www" "$port" >/dev/null 2>&1 &
server=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

# Runs ARGS inside the bare root: a private mount namespace, /proc bound, chroot, an empty
# environment but for roam's cache.
chroot=$(command -v chroot)
bare() {
    unshare -rm sh -c 'root=$0 chroot=$1; shift; mount --rbind /proc "$root/proc" && exec env -i ROAM_CACHE_DIR=/tmp/cache ROAM_CONFIG=/none "$chroot" "$root" "$@"' "$root" "$chroot" "$@"
}
echo "files in the root: $(cd "$root" && find . -type f | sort | tr '\n' ' ')"
# FUSE and user namespaces are absent in the bare root: doctor says so and exits 1.
bare /roam doctor || echo "(roam doctor exit $?: mechanisms this root lacks, named above)"
check() {
    local want=$1 got
    shift
    got=$(bare "$@")
    if [ "$got" != "$want" ]; then
        echo "FAIL: $*: got '$got', want '$want'" >&2
        exit 1
    fi
    echo "ok: $* -> $got"
}
check "a local file" /roam run -- /busybox cat /data/local.txt
check "a remote file" /roam run -- /busybox cat "/http/127.0.0.1:$port/remote.txt"
check "a remote file" /roam run -- /busybox sh -c "cd /http/127.0.0.1:$port && /busybox cat remote.txt"
echo "the static roam works in a root without libc"
