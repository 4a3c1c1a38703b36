#!/usr/bin/env bash
#
# What an endpoint connected through rdmacm costs once it is up, counted
# in instructions (callgrind), which do not depend on the machine's load
# as the wall-clock figures of docs/uct_ib2.md ("Figures") do: rc_ib2's
# am_lat over softverbs' iWARP device (connected through rdmacm, per-peer
# queues) next to its InfiniBand device (connected by the verbs address
# exchange), same queues:
#
#   send    instructions per ib2_ep_am_short call (exclusive, as
#           ib2_vs_verbs.sh counts them)
#   poll    instructions per ib2_iface_progress call, everything it
#           calls included (empty polls and messages together)
#   polls   progress calls per ping-pong iteration (how often the
#           client spun waiting; depends on timing, not on the code)
#   cm      of poll: the instructions of the rdmacm check inlined into
#           ib2_iface_progress (ib2_cm.h) per call; 0 where the
#           interface has no rdmacm connection manager
#
#   contrib/bench/uct_ib2/ib2_cm_cost.sh BUILD_DIR [ITERATIONS]
#
set -u
BUILD=$(cd "${1:?usage: ib2_cm_cost.sh BUILD_DIR [ITERATIONS]}" && pwd)
ITERS=${2:-20000}
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
. "$SRC/contrib/bench/uct_ib2/bench_lib.sh"
export SOFTVERBS_DEVICES=ib0:ib:1,iw0:iwarp:1
export UCX_IB2_RECEIVE_QUEUES=P,128,256,192,128:P,8256,64,32,16
bench_setup ib2-cm-cost

echo "rc_ib2 am_lat, $ITERS iterations, queues $UCX_IB2_RECEIVE_QUEUES"
printf '%-28s %8s %8s %8s %11s\n' device send poll cm polls/iter
for d in "ib0|InfiniBand, verbs exchange" "iw0|iWARP, rdmacm"; do
    IFS='|' read -r dev what <<<"$d"
    DEV=$dev:1
    PORT=$((PORT + 1))
    send=$(count_instr $PORT rc_ib2 ib2_ep_am_short -t am_lat -n "$ITERS")
    read -r poll calls <<<"$(incl_per_call ib2_iface_progress)"
    cm=$(cd "$TMP" && callgrind_annotate --auto=no --threshold=100 cg.out \
             2>/dev/null | awk '/ib2_cm\.h:ib2_iface_progress$/ {
                                    x = $1; gsub(",", "", x); ir += x }
                                END { print ir + 0 }')
    printf '%-28s %8s %8s %8s %11s\n' "$what" "$send" "$poll" \
        "$(awk -v a="$cm" -v c="$calls" 'BEGIN { printf "%.1f", c ? a / c : 0 }')" \
        "$(awk -v c="$calls" -v n="$ITERS" 'BEGIN { printf "%.1f", c / n }')"
done
