#!/usr/bin/env bash
# Builds roam's example extensions (extensions/: archive, id3, id3merge, merge3, rot13,
# hotlist, camera, zlib, seal, stride) for WebAssembly and installs them where roam looks for
# extensions, so that `photos.zip#/`, `roam find --ext id3`, `ext:rot13:URL` mounts,
# `[[resolver]] ext = "merge3"`, `[cache] policy = "hotlist"`, `src:camera:URL` mounts,
# `codec:zlib:URL` and `codec:seal:URL` mounts and `[cache] readahead = "stride"` work.
#
# Usage: scripts/install-extensions.sh [DIR]
#   DIR defaults to $ROAM_EXT_DIR, else ${XDG_CONFIG_HOME:-~/.config}/roam/extensions (roam's
#   own default; a roam.toml with `[extensions] dir` needs DIR given).
# Environment: CARGO_TARGET_DIR (the build goes to its ext-build/). Needs Rust (rustup).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-${ROAM_EXT_DIR:-${XDG_CONFIG_HOME:-$HOME/.config}/roam/extensions}}
build=${CARGO_TARGET_DIR:-$PWD/target}/ext-build
names=(archive id3 id3merge merge3 rot13 hotlist camera zlib seal stride)

rustup target add wasm32-wasip1 >/dev/null
packages=()
for n in "${names[@]}"; do packages+=(-p "$n"); done
cargo build --release --manifest-path extensions/Cargo.toml --target wasm32-wasip1 \
    --target-dir "$build" "${packages[@]}"
for n in "${names[@]}"; do
    install -Dm644 "$build/wasm32-wasip1/release/$n.wasm" "$dir/$n.wasm"
done
echo "installed the extensions ${names[*]} in $dir"
