#!/bin/sh
# perf stat as scripts use it: every command goes through $PERF, which is perf itself
# or a wrapper that runs bperf (tests/it/shapes.rs runs both and compares the lines).
# Writes its perf.data in $WORKDIR.
set -e
: "${PERF:?}" "${WORKDIR:?}"
$PERF stat -- sleep 0.05
$PERF stat -a -- sleep 0.05
$PERF stat -a -A -e cpu-clock -- sleep 0.05
$PERF stat -a -I 100 --interval-count 2 -e cpu-clock,context-switches
$PERF stat -e task-clock,context-switches,page-faults -- sleep 0.05
for mode in --per-socket --per-die --per-cluster --per-cache --per-core --per-node; do
	$PERF stat -a $mode -e cpu-clock -- sleep 0.05
done
$PERF stat --per-thread -p $$ -e task-clock,context-switches --timeout 100
$PERF stat -x, -e task-clock,context-switches -- sleep 0.05
$PERF stat -j -e task-clock,context-switches -- sleep 0.05
$PERF stat -a -I 100 --interval-count 2 --summary -e cpu-clock
$PERF stat --metric-only -a -e cpu-clock,context-switches -- sleep 0.05
$PERF stat -r 3 -e task-clock,context-switches -- sleep 0.05
$PERF stat record -o "$WORKDIR/perf.data" -e task-clock,context-switches -- sleep 0.05
$PERF stat report -i "$WORKDIR/perf.data"
