#!/usr/bin/env bash
# Per-system-call overhead of roam vs native, strace and proot
# (Ufo Table III / Parrot Fig 2.1). Prints a markdown table on stdout.
#
# Usage: bench/syscalls.sh            (from any directory)
#
# Environment:
#   RUNS=5        runs of the microbenchmark per configuration; the table shows their median
#   ITERS=10000   iterations per batch (see bench/syscalls.c)
#   BATCHES=7     batches per run; each run reports the median batch
#   CPU=1         everything (tracer and tracee) is pinned to this CPU with taskset
#   BIG_MB=100    size of the sequential-read file, MiB
#   ROAM=target/release/roam   roam binary (relative to the repo root); built with
#                 `cargo build --release -p roam` if missing
#   STORM_ONLY=1  only the remote-stat storm (below); the main table keeps native alone
#   ROAM_CMD="$ROAM run --"    command prefix for the roam configuration (shell words);
#                 setting it skips the build
#
# Configurations, interleaved run by run so drift hits all alike: native, roam run (with
# its fast path: the preloaded library makes calls on local names natively), roam run
# without it (ROAM_FASTPATH=0), roam run with ptrace stops (ROAM_NOTIFY=0), roam run
# --fuse, strace -f, strace -f --seccomp-bpf -e trace=%file, proot; then the benchmark
# built statically (no library can be preloaded into it), natively and under roam run. A
# configuration whose tool is missing or fails a smoke test is skipped with a note. Raw figures and the report are also
# saved in bench/out/.
#
# Then the remote storm (gVisor's row): `stat`, and `open`+`close`, (ITERS calls a batch)
# of a cached remote file, a copy of the small file on a `file+cache://` mount (no
# network, the remote-file path: roam's cache and skeleton), under roam run (the listener
# writes the `struct stat` itself and hands roam's fd of the copy over), with ROAM_AFAR=0
# (the tracer takes the thread over for each), with stops (ROAM_NOTIFY=0) and under roam
# run --fuse, beside native calls on the local file. Skipped with ROAM_CMD.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD

RUNS=${RUNS:-5}
ITERS=${ITERS:-10000}
BATCHES=${BATCHES:-7}
CPU=${CPU:-1}
BIG_MB=${BIG_MB:-100}
ROAM=${ROAM:-target/release/roam}

notes=()
note() { echo "NOTE: $*" >&2; notes+=("$*"); }
log() { echo "[syscalls.sh] $*" >&2; }
die() { echo "syscalls.sh: $*" >&2; exit 1; }

for v in RUNS ITERS BATCHES CPU BIG_MB; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -ge 0 ]] || die "$v must be a non-negative integer (got '${!v}')"
done
((RUNS >= 1 && ITERS >= 1 && BATCHES >= 1 && BIG_MB >= 1)) || die "RUNS, ITERS, BATCHES, BIG_MB must be >= 1"
command -v cc >/dev/null || die "cc not found"
command -v taskset >/dev/null || die "taskset not found (util-linux)"
taskset -c "$CPU" true 2>/dev/null || die "cannot pin to CPU $CPU (set CPU=...; this machine has $(nproc) CPUs)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/roam-bench-syscalls.XXXXXX")
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- build ----
mkdir -p bench/out
bin=bench/out/syscalls
cc -O2 -Wall -o "$bin" bench/syscalls.c
bin=$root/$bin
static_bin=
if cc -O2 -Wall -static -o bench/out/syscalls-static bench/syscalls.c 2>/dev/null; then
    static_bin=$root/bench/out/syscalls-static
else
    note "skipped the static rows: cc -static failed (no static libc?)"
fi

# ---- data files ----
small=$tmp/small
big=$tmp/big
head -c 65536 /dev/urandom >"$small"
log "creating ${BIG_MB} MiB file"
head -c $((BIG_MB * 1048576)) /dev/urandom >"$big"

# ---- configurations ----
names=()    # table label per configuration
prefixes=() # command prefix per configuration, as a NUL-free string of shell words for eval
bins=()     # the benchmark binary per configuration

