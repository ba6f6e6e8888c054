#!/usr/bin/env bash
# Builds roam as one static executable (musl libc linked in): it runs on any x86_64 Linux
# whatever its libc (an old glibc, Alpine, a minimal HPC or grid node), copied there alone.
#
# Usage: scripts/static.sh [release|dev]   (default release; dev builds much faster)
#   prints the binary's path: TARGET/x86_64-unknown-linux-musl/{release,debug}/roam
# Environment: CARGO_TARGET_DIR. Needs rustup; the C code of dependencies (ring) is compiled
# with musl-gcc where present (Debian: musl-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
triple=x86_64-unknown-linux-musl
case ${1:-release} in
release) flags=(--release) out=release ;;
dev) flags=() out=debug ;;
*) echo "usage: $0 [release|dev]" >&2; exit 2 ;;
esac
rustup target add "$triple" >/dev/null
cargo build --target "$triple" -p roam "${flags[@]}" >&2
bin=${CARGO_TARGET_DIR:-$PWD/target}/$triple/$out/roam
# A static executable asks for no program interpreter (no ld.so, no libc to find).
if readelf -l "$bin" | grep -q 'program interpreter'; then
    echo "$bin is not static" >&2
    exit 1
fi
echo "$bin"
