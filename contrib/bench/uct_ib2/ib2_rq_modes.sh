#!/usr/bin/env bash
#
# rc_ib2's receive-queue kinds side by side: the same ucx_perftest active
# message tests over P (per-peer), S (shared) and X (XRC) queues, in one
# run, the three alternating round by round (the order turned every round),
# medians and the ratios X/S and X/P.
#
#   contrib/bench/uct_ib2/ib2_rq_modes.sh BUILD_DIR [ROUNDS]
#
# The queue sets are the ones suite 30 and UCX's uct tests run with
# (contrib/ucx-gtest/modes.sh). On a machine with an HCA, set
# IB2_BENCH_DEVICE (e.g. mlx5_0:1) and IB2_BENCH_RUNNER="".
#
set -u
BUILD=$(cd "${1:?usage: ib2_rq_modes.sh BUILD_DIR [ROUNDS]}" && pwd)
ROUNDS=${2:-5}
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
. "$SRC/contrib/bench/uct_ib2/bench_lib.sh"
bench_setup ib2-rqb
. "$SRC/contrib/ucx-gtest/modes.sh"

MODES=(P S X)
# name | perftest args | field of "Final:" | unit
TESTS=(
    "am_lat 8 B (short)|-t am_lat -n 100000|4|us"
    "am_lat 4 KiB (bcopy)|-t am_lat -D bcopy -s 4096 -n 50000|4|us"
    "am_bw 8 B (short)|-t am_bw -n 500000|8|Mmsg/s"
    "am_bw 4 KiB (bcopy)|-t am_bw -D bcopy -s 4096 -n 100000|6|MB/s"
)

echo "rc_ib2 receive queues on $DEV, $ROUNDS rounds alternating, medians"
for m in "${MODES[@]}"; do
    echo "  $m: UCX_IB2_RECEIVE_QUEUES=$(ucxg_mode_rq "$m")"
done
printf '%-22s %11s %11s %11s %-7s %5s %5s\n' test P S X unit X/S X/P
for t in "${TESTS[@]}"; do
    IFS='|' read -r name args field unit <<<"$t"
    for m in "${MODES[@]}"; do
        : >"$TMP/$m"
    done
    for r in $(seq 1 "$ROUNDS"); do
        order=("${MODES[@]}")
        if [ $((r % 2)) -eq 0 ]; then
            order=(X S P)
        fi
        for m in "${order[@]}"; do
            PORT=$((PORT + 1))
            # shellcheck disable=SC2086
            v=$(export UCX_IB2_RECEIVE_QUEUES="$(ucxg_mode_rq "$m")"
                run_pair $PORT rc_ib2 $args | awk -v f="$field" '{ print $f }')
            if [ -z "$v" ]; then
                echo "$name over $m queues: no result (round $r)" >&2
                exit 1
            fi
            echo "$v" >>"$TMP/$m"
        done
    done
    for m in "${MODES[@]}"; do
        v=$(median <"$TMP/$m")
        if [ "$unit" = Mmsg/s ]; then
            v=$(awk -v v="$v" 'BEGIN { print v / 1e6 }')
        fi
        eval "med_$m=\$v"
    done
    # shellcheck disable=SC2154
    printf '%-22s %11.3f %11.3f %11.3f %-7s %5.2f %5.2f\n' "$name" \
        "$med_P" "$med_S" "$med_X" "$unit" \
        "$(awk -v a="$med_X" -v b="$med_S" 'BEGIN { print a / b }')" \
        "$(awk -v a="$med_X" -v b="$med_P" 'BEGIN { print a / b }')"
done
echo "(latency: lower is better; rate and bandwidth: higher is better)"