add_config() { # label, prefix (shell words, already quoted), binary (default: the dynamic one)
    local label=$1 prefix=$2 out
    local -a cmd
    eval "cmd=($prefix)"
    # The program must really run: a stub that exits 0 without running it does not count.
    if ! out=$(cd "$tmp" && taskset -c "$CPU" "${cmd[@]}" /bin/echo roam-bench-smoke 2>&1 </dev/null) ||
        ! grep -qx roam-bench-smoke <<<"$out"; then
        note "skipped '$label': smoke test \`$prefix /bin/echo roam-bench-smoke\` failed or printed nothing: $(printf '%s' "$out" | tail -n 3 | tr '\n' ' ')"
        return
    fi
    names+=("$label")
    prefixes+=("$prefix")
    bins+=("${3:-$bin}")
}

add_config native ""

if [[ -n ${ROAM_CMD:-} ]]; then
    add_config "roam run" "$ROAM_CMD"
else
    if [[ ! -x $ROAM ]]; then
        if ! command -v cargo >/dev/null; then
            note "skipped 'roam run': $ROAM missing and cargo not found"
        else
            log "$ROAM not found; building: cargo build --release -p roam"
            if ! cargo build --release -p roam >"$tmp/cargo.log" 2>&1; then
                tail -n 20 "$tmp/cargo.log" >&2
                note "skipped 'roam run': \`cargo build --release -p roam\` failed (log tail above)"
            elif [[ ! -x $ROAM ]]; then
                note "skipped 'roam run': build succeeded but $ROAM does not exist"
            fi
        fi
    fi
    if [[ -x $ROAM ]]; then
        add_config "roam run" "$(printf '%q' "$(realpath "$ROAM")") run --"
        add_config "roam run, no fast path" "env ROAM_FASTPATH=0 $(printf '%q' "$(realpath "$ROAM")") run --"
        # The calls as ptrace stops rather than notifications to roam's listener (the
        # default on Linux 6.6+), as `roam attach` and older kernels use.
        add_config "roam run, stops" "env ROAM_NOTIFY=0 $(printf '%q' "$(realpath "$ROAM")") run --"
        # The platform without ptrace: the namespace mounted through FUSE in the program's
        # own user and mount namespace; local names never reach roam.
        add_config "roam run --fuse" "$(printf '%q' "$(realpath "$ROAM")") run --fuse --"
    fi
fi

if command -v strace >/dev/null; then
    add_config "strace -f" "strace -f -o /dev/null"
    add_config "strace -f --seccomp-bpf -e trace=%file" "strace -f --seccomp-bpf -e trace=%file -o /dev/null"
else
    note "skipped 'strace -f' and 'strace -f --seccomp-bpf': strace not installed"
fi

