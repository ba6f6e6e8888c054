#!/usr/bin/env bash
# Round trips per small file: times `cp -r` of FILES small files into each protocol's test
# server under `roam run`, then `rm -r` of them (the copy and delete phases of Fig 5.3,
# alone). Prints one line per protocol and run: `PROTO copy SECONDS delete SECONDS`.
#
# Usage: bench/smallfiles.sh [PROTO...]   (default: s3 ftp sftp)
# Environment: RUNS=3, FILES=100, ROAM=target/debug/roam, FIXTURES=target/debug/roam-fixtures
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
FILES=${FILES:-100}
. bench/lib.sh
ROAM=$(realpath "${ROAM:-target/debug/roam}")
FIXTURES=$(realpath "${FIXTURES:-target/debug/roam-fixtures}")
protos=("${@:-s3 ftp sftp}")
read -ra protos <<< "${protos[*]}"

work=$(mktemp -d "${TMPDIR:-/tmp}/roam-smallfiles.XXXXXX")
chmod 755 "$work"
fixture_pid=
cleanup() {
    [ -z "$fixture_pid" ] || { kill "$fixture_pid"; wait "$fixture_pid" || true; }
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/tree"
for i in $(seq "$FILES"); do head -c 2000 /dev/urandom > "$work/tree/f$i.c"; done
start_fixtures "$FIXTURES" "$work" "${protos[@]}"

# Seconds `$@` took, under roam with PROTO's server mounted at /r.
timed() {
    local p=$1 var url env start
    shift
    var=$(echo "$p" | tr a-z A-Z)
    url=${var}_URL env=${var}_ENV
    start=$(date +%s.%N)
    # shellcheck disable=SC2086 # the ENV assignments are space-separated words
    env ${!env} ROAM_CACHE_DIR="${CACHE:-$work/cache/$p}" "$ROAM" run -m "/r=${!url}" -- "$@" >&2 ||
        { echo "$p: $* failed" >&2; return 1; }
    echo "$(date +%s.%N) - $start" | bc
}

for r in $(seq "$RUNS"); do
    for p in "${protos[@]}"; do
        copy=$(timed "$p" cp -r "$work/tree" "/r/t$r") || exit 1
        delete=$(timed "$p" rm -r "/r/t$r") || exit 1
        # The delete must have removed the tree on the server (a fresh cache asks it).
        if CACHE="$work/cache/check-$p-$r" timed "$p" test -e "/r/t$r" 2>/dev/null; then
            echo "$p: /r/t$r survived rm -r" >&2
            exit 1
        fi
        printf '%s copy %.3f delete %.3f\n' "$p" "$copy" "$delete"
    done
done
