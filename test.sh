#!/usr/bin/env bash
# Runs every test of roam: formatting and lint gates, then the whole workspace suite
# (unit tests, driver tests against real servers, end-to-end `roam run` tests).
# Needs the servers .ci/run installs (nginx-light, python3, a C compiler with static libc).
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# This image exports AWS_CA_BUNDLE, which some S3 clients mishandle against plain-http
# test servers (shared/TESTING.md); no test needs it.
unset AWS_CA_BUNDLE
cargo fmt --all -- --check
# The example extensions are their own workspace (built for wasm32-wasip1 and natively).
cargo fmt --all --manifest-path extensions/Cargo.toml -- --check
cargo clippy --release -j2 --manifest-path extensions/Cargo.toml --target-dir target/ext-build -- -D warnings
cargo clippy --workspace --all-targets -j2 -- -D warnings
# The archive extension's zip and tar parsers, fuzzed natively (proptest; bench/fuzz.sh runs longer).
cargo test -j2 --manifest-path extensions/Cargo.toml -p archive --target-dir target/ext-build
cargo test --workspace -j2 -- --test-threads=4
