#!/usr/bin/env bash
# Ufo's Table IV on roam: an Andrew-like read workload and an iostone-like storm of
# stat/open/read/close over a 300-file C tree, on the local tree and through roam from an
# nginx on loopback, with roam's cache empty ("uncached") and warm ("cached", a second run
# within T_read). Prints a markdown table of seconds (median of RUNS) and ratios to local.
#
# Usage: bench/remote.sh          Environment: RUNS=3, FILES=300, ROAM=target/release/roam
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
FILES=${FILES:-300}
ROAM=${ROAM:-target/release/roam}
[ -x "$ROAM" ] || cargo build --release -p roam >&2
ROAM=$(realpath "$ROAM")
command -v nginx >/dev/null || { echo "nginx is required (Debian: nginx-light)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/roam-remote.XXXXXX")
trap 'kill $(cat "$work/run/nginx.pid" 2>/dev/null) 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/www/src" "$work/run"
python3 - "$work/www/src" "$FILES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n - 2):
    d = os.path.join(root, f"m{i % 10}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}.c"), "w") as f:
        f.write('#include "common.h"\n')
        for k in range(8):
            f.write(f"int f{i}_{k}(int x) {{ int s = 0; for (int j = 0; j < x; j++) s += j * {k + 1}; return s + {i}; }}\n")
with open(os.path.join(root, "common.h"), "w") as f:
    f.write("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n")
PY
# Builds objects in the current directory from sources wherever the Makefile says.
cat > "$work/Makefile" <<'MK'
SRCS := $(shell cd $(SRC) && find . -name '*.c')
OBJS := $(notdir $(SRCS:.c=.o))
vpath %.c $(sort $(dir $(addprefix $(SRC)/,$(SRCS))))
all: $(OBJS)
%.o: %.c
	$(CC) -O1 -I$(SRC) -c $< -o $@
MK
chmod -R a+rX "$work"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$work/run/nginx.conf" <<CONF
daemon on; pid $work/run/nginx.pid; error_log $work/run/error.log; worker_processes 1;
events { worker_connections 64; }
http { access_log off; client_body_temp_path $work/run/cb; proxy_temp_path $work/run/p;
  fastcgi_temp_path $work/run/f; uwsgi_temp_path $work/run/u; scgi_temp_path $work/run/s;
  server { listen 127.0.0.1:$port; root $work/www; autoindex on; } }
CONF
nginx -p "$work/run" -c "$work/run/nginx.conf"
sleep 0.3
export ROAM_CONFIG=$work/none.toml

# The phases, timed inside the (traced) shell: list, scan, iostone, build. $1 = tree.
phases='
t() { date +%s.%N; }
a=$(t); ls -lR "$1" > /dev/null; b=$(t)
grep -r -c int "$1" > /dev/null; cat $(find "$1" -name "*.c") | wc -c > /dev/null; c=$(t)
python3 -c "
import os, sys
files = [os.path.join(d, f) for d, _, fs in os.walk(sys.argv[1]) for f in fs]
for _ in range(5):
    for p in files:
        os.stat(p); fd = os.open(p, os.O_RDONLY); os.read(fd, 4096); os.close(fd)
" "$1"; d=$(t)
rm -rf "$2" && mkdir -p "$2" && make -s -j2 -C "$2" -f "$3" SRC="$1"; e=$(t)
echo "$a $b $c $d $e" | awk "{printf \"%.3f %.3f %.3f %.3f\n\", \$2-\$1, \$3-\$2, \$4-\$3, \$5-\$4}"
'
# A mount point rather than /http/HOST:PORT: make's vpath splits names at ':'.
remote=/remote/src
for r in $(seq "$RUNS"); do
    echo "[remote.sh] run $r/$RUNS" >&2
    sh -c "$phases" sh "$work/www/src" "$work/obj" "$work/Makefile" >> "$work/local.tsv"
    export ROAM_CACHE_DIR=$work/cache-$r
    "$ROAM" run -m "/remote=http://127.0.0.1:$port" -- sh -c "$phases" sh "$remote" "$work/obj" "$work/Makefile" >> "$work/uncached.tsv"
    "$ROAM" run -m "/remote=http://127.0.0.1:$port" -- sh -c "$phases" sh "$remote" "$work/obj" "$work/Makefile" >> "$work/cached.tsv"
done

median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
echo "| tree | list | scan | iostone | make -j2 | total | vs local |"
echo "|---|---|---|---|---|---|---|"
local_total=
for c in local uncached cached; do
    f="$work/$c.tsv"
    row="| $c |"
    for col in 1 2 3 4; do row+=" $(awk -v c=$col '{print $c}' "$f" | median) |"; done
    total=$(awk '{print $1+$2+$3+$4}' "$f" | median)
    [ -n "$local_total" ] || local_total=$total
    echo "$row $total | $(awk -v t="$total" -v n="$local_total" 'BEGIN{printf "%.2f×", t/n}') |"
done
echo
echo "Seconds, median of $RUNS runs; $FILES-file C tree on nginx (loopback); roam uncached = empty cache, cached = a second run within T_read; $(date -u +%Y-%m-%d)."
