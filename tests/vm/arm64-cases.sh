# The cases the arm64 guest runs (tests/it/vm_arm64.rs checks their output). Each prints
# `=== case NAME`, then what bperf printed, then `=== exit CODE`.
cg=/sys/fs/cgroup
# The checks read perf 6.12's metric columns.
export BPERF_PERF_VERSION=6.12
mkdir -p $cg/A/C $cg/B

case_() {
    name=$1
    shift
    echo "=== case $name"
    "$@"
    echo "=== exit $?"
}

# Per-cgroup counts of three spinning cgroups, one nested in another: each spin joins its
# cgroup while it runs and retires exactly 2*N user instructions there.
case_ cgroups bperf stat -a -x, -e instructions:u,instructions:k,instructions,cycles:u \
    --for-each-cgroup A,B,A/C -- sh -c "
        spin $cg/A/cgroup.procs 10000000 & spin $cg/B/cgroup.procs 30000000 &
        spin $cg/A/C/cgroup.procs 20000000 & wait"

# A command counted as perf counts it (no cgroups): the event follows the task.
case_ command bperf stat -x, -e instructions:u -- spin $cg/cgroup.procs 25000000

# IPC from a group scheduled together, and from -M.
case_ group bperf stat -a -e '{cycles:u,instructions:u}' --for-each-cgroup B -- \
    spin $cg/B/cgroup.procs 20000000
case_ metric bperf stat -a -x, -M insn_per_cycle --for-each-cgroup B -- \
    spin $cg/B/cgroup.procs 20000000

# bperf top's IPC column from the cgroup's own cycles and instructions: spins in B, one
# after the other, for as long as top runs (its start takes an unknown part of the
# guest's time); then B is left empty for the cases after.
(while :; do spin $cg/B/cgroup.procs 100000000; done) &
spins=$!
case_ top bperf top --batch -n 2 -d 0.5 -e cycles:u,instructions:u --for-each-cgroup B
kill $spins
wait $spins
while [ -n "$(cat $cg/B/cgroup.procs)" ]; do sleep 0.1; done

# More events than the PMU's six general counters: each runs part of the time and is
# scaled back.
ev=instructions:u,instructions:u,instructions:u,instructions:u,instructions:u
case_ multiplex bperf stat -a -x, -e $ev,$ev,r08:u --for-each-cgroup B -- \
    spin $cg/B/cgroup.procs 30000000

# A pinned group that can never be scheduled (seven general events on six counters).
case_ pinned bperf stat -a -x, -e '{r08,r08,r08,r08,r08,r08,r08}:D' -- \
    spin $cg/cgroup.procs 1000000

# Two sessions sharing one set of hardware counters (:b), each against the exact count.
# The first one counts from before the second starts (its command says it runs) until
# the second has ended: a fixed sleep was too short for 7.2's slower start.
bperf stat -a -x, -e instructions:ub --for-each-cgroup A -o /tmp/shared-1 -- sh -c '
    touch /tmp/shared-counting
    while [ ! -e /tmp/shared-done ]; do sleep 0.1; done' &
first=$!
# Not past the first one's end: one that fails says so in its output below.
while [ ! -e /tmp/shared-counting ] && kill -0 "$first" 2>/dev/null; do sleep 0.1; done
case_ shared bperf stat -a -x, -e instructions:ub --for-each-cgroup A -- \
    spin $cg/A/cgroup.procs 15000000
touch /tmp/shared-done
wait
echo "=== case shared-first"
cat /tmp/shared-1
echo "=== exit 0"

# Slices recorded with their hardware counts: the totals, and IPC per slice.
case_ record bperf record -e cycles:u,instructions:u --for-each-cgroup B -o /tmp/rec.data -- \
    spin $cg/B/cgroup.procs 20000000
case_ record-totals bperf report -i /tmp/rec.data -x,
case_ record-hist bperf report -i /tmp/rec.data --hist

# serve exports hardware counts: a scrape after the spin has ended.
bperf serve --listen 127.0.0.1:9464 -e instructions:u,cycles:u --for-each-cgroup B &
serve=$!
sleep 1
spin $cg/B/cgroup.procs 35000000
case_ serve wget -qO- http://127.0.0.1:9464/metrics
kill $serve
wait $serve

# Counting inside BPF programs (stat -b): two tracepoint programs that loop 100 and 1100
# times, each run exactly 100 times by the counted command, five times over (a timer
# tick inside a run counts too: the fewest instructions are the loops'). Under
# -icount the guest's time is its instruction count, so every try would meet the tick
# at the same point of its runs: a busy loop of its own length before each try moves
# the tries to other points of the tick's period.
bpf_target load > /tmp/bpf-ids &
holder=$!
while [ ! -s /tmp/bpf-ids ]; do sleep 0.1; done
read short long < /tmp/bpf-ids
for i in 1 2 3 4 5; do
    n=0
    while [ $n -lt $((i * 700)) ]; do n=$((n + 1)); done
    case_ bpf-prog-short-$i bperf stat -x, -b $short -e instructions,cycles -- bpf_target trigger 100
    case_ bpf-prog-long-$i bperf stat -x, -b $long -e instructions,cycles -- bpf_target trigger 100
done
kill $holder
wait $holder
