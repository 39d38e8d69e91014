#!/usr/bin/env bash
# FUSE-over-io_uring parallel spike (issue 10 item 4; results and the decision
# in docs/benchmarks.md, "FUSE over io_uring: parallel spike").
#
# Compares libfuse's passthrough_hp example through /dev/fuse and through
# io_uring (-o io_uring) on the same backing directory (TRANSPORTS, default
# "dev uring"; dev2 is /dev/fuse with one thread per vCPU, each with its own
# cloned fd, the configuration closest to io_uring's one queue per CPU), with
# parallel clients:
# small-file create/stat/read (smallfiles.c), a `go build -a -p 2` of a small
# module whose source, GOCACHE and output are in the mount, and several mounts
# at once. Every request goes to the daemon (--nopassthrough --nocache), which
# is the case a transport can speed up.
#
# usage (as root): run.sh PASSTHROUGH_HP BACKING_ROOT OUT_FILE [REPS]
#   PASSTHROUGH_HP  path to libfuse's example/passthrough_hp, built with
#                   meson setup build -Denable-io-uring=true -Dexamples=true
#   BACKING_ROOT    a directory on the filesystem to pass through (disk or tmpfs)
# The fuse module's enable_uring parameter must be Y (the caller sets it and
# puts it back); the script checks that each io_uring mount reports
# io_uring=on (libfuse's FUSE_INIT_STATUS report) and stops if not.
set -euo pipefail
HP=$1 ROOT=$2 OUT=$3 REPS=${4:-3}
FILES=${FILES:-2000} SIZE=${SIZE:-2048}
HERE=${HERE:-$(cd "$(dirname "$0")" && pwd)}
W=$(mktemp -d "$ROOT/uringspike.XXXXXX")
MNTS=$(mktemp -d /tmp/uringspike-mnt.XXXXXX)
SF="$W/smallfiles"
gcc -O2 -o "$SF" "$HERE/smallfiles.c"
PIDS=()
cleanup() {
  for m in "$MNTS"/m*; do grep -q " $m " /proc/mounts && umount "$m" || true; done
  rm -rf "$W" "$MNTS"
}
trap cleanup EXIT

# mount N TRANSPORT: mounts $MNTS/m1..mN over fresh $W/s1..sN; DPIDS
# holds the daemons' pids.
mount_n() {
  local n=$1 tr=$2 opt=()
  DPIDS=()
  case $tr in
  dev) ;;                                  # libfuse's default loop: up to 10 threads on one fd
  dev2) opt=(--num-threads=2 --clone-fd) ;; # one thread per vCPU, each with its own fd
  uring) opt=(-o io_uring) ;;              # one ring queue per CPU, replies inline
  *) echo "unknown transport $tr (dev, dev2, uring)" >&2; exit 2 ;;
  esac
  for i in $(seq "$n"); do
    rm -rf "$W/s$i"; mkdir -p "$W/s$i" "$MNTS/m$i"
    FUSE_INIT_STATUS=1 "$HP" --foreground --nopassthrough --nocache "${opt[@]}" "$W/s$i" "$MNTS/m$i" >"$W/log$i" 2>&1 &
    DPIDS+=($!)
    for _ in $(seq 100); do grep -q " $MNTS/m$i " /proc/mounts && break; sleep 0.1; done
    grep -q " $MNTS/m$i " /proc/mounts || { cat "$W/log$i"; echo "mount $i did not appear in 10 s" >&2; exit 1; }
    for _ in $(seq 50); do grep -q 'io_uring=' "$W/log$i" && break; sleep 0.1; done
    want=off; [ "$tr" = uring ] && want=on
    grep -q "io_uring=$want" "$W/log$i" || { cat "$W/log$i"; echo "mount $i: expected io_uring=$want" >&2; exit 1; }
  done
}
# daemon_cpu: user+system CPU seconds of the daemons so far (all threads).
daemon_cpu() {
  local ticks=0 tk
  tk=$(getconf CLK_TCK)
  for p in "${DPIDS[@]}"; do
    read -r -a f <"/proc/$p/stat"
    ticks=$((ticks + f[13] + f[14]))
  done
  echo "scale=2; $ticks / $tk" | bc
}
umount_n() {
  for i in $(seq "$1"); do
    for _ in $(seq 50); do umount "$MNTS/m$i" 2>/dev/null && break; sleep 0.2; done
    grep -q " $MNTS/m$i " /proc/mounts && { echo "umount $MNTS/m$i: still busy after 10 s" >&2; exit 1; }
  done
  wait
}

gobuild() {
  local m=$1
  mkdir -p "$m/mod" "$m/cache" "$m/tmp"
  cat >"$m/mod/go.mod" <<'G'
module spike
go 1.22
G
  cat >"$m/mod/main.go" <<'G'
package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

func main() {
	a := strings.Fields(strings.Join(os.Args, " "))
	sort.Strings(a)
	fmt.Println(strconv.Itoa(len(a)))
}
G
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$m/mod" && GOCACHE="$m/cache" GOTMPDIR="$m/tmp" GOFLAGS=-buildvcs=false go build -a -p 2 -o "$m/spike" .)
  t1=$(date +%s.%N)
  echo "gobuild wall_s=$(echo "$t1 - $t0" | bc)"
}

# One case on fresh mounts; the transports alternate within each repetition
# (ABBA order across repetitions) so that the machine's load changes hit
# both alike.
small_case() { # TRANSPORT MOUNTS CLIENTS FILES
  local tr=$1 n=$2 p=$3 files=$4 dirs=() line
  mount_n "$n" "$tr"
  for i in $(seq "$n"); do dirs+=("$MNTS/m$i"); done
  "$SF" "${dirs[0]}" "$p" "$files" "$SIZE" "${dirs[@]:1}" >"$W/out"
  while read -r line; do
    echo "rep=$rep transport=$tr mounts=$n $line"
  done <"$W/out" | tee -a "$OUT"
  echo "rep=$rep transport=$tr mounts=$n daemoncpu clients=$((p * n)) wall_s=0 cpu_s=$(daemon_cpu)" | tee -a "$OUT"
  umount_n "$n"
}

TRANSPORTS=${TRANSPORTS:-dev uring}
REVERSED=$(echo "$TRANSPORTS" | tr ' ' '\n' | tac | tr '\n' ' ')
for rep in $(seq "$REPS"); do
  order=$TRANSPORTS; [ $((rep % 2)) = 0 ] && order=$REVERSED
  # CASES: "MOUNTS CLIENTS_PER_MOUNT FILES_PER_CLIENT", comma-separated.
  IFS=, read -r -a cases <<<"${CASES:-1 2 $FILES,1 4 $FILES,1 8 $FILES,3 2 $((FILES / 2)),9 2 $((FILES / 2))}"
  for c in "${cases[@]}"; do
    set -- $c
    for tr in $order; do small_case "$tr" "$1" "$2" "$3"; done
  done
done
for rep in $(seq "${BUILD_REPS:-2}"); do
  order=$TRANSPORTS; [ $((rep % 2)) = 0 ] && order=$REVERSED
  for tr in $order; do
    mount_n 1 "$tr"
    gobuild "$MNTS/m1" | sed "s/^/rep=$rep transport=$tr mounts=1 /" | tee -a "$OUT"
    echo "rep=$rep transport=$tr mounts=1 gobuildcpu clients=1 wall_s=0 cpu_s=$(daemon_cpu)" | tee -a "$OUT"
    umount_n 1
  done
done
