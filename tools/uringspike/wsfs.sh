#!/usr/bin/env bash
# The parallel case of the FUSE-over-io_uring decision (issue 10 item 4)
# measured on wsfs itself: the smallfiles workload (smallfiles.c) on wsfs
# mounts served through /dev/fuse (`wsfs mount`, the default) and through
# io_uring (`wsfs mount --fuse-transport=uring`). Results in
# docs/benchmarks.md, "FUSE over io_uring transport (2026-12-03)".
#
# usage (as root): wsfs.sh WSFS_BINARY OUT_FILE [REPS]
# Each case runs on a fresh host (one workspace and one daemon per mount);
# the transports alternate within each repetition (ABBA across
# repetitions). CASES: "MOUNTS CLIENTS_PER_MOUNT FILES_PER_CLIENT",
# comma-separated. The output has run.sh's format (summarize.py reads it).
# The fuse module's enable_uring parameter must be Y (the caller sets it
# and puts it back; this script never writes it).
set -euo pipefail
BIN=$1 OUT=$2 REPS=${3:-3}
FILES=${FILES:-2000} SIZE=${SIZE:-2048}
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /var/tmp/uringwsfs.XXXXXX)
SF="$W/smallfiles"
gcc -O2 -o "$SF" "$HERE/smallfiles.c"
DPIDS=()
cleanup() {
  for p in "${DPIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait || true
  for m in "$W"/h/m*; do grep -q " $m " /proc/mounts && umount -l "$m" || true; done
  rm -rf "$W"
}
trap cleanup EXIT

mount_n() { # N TRANSPORT
  local n=$1 tr=$2 flags=()
  [ "$tr" = uring ] && flags=(--fuse-transport=uring)
  DPIDS=()
  rm -rf "$W/h"
  "$BIN" init --home "$W/h" >/dev/null
  for i in $(seq "$n"); do
    "$BIN" create --home "$W/h" "ws$i" >/dev/null
    mkdir -m 0700 "$W/h/m$i"
    "$BIN" mount --home "$W/h" --ready-file "$W/h/ready$i" "${flags[@]}" "ws$i" "$W/h/m$i" 2>"$W/h/log$i" &
    DPIDS+=($!)
  done
  for i in $(seq "$n"); do
    for _ in $(seq 300); do [ -e "$W/h/ready$i" ] && break; sleep 0.1; done
    [ -e "$W/h/ready$i" ] || { cat "$W/h/log$i"; echo "mount $i not ready in 30 s" >&2; exit 1; }
    want=/dev/fuse; [ "$tr" = uring ] && want=io_uring
    grep -q "transport=$want" "$W/h/log$i" || { cat "$W/h/log$i"; echo "mount $i: expected transport=$want" >&2; exit 1; }
  done
}
daemon_cpu() {
  local ticks=0
  for p in "${DPIDS[@]}"; do
    read -r -a f <"/proc/$p/stat"
    ticks=$((ticks + f[13] + f[14]))
  done
  echo "scale=2; $ticks / $(getconf CLK_TCK)" | bc
}
umount_n() {
  for p in "${DPIDS[@]}"; do kill -TERM "$p"; done
  for p in "${DPIDS[@]}"; do wait "$p" || { echo "daemon $p: exit $?" >&2; exit 1; }; done
  DPIDS=()
}
small_case() { # TRANSPORT MOUNTS CLIENTS FILES
  local tr=$1 n=$2 p=$3 files=$4 dirs=() line
  mount_n "$n" "$tr"
  for i in $(seq "$n"); do dirs+=("$W/h/m$i"); done
  "$SF" "${dirs[0]}" "$p" "$files" "$SIZE" "${dirs[@]:1}" >"$W/out"
  while read -r line; do
    echo "rep=$rep transport=$tr mounts=$n $line load=$(cut -d' ' -f1 /proc/loadavg)"
  done <"$W/out" | tee -a "$OUT"
  echo "rep=$rep transport=$tr mounts=$n daemoncpu clients=$((p * n)) wall_s=0 cpu_s=$(daemon_cpu)" | tee -a "$OUT"
  umount_n
}
TRANSPORTS="dev uring"
for rep in $(seq "$REPS"); do
  order=$TRANSPORTS; [ $((rep % 2)) = 0 ] && order="uring dev"
  IFS=, read -r -a cases <<<"${CASES:-1 2 $FILES,1 4 $FILES,3 2 $((FILES / 2))}"
  for c in "${cases[@]}"; do
    set -- $c
    for tr in $order; do small_case "$tr" "$1" "$2" "$3"; done
  done
done
