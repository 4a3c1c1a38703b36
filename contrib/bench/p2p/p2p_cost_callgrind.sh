#!/usr/bin/env bash
# Instructions and allocations p2p spends per message: callgrind counts
# p2p_cost's loops (messages to self: no timing, no polling, the same path
# every time). Two runs of different lengths per loop; their difference
# divided by the difference in messages leaves out start-up, warm-up and
# finalize. The allocations are p2p_cost's own count, without valgrind.
#
#   contrib/bench/p2p/p2p_cost_callgrind.sh BUILD_DIR [SIZE [P2P_COST_OPTIONS]]
# (e.g. SIZE 8 and -t: the cost of P2P_INIT_F_THREAD_MULTIPLE)
set -euo pipefail

build=${1:?usage: $0 BUILD_DIR [SIZE]}
size=${2:-8}
shift $(( $# < 2 ? $# : 2 ))
extra=("$@")
bin=$build/contrib/bench/p2p/p2p_cost
[ -x "$bin" ] || { echo "$bin not built" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 1; }
n1=2000
n2=12000

collected() {   # collected LOOP N: instructions inside LOOP over N messages
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect="$1" \
        --callgrind-out-file=/dev/null "$bin" -n "$2" -s "$size" \
        ${extra[@]+"${extra[@]}"} \
        2>&1 >/dev/null | sed -n 's/.*Collected : *//p' | tr -d ,
}

echo "$size-byte messages to self ${extra[*]:-}; callgrind instructions per message:"
for loop in p2p_cost_expected p2p_cost_unexp; do
    a=$(collected $loop $n1)
    b=$(collected $loop $n2)
    awk -v l="${loop#p2p_cost_}" -v a="$a" -v b="$b" -v d=$((n2 - n1)) \
        'BEGIN { printf "  %-10s %8.1f\n", l, (b - a) / d }'
done
"$bin" -n 100000 -s "$size" ${extra[@]+"${extra[@]}"}
