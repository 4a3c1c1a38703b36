#!/bin/bash
#
# What pinning adds to a 1 MiB RDMA WRITE, counted, not timed
# (docs/softverbs.md, "Performance"): sv_bench -m write under callgrind,
# with SOFTVERBS_PIN=1 and 0, each as a run of 102 writes and a run of 2,
# so that the difference is 100 writes. Only what the posting process
# (which moves the data: the requester is the NIC) does inside
# write_round is counted: its instructions and system calls are the same
# from run to run whatever the load, unlike time (the setup is not: which
# of the two processes creates the segment is a race).
# Fails when pinning adds more per write than the bounds below: today
# about 10000 instructions (two record compares of 256 pages) and 2 system
# calls (the pagemap reads of both sides' pages). What it does not see is
# the kernel's time inside those calls.
#
#   sv_pin_cost.sh BUILD-DIR
#
set -u
MAX_IR=20000   # instructions added per write, at most
MAX_SYS=2.5    # system calls added per write, at most

build=${1:?usage: sv_pin_cost.sh BUILD-DIR}
bench=$build/contrib/bench/softverbs/sv_bench
if ! command -v valgrind >/dev/null; then
    echo "SKIP: valgrind is not installed"
    exit 77
fi
[ -x "$bench" ] || { echo "no $bench: build first"; exit 1; }
dir=$(mktemp -d /tmp/sv-pin-cost.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT

# count PIN N: "instructions system-calls" of the posting process
count() {
    local vp dl rc out
    # valgrind itself in the background (timeout would fork it), with a
    # deadline of 600 s
    SOFTVERBS_PIN=$1 valgrind --tool=callgrind --collect-atstart=no \
        --toggle-collect=write_round --collect-systime=nsec \
        --callgrind-out-file="$dir/cg.%p" \
        "$bench" -m write -r 1 -n "$2" >"$dir/out" 2>"$dir/err" &
    vp=$!
    sleep 600 &
    dl=$!
    wait -n $vp $dl
    if kill -0 $vp 2>/dev/null; then
        kill -9 $vp
        echo "sv_bench -m write -n $2 (SOFTVERBS_PIN=$1) did not end" \
             "within 600 s" >"$dir/err"
    fi
    kill $dl 2>/dev/null
    wait $vp
    rc=$?
    wait $dl 2>/dev/null
    if [ $rc -ne 0 ]; then
        echo "sv_bench -m write -n $2 (SOFTVERBS_PIN=$1) failed:" >&2
        cat "$dir/out" "$dir/err" >&2
        return 1
    fi
    # valgrind runs as the bench itself: the file of its pid is the
    # parent's (the target child, forked, writes its own). "totals:" is
    # what was collected (write_round and what it calls); "summary:"
    # would count the system calls of the whole process.
    out=$(sed -n 's/^totals: \([0-9]*\) \([0-9]*\) .*/\1 \2/p' \
          "$dir/cg.$vp")
    if [ -z "$out" ] || [ "${out% *}" -eq 0 ]; then
        echo "nothing counted in write_round ($dir/cg.$vp): was it" \
             "inlined? sv_bench must keep it a function" >&2
        return 1
    fi
    echo "$out"
}

declare -A c
for pin in 1 0; do
    for n in 1 81; do   # 1 + 1 warm-up, 81 + 21 warm-up: 100 apart
        c[$pin.$n]=$(count $pin $n) || exit 1
    done
done
awk -v a="${c[1.81]}" -v a0="${c[1.1]}" -v b="${c[0.81]}" \
    -v b0="${c[0.1]}" -v max_ir=$MAX_IR -v max_sys=$MAX_SYS 'BEGIN {
    split(a, A, " "); split(a0, A0, " "); split(b, B, " "); split(b0, B0, " ")
    ir1 = (A[1] - A0[1]) / 100; sys1 = (A[2] - A0[2]) / 100
    ir0 = (B[1] - B0[1]) / 100; sys0 = (B[2] - B0[2]) / 100
    printf "per 1 MiB RDMA WRITE: SOFTVERBS_PIN=1 %.0f instructions, " \
           "%.2f system calls; SOFTVERBS_PIN=0 %.0f, %.2f\n", ir1, sys1, ir0, sys0
    printf "pinning adds %.0f instructions (at most %d) and %.2f system " \
           "calls (at most %.1f)\n", ir1 - ir0, max_ir, sys1 - sys0, max_sys
    exit !(ir1 - ir0 <= max_ir && sys1 - sys0 <= max_sys)
}'
