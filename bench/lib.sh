# Shared pieces of the bench/ scripts (sourced, not run): the roam binary, medians, the
# generated C tree, an nginx on loopback, and table rows of seconds and bytes fetched.

# Sets ROAM to an absolute path of roam (default target/release/roam, built if missing).
roam_binary() {
    ROAM=${ROAM:-target/release/roam}
    [ -x "$ROAM" ] || cargo build --release -p roam >&2
    ROAM=$(realpath "$ROAM")
}

# The median of the numbers on stdin, one a line.
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# c_tree DIR FILES: FILES-2 C files in 10 directories, a common header, main.c and a
# Makefile building `prog` (an Andrew-like source tree).
c_tree() {
    python3 - "$1" "$2" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
objs = []
for i in range(n - 2):
    d = os.path.join(root, f"m{i % 10}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}.c"), "w") as f:
        f.write('#include "common.h"\n')
        for k in range(8):
            f.write(f"int f{i}_{k}(int x) {{ int s = 0; for (int j = 0; j < x; j++) s += j * {k + 1}; return s + {i}; }}\n")
    objs.append(f"m{i % 10}/f{i}.o")
with open(os.path.join(root, "common.h"), "w") as f:
    f.write("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n")
with open(os.path.join(root, "main.c"), "w") as f:
    f.write('#include "common.h"\nint main(void) { puts("built"); return 0; }\n')
with open(os.path.join(root, "Makefile"), "w") as f:
    f.write("CFLAGS = -O1 -I.\nOBJS = main.o " + " ".join(objs) + "\nprog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n")
PY
}

# One run of the Andrew-like phases (copy tree $1 to $2, list, scan, make -j2, delete), timed
# inside the (traced) shell so tool start-up is not counted: `sh -c "$ANDREW_PHASES" sh SRC DST`.
# Prints "copy list scan make delete" in seconds, then "ok" or the phases that failed
# (make fails too when the built program does not run).
ANDREW_PHASES='
t() { date +%s.%N; }
failed=
a=$(t); cp -r "$1" "$2" || failed=${failed}copy,; b=$(t)
ls -lR "$2" > /dev/null || failed=${failed}list,; c=$(t)
{ grep -r -c int "$2" > /dev/null && cat $(find "$2" -name "*.c") | wc -c > /dev/null; } || failed=${failed}scan,; d=$(t)
{ make -s -j2 -C "$2" > /dev/null && "$2/prog" > /dev/null; } || failed=${failed}make,; e=$(t)
rm -rf "$2" || failed=${failed}delete,; f=$(t)
echo "$a $b $c $d $e $f ${failed:-ok}" | awk "{printf \"%.3f %.3f %.3f %.3f %.3f %s\n\", \$2-\$1, \$3-\$2, \$4-\$3, \$5-\$4, \$6-\$5, \$7}"
'

# start_nginx WORK: serves WORK/www on a free loopback port (set in PORT), state and
# access log in WORK/run, NGINX_SERVER (directives) at the end of its server block; stop it
# with stop_nginx WORK.
start_nginx() {
    command -v nginx >/dev/null || { echo "nginx is required (Debian: nginx-light)" >&2; exit 1; }
    local w=$1
    mkdir -p "$w/run"
    chmod -R a+rX "$w"
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    cat > "$w/run/nginx.conf" <<CONF
daemon on; pid $w/run/nginx.pid; error_log $w/run/error.log; worker_processes 1;
events { worker_connections 64; }
http { access_log $w/run/access.log; client_body_temp_path $w/run/cb; proxy_temp_path $w/run/p;
  fastcgi_temp_path $w/run/f; uwsgi_temp_path $w/run/u; scgi_temp_path $w/run/s;
  server { listen 127.0.0.1:$PORT; root $w/www; autoindex on; ${NGINX_SERVER:-} } }
CONF
    nginx -p "$w/run" -c "$w/run/nginx.conf"
    sleep 0.3
}

stop_nginx() { kill "$(cat "$1/run/nginx.pid" 2>/dev/null)" 2>/dev/null || true; }

# start_fixtures BIN WORK PROTO...: starts the roam-fixtures binary BIN serving PROTOs from
# WORK/srv, waits until they are ready and sources their environment (URLs, credentials)
# into this shell; fixture_pid is the process to stop.
start_fixtures() {
    local bin=$1 work=$2
    shift 2
    "$bin" "$work/srv" "$@" > "$work/fixtures.sh" 2> "$work/fixtures.log" &
    fixture_pid=$!
    until grep -q '^READY=1' "$work/fixtures.sh"; do
        kill -0 "$fixture_pid" 2>/dev/null || { cat "$work/fixtures.log" >&2; exit 1; }
        sleep 0.2
    done
    . "$work/fixtures.sh"
}

# bytes nginx sent since the access log had $1 lines
sent_since() { tail -n +"$(($1 + 1))" "$work/run/access.log" | awk '{s += $10} END {print s + 0}'; }

# measure NAME CMD...: one table row: median seconds over RUNS (fresh cache each run, under
# $work; $work/out emptied before each) and the bytes the last run fetched; the ratio is to
# BASE, the first row's median when unset.
measure() {
    local name=$1 times=() bytes=0
    shift
    for r in $(seq "$RUNS"); do
        export ROAM_CACHE_DIR=$work/cache-$r-$RANDOM
        rm -rf "$work/out"/*
        local before
        before=$(wc -l < "$work/run/access.log")
        local a b
        a=$(date +%s.%N)
        "$@" > /dev/null
        b=$(date +%s.%N)
        times+=("$(echo "$b - $a" | bc)")
        bytes=$(sent_since "$before")
    done
    local med
    med=$(printf '%s\n' "${times[@]}" | median)
    [ -z "${BASE:-}" ] && BASE=$med
    printf '| %s | %.3f | %.2f | %s |\n' "$name" "$med" "$(echo "$med / $BASE" | bc -l)" "$bytes"
}
