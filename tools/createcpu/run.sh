#!/bin/bash
# Daemon CPU per 10,000 small-file creates (issue 10, item 6).
#
# usage: tools/createcpu/run.sh WSFS_BINARY LABEL [N]
#
# Runs a real `wsfs mount` daemon on a fresh host (one workspace) and a
# Python client that creates N (default 10,000) files of 2 KiB in one
# directory (open O_CREAT|O_TRUNC, one write, close). Prints the daemon's
# CPU (utime+stime from /proc/PID/stat over the loop plus 1 s for the
# trailing RELEASEs and commit), minor page faults and context switches
# (all threads), each scaled to 10,000 creates, and the one-minute load.
# Compare binaries by alternating runs in the same session. Needs root
# and /dev/fuse. Environment: PROF=FILE writes a pprof CPU profile of
# the daemon (--cpuprofile); THREADS=1 prints per-thread switches and CPU;
# MOUNT_FLAGS adds flags to `wsfs mount` (e.g. --fuse-transport=uring).
set -eu
bin=$1 label=$2 n=${3:-10000}
home=$(mktemp -d)
trap 'fusermount3 -uz "$home/mp" 2>/dev/null || true; rm -rf "$home"' EXIT
"$bin" init --home "$home" >/dev/null
"$bin" create --home "$home" ws >/dev/null
mkdir -m 0700 "$home/mp"
"$bin" mount --home "$home" --ready-file "$home/ready" ${PROF:+--cpuprofile "$PROF"} ${MOUNT_FLAGS:-} ws "$home/mp" 2>"$home/log" &
pid=$!
for _ in $(seq 300); do [ -e "$home/ready" ] && break; sleep 0.1; done
[ -e "$home/ready" ] || { echo "$label: daemon not ready after 30 s" >&2; cat "$home/log" >&2; kill "$pid"; exit 1; }
cpu() { awk '{print $14+$15}' /proc/$pid/stat; }
flt() { awk '{print $10}' /proc/$pid/stat; }
csw() { cat /proc/$pid/task/*/status | awk '/ctxt_switches/{s+=$2} END{print s}'; }
c0=$(cpu) f0=$(flt) s0=$(csw) t0=$(date +%s.%N)
python3 - "$home/mp/d" "$n" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.mkdir(d)
data = b"x" * 2048
for i in range(n):
    fd = os.open(os.path.join(d, "f%05d" % i), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data)
    os.close(fd)
PY
t1=$(date +%s.%N)
sleep 1
c1=$(cpu) f1=$(flt) s1=$(csw)
if [ -n "${THREADS:-}" ]; then
	for t in /proc/$pid/task/*; do
		echo "thread $(basename "$t"): switches voluntary/involuntary $(awk '/ctxt_switches/{printf "%s ", $2}' "$t/status") ticks user/system $(awk '{print $14, $15}' "$t/stat")"
	done
fi
load=$(cut -d' ' -f1 /proc/loadavg)
kill -TERM "$pid"
wait "$pid" || true
awk -v l="$label" -v c=$((c1 - c0)) -v t="$(getconf CLK_TCK)" -v n="$n" -v f=$((f1 - f0)) -v s=$((s1 - s0)) -v w="$(echo "$t1 - $t0" | bc)" -v load="$load" \
	'BEGIN{printf "%s daemon_cpu_s_per_10k=%.2f faults_per_10k=%d switches_per_10k=%d client_wall_s=%.2f load=%s\n", l, c/t*10000/n, f*10000/n, s*10000/n, w, load}'
