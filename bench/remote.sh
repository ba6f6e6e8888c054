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
. bench/lib.sh
roam_binary

work=$(mktemp -d "${TMPDIR:-/tmp}/roam-remote.XXXXXX")
trap 'stop_nginx "$work"; rm -rf "$work"' EXIT
mkdir -p "$work/www/src"
c_tree "$work/www/src" "$FILES"
# Builds objects in the current directory from sources wherever the Makefile says.
cat > "$work/Makefile" <<'MK'
SRCS := $(shell cd $(SRC) && find . -name '*.c')
OBJS := $(notdir $(SRCS:.c=.o))
vpath %.c $(sort $(dir $(addprefix $(SRC)/,$(SRCS))))
all: $(OBJS)
%.o: %.c
	$(CC) -O1 -I$(SRC) -c $< -o $@
MK
start_nginx "$work"
port=$PORT
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
