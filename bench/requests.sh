#!/usr/bin/env bash
# Requests per phase and protocol: `cp -r` of a FILES-file C tree (bench/lib.sh's c_tree:
# FILES-2 C files in 10 directories, a header, main.c, a Makefile) into each test server
# under `roam run`, then `ls -lR`, then `rm -r`, each phase its own run with one cache.
# Counts what the drivers log under RUST_LOG: S3 requests and FTP commands
# (`roam_requests=debug`), SFTP replies, one per request (`russh_sftp=trace`).
# Prints a markdown table: requests per phase, and per kind of request.
#
# Usage: bench/requests.sh [PROTO...]   (default: s3 ftp sftp)
# Environment: FILES=20, ROAM=target/release/roam, FIXTURES=target/release/roam-fixtures,
#   KEEP=DIR keeps the logs there.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
FILES=${FILES:-20}
ROAM=$(realpath "${ROAM:-target/release/roam}")
FIXTURES=$(realpath "${FIXTURES:-target/release/roam-fixtures}")
protos=("${@:-s3 ftp sftp}")
read -ra protos <<< "${protos[*]}"

work=$(mktemp -d "${TMPDIR:-/tmp}/roam-requests.XXXXXX")
chmod 755 "$work"
logs=${KEEP:-$work/logs}
mkdir -p "$logs"
fixture_pid=
cleanup() {
    [ -z "$fixture_pid" ] || { kill "$fixture_pid"; wait "$fixture_pid" || true; }
    rm -rf "$work"
}
trap cleanup EXIT
c_tree "$work/tree" "$FILES"
start_fixtures "$FIXTURES" "$work" "${protos[@]}"

# Runs `$@` under roam with PROTO's server at /r, its log in $logs/PROTO.PHASE.log.
traced() {
    local p=$1 phase=$2 var url env
    shift 2
    var=$(echo "$p" | tr a-z A-Z)
    url=${var}_URL env=${var}_ENV
    # shellcheck disable=SC2086 # the ENV assignments are space-separated words
    env ${!env} RUST_LOG=roam_requests=debug,russh_sftp=trace ROAM_CACHE_DIR="$work/cache/$p" \
        "$ROAM" run -m "/r=${!url}" -- "$@" > /dev/null 2> "$logs/$p.$phase.log"
}

# "N (KIND n, KIND n ...)" for one log: S3 methods (LIST: a GET with list-type), FTP
# verbs, SFTP reply types.
count() {
    grep -oE 'DEBUG (s3|ftp) [A-Z]+[^ ]*( [^ ]*)?|packet type [0-9]+' "$1" | awk '
        $1 == "packet" { n["101"]="STATUS"; n["102"]="HANDLE"; n["103"]="DATA"; n["104"]="NAME"
                         n["105"]="ATTRS"; if ($3 in n) print n[$3]; next }
        $2 == "s3" { print ($4 ~ /list-type/) ? "LIST" : $3; next }
        { print $3 }' | sort | uniq -c | awk '
        { s = s sprintf("%s%s %d", (s ? ", " : ""), $2, $1); total += $1 }
        END { printf "%d (%s)", total, s }'
}

echo "| protocol | copy | list | delete |"
echo "|---|---|---|---|"
for p in "${protos[@]}"; do
    traced "$p" copy cp -r "$work/tree" /r/t
    traced "$p" list ls -lR /r/t
    traced "$p" delete rm -r /r/t
    echo "| $p | $(count "$logs/$p.copy.log") | $(count "$logs/$p.list.log") | $(count "$logs/$p.delete.log") |"
done
echo
echo "$FILES-file tree ($((FILES - 2)) C files in 10 directories under one, 3 files at its top); $(date -u '+%Y-%m-%d %H:%M UTC')"