if command -v proot >/dev/null; then
    pv=$(proot --version 2>&1 | grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' | head -n 1 || true)
    add_config "proot${pv:+ $pv}" "proot"
else
    note "skipped 'proot': proot not installed"
fi

if [[ -n $static_bin ]]; then
    add_config "native, static" "" "$static_bin"
    if [[ -n ${ROAM_CMD:-} ]]; then
        add_config "roam run, static" "$ROAM_CMD" "$static_bin"
    elif [[ -x $ROAM ]]; then
        add_config "roam run, static" "$(printf '%q' "$(realpath "$ROAM")") run --" "$static_bin"
    fi
fi

[[ ${names[0]-} == native ]] || die "native configuration failed its smoke test"
nconf=${#names[@]}

# ---- runs ----
raw=$tmp/raw.tsv # config-index run op value
: >"$raw"
failed=()
if [[ ${STORM_ONLY:-} == 1 ]]; then
    nconf=1
fi
for ((r = 1; r <= RUNS; r++)); do
    for ((c = 0; c < nconf; c++)); do
        [[ -z ${failed[c]-} ]] || continue
        log "run $r/$RUNS: ${names[c]}"
        eval "cmd=(${prefixes[c]})"
        out=$tmp/out.$c.$r
        rc=0
        (cd "$tmp" && taskset -c "$CPU" "${cmd[@]}" "${bins[c]}" --iters "$ITERS" --batches "$BATCHES" \
            --file "$small" --big "$big" >"$out" 2>"$out.err" </dev/null) || rc=$?
        if ((rc != 0)); then
            failed[c]=1
            note "'${names[c]}' failed on run $r (exit status $rc), dropped: $(tail -n 3 "$out.err" | tr '\n' ' ')"
            continue
        fi
        for op in getpid stat open_close read_1B read_8KB write_8KB seqread_MBps; do
            v=$(awk -v op="$op" '$1 == op { print $2 }' "$out")
            if [[ -z $v ]]; then
                failed[c]=1
                note "'${names[c]}' run $r printed no '$op' figure, dropped; stderr: $(tail -n 3 "$out.err" | tr '\n' ' ')"
                continue 2
            fi
            printf '%s\t%s\t%s\t%s\n' "$c" "$r" "$op" "$v" >>"$raw"
        done
    done
done
[[ -z ${failed[0]-} ]] || die "native configuration failed"

# ---- the remote-stat storm ----
storm_names=() storm_prefixes=()
if [[ -z ${ROAM_CMD:-} && -x $ROAM ]]; then
    mkdir -p "$tmp/remote" "$tmp/cache"
    cp "$small" "$tmp/remote/small"
    r=$(printf '%q' "$(realpath "$ROAM")")
    mount="-m /w=file+cache://$tmp/remote"
    storm_names=("native, local file" "roam run" "roam run, ROAM_AFAR=0" "roam run, stops" "roam run --fuse")
    storm_prefixes=("" "$r run $mount --" "env ROAM_AFAR=0 $r run $mount --"
        "env ROAM_NOTIFY=0 $r run $mount --" "$r run --fuse $mount --")
    # The copy is fetched once, into a cache every run shares.
    export ROAM_CACHE_DIR=$tmp/cache ROAM_CONFIG=$tmp/none.toml
    eval "$r run $mount -- cat /w/small" >/dev/null || note "the storm's warm-up read of /w/small failed"
fi
storm_raw=$tmp/storm.tsv # config-index run µs
: >"$storm_raw"
for ((r = 1; r <= RUNS && ${#storm_names[@]} > 0; r++)); do
    for ((c = 0; c < ${#storm_names[@]}; c++)); do
        log "storm run $r/$RUNS: ${storm_names[c]}"
        eval "cmd=(${storm_prefixes[c]})"
        file=/w/small
        ((c > 0)) || file=$small
        out=$tmp/storm.$c.$r
        if (cd "$tmp" && taskset -c "$CPU" "${cmd[@]}" "$bin" --iters "$ITERS" --batches "$BATCHES" \
            --file "$file" --big "$small" >"$out" 2>"$out.err" </dev/null); then
            awk -v c="$c" -v r="$r" '$1 == "stat" || $1 == "open_close" { print c "\t" r "\t" $1 "\t" $2 }' "$out" >>"$storm_raw"
        else
            note "storm '${storm_names[c]}' failed on run $r: $(tail -n 3 "$out.err" | tr '\n' ' ')"
        fi
    done
done

# ---- report ----
ops=(getpid stat open_close read_1B read_8KB write_8KB seqread_MBps)
heads=("getpid" "stat" "open+close" "read 1 B" "read 8 KB" "write 8 KB" "seq read")

stats() { # config-index op [raw file] -> "median min max" over the runs
    awk -F'\t' -v c="$1" -v op="$2" '$1 == c && $3 == op { print $4 }' "${3:-$raw}" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) exit 1
             m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
             print m, v[1], v[NR] }'
}
fmt() { # value -> 3 significant digits (integers from 1000 up)
    awk -v x="$1" 'BEGIN { a = x < 0 ? -x : x
        if (a >= 100) printf "%.0f", x; else if (a >= 10) printf "%.1f", x
        else if (a >= 1) printf "%.2f", x; else printf "%.3f", x }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.10g", a / b }'; }

declare -A med lo hi
for ((c = 0; c < nconf; c++)); do
    [[ -z ${failed[c]-} ]] || continue
    for op in "${ops[@]}"; do
        read -r med[$c,$op] lo[$c,$op] hi[$c,$op] < <(stats "$c" "$op")
    done
done

row_sep() { printf '|---'; for _ in "${heads[@]}"; do printf '|---'; done; printf '|\n'; }
report() {
    echo "## Per-syscall cost: roam vs native, strace, proot (bench/syscalls.sh)"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(uname -sr); $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //' || echo '?')); pinned to CPU $CPU; git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo '+dirty')."
    echo "Each run: $BATCHES batches of $ITERS calls per op, median batch; table: median of $RUNS runs."
    echo "Ratios are time relative to native (>1× is slower); for seq read (${BIG_MB} MiB file in page cache, 1 MiB reads) native MB/s ÷ config MB/s. MB = 10^6 bytes."
    echo
    printf '| config |'; printf ' %s |' "${heads[@]}"; echo; row_sep
    for ((c = 0; c < nconf; c++)); do
        [[ -z ${failed[c]-} ]] || { printf '| %s | failed, see notes |\n' "${names[c]}"; continue; }
        printf '| %s |' "${names[c]}"
        for op in "${ops[@]}"; do
            v=${med[$c,$op]} n=${med[0,$op]}
            if [[ $op == seqread_MBps ]]; then unit=" MB/s" rt=$(ratio "$n" "$v"); else unit=" µs" rt=$(ratio "$v" "$n"); fi
            if ((c == 0)); then printf ' %s%s |' "$(fmt "$v")" "$unit"
            else printf ' %s%s (%s×) |' "$(fmt "$v")" "$unit" "$(fmt "$rt")"; fi
        done
        echo
    done
    echo
    echo "Range over the $RUNS runs, min–max (µs; seq read MB/s):"
    echo
    printf '| config |'; printf ' %s |' "${heads[@]}"; echo; row_sep
    for ((c = 0; c < nconf; c++)); do
        [[ -z ${failed[c]-} ]] || continue
        printf '| %s |' "${names[c]}"
        for op in "${ops[@]}"; do printf ' %s–%s |' "$(fmt "${lo[$c,$op]}")" "$(fmt "${hi[$c,$op]}")"; done
        echo
    done
    if [[ -s $storm_raw ]]; then
        echo
        echo "Remote storm: \`stat\` and \`open\`+\`close\` of a cached remote file (\`file+cache://\`, $ITERS calls a batch), µs a call, median of $RUNS runs (min–max), and the ratio to the native call on the local file:"
        echo
        echo "| config | stat | open+close |"
        echo "|---|---|---|"
        local op n v lo_ hi_
        for ((c = 0; c < ${#storm_names[@]}; c++)); do
            printf '| %s |' "${storm_names[c]}"
            for op in stat open_close; do
                read -r n _ _ < <(stats 0 "$op" "$storm_raw") || n=
                if read -r v lo_ hi_ < <(stats "$c" "$op" "$storm_raw") && [[ -n $n ]]; then
                    printf ' %s µs (%s–%s), %s× |' "$(fmt "$v")" "$(fmt "$lo_")" "$(fmt "$hi_")" "$(fmt "$(ratio "$v" "$n")")"
                else
                    printf ' – |'
                fi
            done
            echo
        done
    fi
    if ((${#notes[@]})); then
        echo
        for n in "${notes[@]}"; do echo "Note: $n"; done
    fi
}

stamp=$(date -u +%Y%m%dT%H%M%SZ)
report | tee "bench/out/syscalls-$stamp.md"
{
    printf 'config\trun\top\tvalue\n'
    awk -F'\t' -v OFS='\t' 'NR == FNR { name[NR - 1] = $0; next } { $1 = name[$1]; print }' \
        <(printf '%s\n' "${names[@]}") "$raw"
} >"bench/out/syscalls-$stamp.tsv"
log "saved bench/out/syscalls-$stamp.md and .tsv"
