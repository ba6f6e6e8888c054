#!/usr/bin/env bash
# Builds roam (the release profile) and installs it for the current user, with what makes it
# usable at once: the example extensions (scripts/install-extensions.sh), man pages, and
# completions for bash, zsh and fish.
#
# Usage: ./install.sh        Environment: PREFIX (default ~/.local), CARGO_TARGET_DIR
#   PREFIX/bin/roam
#   PREFIX/share/man/man1/roam*.1
#   PREFIX/share/bash-completion/completions/roam, .../zsh/site-functions/_roam,
#   PREFIX/share/fish/vendor_completions.d/roam.fish
#   $ROAM_EXT_DIR or ${XDG_CONFIG_HOME:-~/.config}/roam/extensions/{archive,id3,...}.wasm
# Needs Rust (rustup) and a C linker; nothing runs as root unless you do.
set -euo pipefail
cd "$(dirname "$0")"
prefix=${PREFIX:-$HOME/.local}
target=${CARGO_TARGET_DIR:-$PWD/target}

cargo build --release -p roam
install -Dm755 "$target/release/roam" "$prefix/bin/roam"
roam=$prefix/bin/roam

"$roam" man "$prefix/share/man/man1"
install -d "$prefix/share/bash-completion/completions" "$prefix/share/zsh/site-functions" \
    "$prefix/share/fish/vendor_completions.d"
"$roam" completions bash >"$prefix/share/bash-completion/completions/roam"
"$roam" completions zsh >"$prefix/share/zsh/site-functions/_roam"
"$roam" completions fish >"$prefix/share/fish/vendor_completions.d/roam.fish"

# The example extensions (archive: zip/tar as directories; id3, id3merge, merge3, rot13,
# hotlist, camera, zlib, seal, stride) run as WebAssembly.
scripts/install-extensions.sh
echo "installed $roam, its man pages and completions"
case ":$PATH:" in
*":$prefix/bin:"*) ;;
*) echo "note: $prefix/bin is not on PATH; add it: export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
