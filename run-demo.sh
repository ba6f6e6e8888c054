#!/usr/bin/env bash
# Builds roam and shows it at work: a local HTTP server (Python's http.server) serves a
# small C project, and ordinary programs — ls, grep, cat, make, cc, python3 — use it through
# `roam run` as if it were a local directory; then a write delivered to a writable remote,
# a zip archive's members as files, and the same tree through a FUSE mount (where this
# machine has FUSE). Nothing is installed; everything is cleaned up.
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release -p roam
ROAM=$PWD/target/release/roam

demo=$(mktemp -d /tmp/roam-demo.XXXXXX)
export ROAM_CACHE_DIR=$demo/cache ROAM_CONFIG=$demo/roam.toml
mkdir -p "$demo/www/src" "$demo/build"
cat > "$demo/www/src/hello.c" <<'C'
#include <stdio.h>
#include "greeting.h"
int main(void) { printf("%s, from a program built out of remote files\n", GREETING); return 0; }
C
cat > "$demo/www/src/greeting.h" <<'C'
#define GREETING "Hello" /* TODO: localise */
C
cat > "$demo/www/src/Makefile" <<'MK'
# Builds in the current directory from sources next to this Makefile (wherever it lives).
SRC := $(dir $(lastword $(MAKEFILE_LIST)))
vpath %.c $(SRC)
vpath %.h $(SRC)
hello: hello.c greeting.h
	$(CC) -I$(SRC) -o $@ $<
MK
cat > "$demo/www/src/tool.py" <<'PY'
import greeting_lib
print(greeting_lib.shout("python imports work too"))
PY
printf 'def shout(s):\n    return s.upper() + "!"\n' > "$demo/www/src/greeting_lib.py"
(cd "$demo/www/src" && python3 -c 'import zipfile, sys
with zipfile.ZipFile("sources.zip", "w", zipfile.ZIP_DEFLATED) as z:
    for f in sys.argv[1:]: z.write(f)' hello.c greeting.h)
mkdir -p "$demo/share"
chmod -R a+rX "$demo/www"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 "$port" --directory "$demo/www" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$demo"' EXIT
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

H=/http/127.0.0.1:$port
show() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
show "$ROAM" run -- ls -l "$H/src"
show "$ROAM" run -- grep -rn TODO "$H/src"
show "$ROAM" run -- cat "http://127.0.0.1:$port/src/greeting.h"
show "$ROAM" run -- sh -c "cd $H/src && pwd && wc -l *.c *.h"
show "$ROAM" run -m "/demo=http://127.0.0.1:$port/src" -- make -C "$demo/build" -f /demo/Makefile
show "$demo/build/hello"
show "$ROAM" run -- python3 "$H/src/tool.py"
show "$ROAM" run -- cat "$H/src/missing.c" || true

# A write: file+cache:// is a writable remote (a directory standing for a server); the
# change is uploaded when the program closes the file.
show "$ROAM" run -m "/share=file+cache://$demo/share" -- sh -c 'date +%Y > /share/notes.txt && echo "written through roam" >> /share/notes.txt'
show cat "$demo/share/notes.txt"

# An archive: members of a remote zip as files (the archive extension, built for WebAssembly).
export ROAM_EXT_DIR=$demo/ext
if scripts/install-extensions.sh "$ROAM_EXT_DIR" >/dev/null 2>&1; then
    show "$ROAM" run -- ls -l "$H/src/sources.zip#/"
    show "$ROAM" run -- head -3 "$H/src/sources.zip#/hello.c"
else
    echo "(archives: the extensions need the wasm32-wasip1 target: rustup target add wasm32-wasip1)"
fi

# A mount: the whole namespace through FUSE, for any program (no roam run needed).
mkdir "$demo/mnt"
if "$ROAM" mount "$demo/mnt" 2>/dev/null; then
    show ls "$demo/mnt/http/127.0.0.1:$port/src"
    show grep -c include "$demo/mnt/http/127.0.0.1:$port/src/hello.c"
    "$ROAM" umount "$demo/mnt"
else
    echo "(mounts: this machine has no usable FUSE; roam doctor says why)"
fi
echo
echo "Demo done: every program above read (and wrote) remote files through roam, unmodified."
