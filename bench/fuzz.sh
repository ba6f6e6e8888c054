#!/usr/bin/env bash
# The long fuzz run of issue 14: the proptest properties of every parser of untrusted input
# that `cargo test` runs with few cases (roam_testkit::fuzz::DEFAULT_CASES), here in rounds
# of CASES cases per property, each round with a fresh random seed, round-robin over the
# parsers until the time budget is spent. Debug builds, as in CI: overflow checks on.
# Prints a markdown table (parser, cases run, wall seconds, CPU seconds, failed rounds);
# the output of a failed round (its minimal failing input) is kept in LOGS.
#
# Usage: bench/fuzz.sh [--minutes N] [--cases N] [PARSER...]   (default: 15 minutes,
#   2000 cases, every parser)
# Environment: LOGS=target/fuzz-logs
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=15
cases=2000
only=()
while [ $# -gt 0 ]; do
    case $1 in
        --minutes) minutes=$2; shift 2 ;;
        --cases) cases=$2; shift 2 ;;
        *) only+=("$1"); shift ;;
    esac
done
LOGS=${LOGS:-target/fuzz-logs}
mkdir -p "$LOGS"

# The sum of the decimal numbers given.
sum() { awk 'BEGIN { for (i = 1; i < ARGC; i++) s += ARGV[i]; print s }' "$@"; }

# The test executable cargo builds for ARGS (the first one it reports).
executable() {
    cargo test -j1 --no-run --message-format=json "$@" 2>/dev/null |
        grep -o '"executable":"[^"]*"' | head -1 | cut -d'"' -f4
}

echo "building the test binaries ..." >&2
drivers=$(executable -p roam-drivers --lib)
codec=$(executable -p roam-ext-abi --test fuzz)
config=$(executable -p roam --bin roam)
archive=$(executable --manifest-path extensions/Cargo.toml -p archive --target-dir target/ext-build)

# parser|executable|libtest filters (the properties only, not the regression tests)
suites=(
    "autoindex HTML|$drivers|http::autoindex::fuzz::"
    "FTP LIST/MLSD|$drivers|ftp::fuzz::any_bytes ftp::fuzz::mutated ftp::fuzz::mlst ftp::fuzz::fact --skip sftp::"
    "netrc|$drivers|ftp::fuzz::netrc --skip sftp::"
    "WebDAV multistatus|$drivers|dav::fuzz::"
    "S3 XML|$drivers|s3::fuzz::"
    "Chirp replies|$drivers|chirp::fuzz::any_bytes chirp::fuzz::mutated chirp::fuzz::stat"
    "ssh_config|$drivers|sftp::fuzz::ssh_configs sftp::fuzz::wildcards"
    "known_hosts|$drivers|sftp::fuzz::known_hosts sftp::fuzz::mutated_keys"
    "extension codec|$codec|"
    "zip|$archive|fuzz::mutated_zips fuzz::honest_zips fuzz::any_bytes"
    "tar|$archive|fuzz::mutated_tars"
    "roam.toml|$config|config::fuzz::"
)
declare -A props runs ran wall cpu failed
selected=()
for suite in "${suites[@]}"; do
    IFS='|' read -r parser exe filters <<< "$suite"
    if [ ${#only[@]} -gt 0 ] && [[ ! " ${only[*]} " == *" $parser "* ]]; then
        continue
    fi
    read -ra f <<< "$filters"
    props[$parser]=$("$exe" --list "${f[@]}" 2>/dev/null | grep -c ': test$')
    ran[$parser]=0 wall[$parser]=0 cpu[$parser]=0 failed[$parser]=0 runs[$parser]=0
    selected+=("$suite")
done

deadline=$(($(date +%s) + minutes * 60))
TIMEFORMAT='%3U %3S'
while [ "$(date +%s)" -lt "$deadline" ]; do
    for suite in "${selected[@]}"; do
        [ "$(date +%s)" -lt "$deadline" ] || break
        IFS='|' read -r parser exe filters <<< "$suite"
        read -ra f <<< "$filters"
        log="$LOGS/$(echo "$parser" | tr ' /.' '___')-${runs[$parser]}.log"
        start=$(date +%s.%N)
        # A round that outlives ten minutes is a hang, and counts as a failure.
        if { time PROPTEST_CASES=$cases RUST_BACKTRACE=0 timeout 600 \
            "$exe" --test-threads=1 "${f[@]}" > "$log" 2>&1; } 2> "$log.cpu"; then
            rm "$log"
        else
            failed[$parser]=$((failed[$parser] + 1))
            echo "$parser: a round failed, see $log" >&2
        fi
        end=$(date +%s.%N)
        read -r user sys < "$log.cpu"
        rm "$log.cpu"
        runs[$parser]=$((runs[$parser] + 1))
        ran[$parser]=$((ran[$parser] + cases * props[$parser]))
        wall[$parser]=$(sum "${wall[$parser]}" "$end" "-$start")
        cpu[$parser]=$(sum "${cpu[$parser]}" "$user" "$sys")
    done
done

echo "| parser | properties | cases run | seconds | CPU seconds | failed rounds |"
echo "|---|---|---|---|---|---|"
total_cases=0 total_cpu=0 total_failed=0
for suite in "${selected[@]}"; do
    IFS='|' read -r parser _ _ <<< "$suite"
    printf '| %s | %d | %d | %.0f | %.0f | %d |\n' "$parser" "${props[$parser]}" \
        "${ran[$parser]}" "${wall[$parser]}" "${cpu[$parser]}" "${failed[$parser]}"
    total_cases=$((total_cases + ran[$parser]))
    total_cpu=$(sum "$total_cpu" "${cpu[$parser]}")
    total_failed=$((total_failed + failed[$parser]))
done
printf '| **total** | | %d | | %.0f | %d |\n' "$total_cases" "$total_cpu" "$total_failed"
[ "$total_failed" -eq 0 ]
