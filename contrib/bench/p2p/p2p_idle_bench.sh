#!/usr/bin/env bash
# Idle waiting, oversubscribed: P2P.ReceiveCancelRaces (300 rounds of a
# barrier, then a receive raced against its cancel, every wait blocking)
# with 2 ranks and with 4 ranks on this machine's cores, alternating,
# over shm. Prints each run's slowest rank and the medians.
#
#   contrib/bench/p2p/p2p_idle_bench.sh BUILD_DIR [RUNS]
#
# Run on an idle machine: other load changes what oversubscription means.
set -euo pipefail

build=${1:?usage: $0 BUILD_DIR [RUNS]}
runs=${2:-5}
bin=$build/test/gtest/p2p/test_p2p
[ -x "$bin" ] || { echo "$bin not built" >&2; exit 1; }

one() {     # one NP: seconds of the slowest rank of one run
    UCX_TLS=shm timeout 300 mpirun --allow-run-as-root --oversubscribe \
        --bind-to none -x UCX_TLS -np "$1" "$bin" --gtest_color=no \
        --gtest_filter=P2P.ReceiveCancelRaces 2>&1 |
        sed -n 's/.*receive-cancel races in \([0-9.]*\) s.*/\1/p' |
        sort -g | tail -1
}

median() { sort -g | awk '{ a[NR] = $1 } END {
    print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

t2=() t4=()
for i in $(seq "$runs"); do
    a=$(one 2)
    b=$(one 4)
    [ -n "$a" ] && [ -n "$b" ] || { echo "run $i: no time reported" >&2; exit 1; }
    echo "run $i: 2 ranks $a s, 4 ranks $b s"
    t2+=("$a")
    t4+=("$b")
done
m2=$(printf '%s\n' "${t2[@]}" | median)
m4=$(printf '%s\n' "${t4[@]}" | median)
echo "cores $(nproc), load $(cut -d' ' -f1 /proc/loadavg)"
echo "median: 2 ranks $m2 s, 4 ranks $m4 s"
