#!/usr/bin/env bash
# Many clients, one origin: CLIENTS roam clients (each with its own cache, as separate
# nodes) read the same FILES-file tree (`find | sort | xargs cat`) under `roam run` from
# one nginx origin, all at once: through one squid started here (cold at each repetition,
# merging simultaneous misses of a URL with `collapsed_forwarding on`, as Frontier sites
# run it), and without it; and one client alone. The origin says
# `Cache-Control: max-age=3600`, as the origins behind site proxies (CVMFS, Frontier) do.
# Prints a markdown table of the origin's requests and bytes (nginx's access log) and the
# wall time, medians of REPS runs, with ratios to one client's. Every client's bytes are
# checked against the tree.
#
# Usage: bench/proxy.sh
# Environment: CLIENTS=32, FILES=300, SIZE=16384 (bytes a file), REPS=3,
#   ROAM=target/release/roam.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
CLIENTS=${CLIENTS:-32}
FILES=${FILES:-300}
SIZE=${SIZE:-16384}
REPS=${REPS:-3}
roam_binary
command -v squid >/dev/null || [ -x /usr/sbin/squid ] || { echo "squid is required (Debian: squid)" >&2; exit 1; }
SQUID=$(command -v squid || echo /usr/sbin/squid)

work=$(mktemp -d "${TMPDIR:-/tmp}/roam-proxy.XXXXXX")
chmod 755 "$work"
squid_pid=
stop_squid() {
    [ -z "$squid_pid" ] || { kill "$squid_pid" 2>/dev/null; wait "$squid_pid" 2>/dev/null || true; }
    squid_pid=
}
cleanup() { stop_squid; stop_nginx "$work"; rm -rf "$work"; }
trap cleanup EXIT

# The tree: FILES files of SIZE random bytes in 10 directories.
python3 - "$work/www/tree" "$FILES" "$SIZE" <<'PY'
import os, sys
root, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    d = os.path.join(root, f"d{i % 10}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}.bin"), "wb") as f:
        f.write(os.urandom(size))
PY
expected=$(cd "$work/www/tree" && find . -type f | sort | xargs cat | md5sum | cut -d' ' -f1)
NGINX_SERVER='expires 1h;' start_nginx "$work"
origin=http://127.0.0.1:$PORT

# start_squid: a fresh squid (memory cache only) on a free port, in SQUID_PORT. Started
# as root it becomes `nobody`, which must own its run directory.
start_squid() {
    local run=$work/squid
    rm -rf "$run"; mkdir -p "$run"
    SQUID_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    cat > "$run/squid.conf" <<CONF
http_port 127.0.0.1:$SQUID_PORT
$([ "$(id -u)" = 0 ] && echo "cache_effective_user nobody")
pid_filename $run/squid.pid
access_log stdio:$run/access.log
cache_log $run/cache.log
cache_store_log none
coredump_dir $run
cache_mem 256 MB
maximum_object_size_in_memory 64 MB
# One origin fetch for requests of the same URL that arrive together (Frontier's squid
# turns it on too): without it, clients starting at once all miss.
collapsed_forwarding on
http_access allow localhost
http_access deny all
shutdown_lifetime 0 seconds
pinger_enable off
icp_port 0
htcp_port 0
netdb_filename none
CONF
    [ "$(id -u)" != 0 ] || chown -R nobody "$run"
    "$SQUID" -N -f "$run/squid.conf" &
    squid_pid=$!
    until python3 -c "import socket; socket.create_connection(('127.0.0.1', $SQUID_PORT), 1)" 2>/dev/null; do
        kill -0 "$squid_pid" 2>/dev/null || { cat "$run/cache.log" >&2; exit 1; }
        sleep 0.1
    done
}

# One client: reads the whole tree under roam run with a fresh cache of its own; prints
# the md5 of what it read. $1: the client's number, $2: its http_proxy (or nothing).
client() {
    env ${2:+http_proxy=$2} ROAM_CACHE_DIR="$work/cache/$1" "$ROAM" run -m "/o=$origin/tree" -- \
        sh -c 'cd /o && find . -type f | sort | xargs cat | md5sum | cut -d" " -f1'
}

# scenario N PROXY(yes|no): N clients at once; prints "requests bytes seconds".
scenario() {
    local n=$1 via=$2 proxy= before t0 t1 bad=0 pids=()
    rm -rf "$work/cache" "$work/out"; mkdir -p "$work/cache" "$work/out"
    if [ "$via" = yes ]; then start_squid; proxy=http://127.0.0.1:$SQUID_PORT; fi
    before=$(wc -l < "$work/run/access.log")
    t0=$(date +%s.%N)
    for i in $(seq "$n"); do
        client "$i" "$proxy" > "$work/out/$i" 2> "$work/out/$i.err" &
        pids+=($!)
    done
    wait "${pids[@]}" || true
    t1=$(date +%s.%N)
    for i in $(seq "$n"); do
        [ "$(cat "$work/out/$i")" = "$expected" ] || { bad=$((bad + 1)); cat "$work/out/$i.err" >&2; }
    done
    [ "$bad" = 0 ] || { echo "$bad of $n clients read wrong bytes" >&2; exit 1; }
    stop_squid
    tail -n +"$((before + 1))" "$work/run/access.log" |
        awk -v t="$(echo "$t1 - $t0" | bc)" '{n++; b += $10} END {printf "%d %d %.2f\n", n, b, t}'
}

echo "| scenario | origin requests | origin bytes | wall s | requests ÷ one client's | bytes ÷ one client's |"
echo "|---|---:|---:|---:|---:|---:|"
one_req=
for s in "1 no one client" "$CLIENTS yes $CLIENTS clients, one squid" "$CLIENTS no $CLIENTS clients, no proxy"; do
    read -r n via label <<< "$s"
    for r in $(seq "$REPS"); do scenario "$n" "$via"; done > "$work/runs"
    req=$(cut -d' ' -f1 "$work/runs" | median)
    bytes=$(cut -d' ' -f2 "$work/runs" | median)
    secs=$(cut -d' ' -f3 "$work/runs" | median)
    if [ -z "$one_req" ]; then one_req=$req; one_bytes=$bytes; fi
    printf "| %s | %s | %s | %s | %.2f | %.2f |\n" "$label" "$req" "$bytes" "$secs" \
        "$(echo "$req / $one_req" | bc -l)" "$(echo "$bytes / $one_bytes" | bc -l)"
done
