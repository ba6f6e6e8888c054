#!/usr/bin/env bash
# Parrot §5 per protocol (issue 5), roam side by side with sshfs and `rclone mount` against
# the SAME loopback servers the tests use (started by `roam-fixtures`), in one run:
#   Fig 5.1  copy of a BIG_MB file into the remote store vs block size (dd bs=N), MB/s
#   Fig 5.2  stat, open/close, read 8 KB, write 8 KB, cold sequential read bandwidth
#   Fig 5.3  Andrew-like copy / list / scan / make -j2 / delete of a FILES-file C tree
# Prints markdown tables (medians of RUNS, ranges, ratios); raw figures go to bench/out/.
#
# Usage: bench/protocols.sh
# Environment:
#   RUNS=3            runs, interleaved over configurations so drift hits all alike
#   FILES=300         files in the C tree
#   BIG_MB=128        Fig 5.1 file (Parrot: 128 MB); Fig 5.2 reads a file of OPS_MB=64
#   BLOCKS="4096 16384 65536 262144 1048576"   Fig 5.1 block sizes (Parrot's 4K..1M)
#   PROTOS="http dav ftp sftp s3 chirp file+cache"   roam's protocols
#   FIGS="1 2 3"      which figures to run
#   CONFIGS=REGEX     only the configurations whose label matches (e.g. '^(roam [a-z+0-9]+|sshfs|rclone .*)$')
#   ROAM=target/release/roam
#
# Configurations: `roam P` (defaults: T_read 30 s, the cache is used; T_write 0, a change
# is uploaded inside close), `roam P, FUSE` (the same defaults through `roam run --fuse`:
# roam's FUSE frontend in a private mount namespace instead of ptrace), `roam P, T_read 0` (every open and stat asks the server: what
# "uncached" means for roam, which always keeps copies), `roam P, T_write 5` (uploads 5 s
# after the last close, coalesced, as rclone's default --vfs-write-back 5s), `sshfs` (sftp), `rclone P` (`rclone mount --vfs-cache-mode full`, which every
# write stage needs; dav, ftp, sftp, s3, and http read-only). HTTP is read-only: only
# list and scan of the served tree (and reads in Fig 5.2) run there.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
RUNS=${RUNS:-3}
FILES=${FILES:-300}
BIG_MB=${BIG_MB:-128}
OPS_MB=${OPS_MB:-64}
BLOCKS=${BLOCKS:-"4096 16384 65536 262144 1048576"}
PROTOS=${PROTOS:-"http dav ftp sftp s3 chirp file+cache"}
FIGS=${FIGS:-"1 2 3"}
. bench/lib.sh
# Raw figures, one file per configuration and figure; kept, so an interrupted run still
# tells what it measured, and TABLES_ONLY=DIR prints the tables of an earlier run.
out=${TABLES_ONLY:-bench/out/protocols-$(date -u +%Y%m%dT%H%M)}
mkdir -p "$out"

# ---- configurations: label -> protocol, tool ----
configs=()
for p in $PROTOS; do
    configs+=("roam $p" "roam $p, FUSE" "roam $p, T_read 0")
    [ "$p" = http ] || configs+=("roam $p, T_write 5") # nothing to write on HTTP
    case $p in
    sftp) configs+=("sshfs" "rclone sftp") ;;
    dav | ftp | s3 | http) configs+=("rclone $p") ;;
    esac
done
# CONFIGS=REGEX keeps only the configurations whose label matches it.
if [ -n "${CONFIGS:-}" ]; then
    kept=()
    for c in "${configs[@]}"; do [[ $c =~ $CONFIGS ]] && kept+=("$c"); done
    configs=("${kept[@]}")
fi
proto_of() { local c=${1%%,*}; case $c in sshfs) echo sftp ;; *) echo "${c#* }" ;; esac; }
tool_of() { echo "${1%% *}"; }

