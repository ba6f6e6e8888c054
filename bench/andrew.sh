#!/usr/bin/env bash
# Andrew-like benchmark (Ufo's application table, Parrot Fig 5.3): copy, list, scan, make -j2
# and delete a generated ~300-file C tree, natively and under each interposition tool, in one
# run. Prints a markdown table of seconds per phase (median of RUNS) and the total's ratio to
# native.
#
# Usage: bench/andrew.sh          Environment: RUNS=3, FILES=300, ROAM=target/release/roam,
#   ONLY=REGEX (run only the configurations whose name matches, native always: e.g.
#   ONLY='file\+cache' to re-measure the remote-file rows)
#
# Configurations:
#   native              the phases on a local directory
#   roam (local)        the same under `roam run`: what roam costs a program that uses no remote file
#                       (on Linux 6.6+ its calls reach roam as seccomp user notifications; calls
#                       on local names made through the preloaded fast path never reach it)
#   roam (local, no fast path)  the same with ROAM_FASTPATH=0: every call on a name reaches roam
#   roam (local, stops) the same with ROAM_NOTIFY=0: every call a ptrace stop
#   roam --fuse (local) the other platform: no ptrace; the namespace mounted through FUSE in
#                       a user and mount namespace of the program's own
#   strace -f / proot   the anchors, same local directory
#   roam file+cache     under roam, the tree lives on a mount served through roam's cache and
#                       write-back (`-m /w=file+cache://DIR`): the remote-file path without a network
#   roam file+cache, no fast path  the same with ROAM_FASTPATH=0
#   roam file+cache, ROAM_AFAR=0   the same with stats, read-only opens and closes of roam
#                       names left to the tracer (which takes the thread over) rather than
#                       made by the listener
#   roam file+cache, stops      the same with ROAM_NOTIFY=0
#   roam --fuse file+cache      the same through `roam run --fuse`
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
FILES=${FILES:-300}
. bench/lib.sh
roam_binary

work=$(mktemp -d "${TMPDIR:-/tmp}/roam-andrew.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/mnt"

c_tree "$work/src" "$FILES"

run() { # NAME, then the command prefix words
    local name=$1; shift
    [[ $name == native || $name =~ ${ONLY:-.} ]] || return 0
    "$@" sh -c "$ANDREW_PHASES" sh "$work/src" "$DEST" 2>>"$work/err.log" | tail -1 >> "$work/$name.tsv" \
        || echo "NOTE: $name failed (see $work/err.log)" >&2
}

configs=("native" "roam (local)" "roam (local, no fast path)" "roam (local, stops)" "roam --fuse (local)"
    "strace -f" "proot" "roam file+cache" "roam file+cache, no fast path"
    "roam file+cache, ROAM_AFAR=0" "roam file+cache, stops" "roam --fuse file+cache")
export ROAM_CACHE_DIR=$work/cache ROAM_CONFIG=$work/none.toml
for r in $(seq "$RUNS"); do
    echo "[andrew.sh] run $r/$RUNS" >&2
    DEST=$work/dst run native env
    DEST=$work/dst run "roam (local)" "$ROAM" run --
    DEST=$work/dst run "roam (local, no fast path)" env ROAM_FASTPATH=0 "$ROAM" run --
    DEST=$work/dst run "roam (local, stops)" env ROAM_NOTIFY=0 "$ROAM" run --
    # The other platform: no ptrace, the namespace mounted through FUSE in a user and mount
    # namespace of the program's own (where the machine allows unprivileged ones).
    DEST=$work/dst run "roam --fuse (local)" "$ROAM" run --fuse --
    command -v strace >/dev/null && DEST=$work/dst run "strace -f" strace -f -o /dev/null
    command -v proot >/dev/null && DEST=$work/dst run proot proot
    DEST=/w/dst run "roam file+cache" "$ROAM" run -m "/w=file+cache://$work/mnt" --
    rm -rf "$work/mnt"/* "$work/cache"
    DEST=/w/dst run "roam file+cache, no fast path" env ROAM_FASTPATH=0 "$ROAM" run -m "/w=file+cache://$work/mnt" --
    rm -rf "$work/mnt"/* "$work/cache"
    DEST=/w/dst run "roam file+cache, ROAM_AFAR=0" env ROAM_AFAR=0 "$ROAM" run -m "/w=file+cache://$work/mnt" --
    rm -rf "$work/mnt"/* "$work/cache"
    DEST=/w/dst run "roam file+cache, stops" env ROAM_NOTIFY=0 "$ROAM" run -m "/w=file+cache://$work/mnt" --
    rm -rf "$work/mnt"/* "$work/cache"
    DEST=/w/dst run "roam --fuse file+cache" "$ROAM" run --fuse -m "/w=file+cache://$work/mnt" --
    rm -rf "$work/dst" "$work/mnt"/* "$work/cache"
done

echo "| config | copy | list | scan | make -j2 | delete | total | vs native |"
echo "|---|---|---|---|---|---|---|---|"
native_total=
for c in "${configs[@]}"; do
    f="$work/$c.tsv"
    [ -s "$f" ] || { [ -n "${ONLY:-}" ] || echo "| $c | – | – | – | – | – | – | not run |"; continue; }
    row="| $c |"
    for col in 1 2 3 4 5; do row+=" $(awk -v c=$col '{print $c}' "$f" | median) |"; done
    total=$(awk '{print $1+$2+$3+$4+$5}' "$f" | median)
    [ -n "$native_total" ] || native_total=$total
    echo "$row $total | $(awk -v t="$total" -v n="$native_total" 'BEGIN{printf "%.2f×", t/n}') |"
done
echo
echo "Seconds, median of $RUNS runs; $FILES-file C tree; $(nproc) CPUs; $(date -u +%Y-%m-%d)."