if [ -z "${TABLES_ONLY:-}" ]; then
# One build for both: built apart, cargo would rebuild shared dependencies with other features.
[ -n "${ROAM:-}" ] || cargo build --release -q -p roam -p roam-testkit >&2
roam_binary
fixtures=$root/target/release/roam-fixtures
[ -x "$fixtures" ] || cargo build --release -q -p roam -p roam-testkit >&2
for tool in sshfs rclone fusermount3 python3 make cc; do
    command -v $tool >/dev/null || { echo "protocols.sh needs $tool" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/roam-protocols.XXXXXX")
chmod 755 "$work" # nginx's workers (nobody) read the served trees
fixture_pid=
cleanup() {
    for m in "$work"/mnt/*; do mountpoint -q "$m" 2>/dev/null && fusermount3 -u "$m"; done
    [ -z "$fixture_pid" ] || { kill "$fixture_pid"; wait "$fixture_pid" || true; }
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { echo "[protocols.sh] $*" >&2; }

# ---- the served trees: DIR/KIND/{src, ops/small, ops/big}; servers own them from start ----
kind_of() { [ "$1" = file+cache ] && echo file || echo "$1"; }
servers=()
for p in $PROTOS; do
    k=$(kind_of "$p")
    c_tree "$work/srv/$k/src" "$FILES"
    mkdir -p "$work/srv/$k/ops"
    head -c 65536 /dev/urandom > "$work/srv/$k/ops/small"
    head -c $((OPS_MB << 20)) /dev/urandom > "$work/srv/$k/ops/big"
    [ "$k" = file ] || servers+=("$k")
done
chmod -R a+rX "$work/srv"
log "starting servers: ${servers[*]}"
start_fixtures "$fixtures" "$work" "${servers[@]}"
FILE_URL="file+cache://$work/srv/file" FILE_ENV=
printf '[cache]\nt_read = 0\n' > "$work/t_read0.toml"
printf '[cache]\nt_write = 5\n' > "$work/t_write5.toml"
head -c $((BIG_MB << 20)) /dev/urandom > "$work/big"

# Sets CMD (the command prefix) and DIR (the remote tree as the program sees it) for
# configuration $1 in run $2, mounting what needs mounting.
enter() {
    local c=$1 r=$2 p k var
    p=$(proto_of "$c") k=$(kind_of "$p")
    local tag=${c//[^a-z0-9]/_}-$r
    case $(tool_of "$c") in
    roam)
        var=$(echo "$k" | tr a-z A-Z)
        local url_var=${var}_URL env_var=${var}_ENV conf=$work/none.toml
        [[ $c == *"T_read 0" ]] && conf=$work/t_read0.toml
        [[ $c == *"T_write 5" ]] && conf=$work/t_write5.toml
        # shellcheck disable=SC2206 # the ENV assignments are space-separated words
        local platform=()
        [[ $c == *", FUSE" ]] && platform=(--fuse)
        CMD=(env ${!env_var} ROAM_CACHE_DIR="$work/cache/$tag" ROAM_CONFIG="$conf" "$ROAM" run "${platform[@]}" -m "/r=${!url_var}" --)
        DIR=/r
        ;;
    sshfs)
        DIR=$work/mnt/$tag
        mkdir -p "$DIR"
        sshfs -o "IdentityFile=$SFTP_KEY,UserKnownHostsFile=$SFTP_KNOWN_HOSTS,port=$SFTP_PORT" \
            "root@127.0.0.1:$SFTP_PATH" "$DIR"
        CMD=(env)
        ;;
    rclone)
        DIR=$work/mnt/$tag
        mkdir -p "$DIR"
        local remote
        case $p in
        dav) remote=(:webdav: --webdav-url "${DAV_URL/dav:/http:}") ;;
        ftp) remote=(:ftp: --ftp-host 127.0.0.1 --ftp-port "$FTP_PORT" --ftp-user "$FTP_USER" --ftp-pass "$(rclone obscure "$FTP_PASSWORD")") ;;
        sftp) remote=(":sftp:$SFTP_PATH" --sftp-host 127.0.0.1 --sftp-port "$SFTP_PORT" --sftp-user root --sftp-key-file "$SFTP_KEY" --sftp-known-hosts-file "$SFTP_KNOWN_HOSTS") ;;
        s3) remote=(":s3:$S3_BUCKET" --s3-provider Other --s3-endpoint "$S3_ENDPOINT" --s3-access-key-id "$S3_ACCESS_KEY" --s3-secret-access-key "$S3_SECRET_KEY") ;;
        http) remote=(:http: --http-url "$HTTP_URL") ;;
        esac
        # The image exports AWS_CA_BUNDLE, which rclone's S3 client refuses on plain http.
        env -u AWS_CA_BUNDLE rclone mount "${remote[@]}" "$DIR" --daemon --vfs-cache-mode full \
            --cache-dir "$work/rclone/$tag" --log-file "$work/rclone-$tag.log"
        CMD=(env)
        ;;
    esac
    if [ "${DIR#/r}" = "$DIR" ]; then
        local i
        for i in $(seq 100); do mountpoint -q "$DIR" && return; sleep 0.1; done
        log "could not mount $c"; return 1
    fi
}

leave() {
    [ "$DIR" != /r ] || return 0
    fusermount3 -u "$DIR" 2>/dev/null || { sleep 2; fusermount3 -u "$DIR"; } || log "could not unmount $DIR"
}

# ---- the figures, each timed inside the program's own shell ----
fig1() { # MB/s per block size: copy $work/big into the remote tree with dd, close included
    "${CMD[@]}" sh -c '
for bs in $3; do
    a=$(date +%s.%N); dd if="$2" of="$1/fig51" bs=$bs 2>/dev/null || { echo fail; continue; }; b=$(date +%s.%N)
    rm -f "$1/fig51"
    echo "$a $b $4" | awk "{printf \"%.0f\n\", \$3 / 1e6 / (\$2 - \$1)}"
done' sh "$DIR" "$work/big" "$BLOCKS" "$((BIG_MB << 20))" | paste -sd' '
}

fig2() { "${CMD[@]}" python3 "$root/bench/protocol_ops.py" "$DIR" "$1"; }

READONLY_PHASES='
t() { date +%s.%N; }
a=$(t); ls -lR "$1" > /dev/null; b=$(t)
grep -r -c int "$1" > /dev/null; cat $(find "$1" -name "*.c") | wc -c > /dev/null; c=$(t)
echo "$a $b $c" | awk "{printf \"- %.3f %.3f - - ok\n\", \$2-\$1, \$3-\$2}"
'
fig3() {
    if [ "$(proto_of "$1")" = http ]; then
        "${CMD[@]}" sh -c "$READONLY_PHASES" sh "$DIR/src"
    else
        "${CMD[@]}" sh -c "$ANDREW_PHASES" sh "$DIR/src" "$DIR/dst-$2" 2>>"$out/err.log"
    fi
}

writable() { [ "$(proto_of "$1")" != http ]; }
for r in $(seq "$RUNS"); do
    for c in "${configs[@]}"; do
        log "run $r/$RUNS: $c"
        f=$out/${c//[^a-z0-9]/_}
        enter "$c" "$r" || continue
        [[ " $FIGS " != *" 2 "* ]] || fig2 "$r" >> "$f.fig2" 2>>"$out/err.log" || log "$c: fig 5.2 failed"
        leave
        if [[ " $FIGS " == *" 1 "* ]] && writable "$c" && [[ $c != *"T_read 0" ]]; then
            enter "$c" "$r-1" && { fig1 >> "$f.fig1" 2>>"$out/err.log" || log "$c: fig 5.1 failed"; leave; }
        fi
        if [[ " $FIGS " == *" 3 "* ]]; then
            enter "$c" "$r-3" && { fig3 "$c" "$r" | tail -1 >> "$f.fig3" || log "$c: fig 5.3 failed"; leave; }
        fi
    done
done
fi

# ---- tables ----
col() { awk -v c="$2" '$c != "-" {print $c}' "$1"; }
cell() { # median (min–max) of column $2 of file $1
    local v; v=$(col "$1" "$2")
    [ -n "$v" ] || { echo "–"; return; }
    echo "$(median <<<"$v") ($(sort -g <<<"$v" | head -1)–$(sort -g <<<"$v" | tail -1))"
}
raw() { echo "$out/${1//[^a-z0-9]/_}.$2"; }

if [[ " $FIGS " == *" 1 "* ]]; then
    echo "### Fig 5.1: copy of a $BIG_MB MiB file into the remote store (MB/s, median (min–max))"
    echo
    echo "| config |$(for b in $BLOCKS; do printf ' %s |' "$((b / 1024)) KiB"; done)"
    echo "|---|$(for b in $BLOCKS; do printf -- '---|'; done)"
    for c in "${configs[@]}"; do
        f=$(raw "$c" fig1); [ -s "$f" ] || continue
        row="| $c |"; i=1
        for b in $BLOCKS; do row+=" $(cell "$f" $i) |"; i=$((i + 1)); done
        echo "$row"
    done
    echo
fi

if [[ " $FIGS " == *" 2 "* ]]; then
    echo "### Fig 5.2: per-call latency (ms) and cold read bandwidth, median (min–max)"
    echo
    echo "| config | stat | open/close | read 8 KB | write 8 KB (+close) | read MB/s |"
    echo "|---|---|---|---|---|---|"
    for c in "${configs[@]}"; do
        f=$(raw "$c" fig2); [ -s "$f" ] || { echo "| $c | failed | | | | |"; continue; }
        echo "| $c | $(cell "$f" 1) | $(cell "$f" 2) | $(cell "$f" 3) | $(cell "$f" 4) | $(cell "$f" 5) |"
    done
    echo
fi

if [[ " $FIGS " == *" 3 "* ]]; then
    echo "### Fig 5.3: Andrew-like benchmark, seconds, median of $RUNS"
    echo
    echo "| config | copy | list | scan | make -j2 | delete | total (min–max) | vs rclone | vs sshfs | failed phases |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    total() { awk '{t=0; for (i=1;i<=5;i++) if ($i != "-") t+=$i; print t}' "$1"; }
    for c in "${configs[@]}"; do
        f=$(raw "$c" fig3); [ -s "$f" ] || { echo "| $c | not run |||||||||"; continue; }
        row="| $c |"
        for i in 1 2 3 4 5; do v=$(col "$f" $i); row+=" $( [ -n "$v" ] && median <<<"$v" || echo –) |"; done
        t=$(total "$f" | median)
        row+=" $t ($(total "$f" | sort -g | head -1)–$(total "$f" | sort -g | tail -1)) |"
        for other in "rclone $(proto_of "$c")" sshfs; do
            o=$(raw "$other" fig3)
            if [ "$(tool_of "$c")" = roam ] && [ -s "$o" ] && { [ "$other" != sshfs ] || [ "$(proto_of "$c")" = sftp ]; }; then
                row+=" $(awk -v a="$t" -v b="$(total "$o" | median)" 'BEGIN{printf "%.2f×", a/b}') |"
            else
                row+=" |"
            fi
        done
        fails=$(awk '$6 != "ok" {print $6}' "$f" | sort | uniq -c | awk '{printf "%s in %d run(s) ", $2, $1}')
        echo "$row ${fails:-none} |"
    done
    echo
fi
echo "$(nproc) CPUs; RUNS=$RUNS, FILES=$FILES; $(date -u '+%Y-%m-%d %H:%M') UTC; rclone $(rclone version | head -1 | awk '{print $2}'), $(sshfs --version 2>&1 | head -1)."
