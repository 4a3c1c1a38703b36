#!/usr/bin/env bash
#
# rc_ib2 next to UCX's own rc_verbs on the same (software) device, in one
# run: the same ucx_perftest tests, the two transports alternating round by
# round, medians and the ratio; then the instructions each transport's send
# function executes per operation (valgrind callgrind: exclusive
# instructions of the function, over its number of calls).
#
#   contrib/bench/uct_ib2/ib2_vs_verbs.sh BUILD_DIR [ROUNDS]
#
# On a machine with an HCA, set IB2_BENCH_DEVICE (e.g. mlx5_0:1) and
# IB2_BENCH_RUNNER="" to skip the software device.
#
set -u
BUILD=$(cd "${1:?usage: ib2_vs_verbs.sh BUILD_DIR [ROUNDS]}" && pwd)
ROUNDS=${2:-5}
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
. "$SRC/contrib/bench/uct_ib2/bench_lib.sh"
bench_setup ib2-bench

# name | perftest args | field of "Final:" | unit | lower is better
TESTS=(
    "am_short latency|-t am_lat -n 100000|4|us|1"
    "put_short latency|-t put_lat -n 100000|4|us|1"
    "get zcopy 64KiB latency|-t get -D zcopy -s 65536 -n 5000|4|us|1"
    "am_short message rate|-t am_bw -n 500000|8|Mmsg/s|0"
    "am_bcopy 4KiB bandwidth|-t am_bw -D bcopy -s 4096 -n 100000|6|MB/s|0"
    "put zcopy 1MiB bandwidth|-t put_bw -D zcopy -s 1048576 -n 2000|6|MB/s|0"
    "fetch-add latency|-t fadd -n 100000|4|us|1"
)

echo "rc_ib2 vs rc_verbs on $DEV, $ROUNDS rounds alternating, medians"
printf '%-26s %16s %16s %6s\n' test rc_ib2 rc_verbs ratio
for t in "${TESTS[@]}"; do
    IFS='|' read -r name args field unit lower <<<"$t"
    : >"$TMP/rc_ib2"
    : >"$TMP/rc_verbs"
    for _ in $(seq 1 "$ROUNDS"); do
        for tl in rc_ib2 rc_verbs; do
            # shellcheck disable=SC2086
            PORT=$((PORT + 1))
            v=$(run_pair $PORT $tl $args | awk -v f="$field" '{ print $f }')
            [ -n "$v" ] && echo "$v" >>"$TMP/$tl"
        done
    done
    a=$(median <"$TMP/rc_ib2")
    b=$(median <"$TMP/rc_verbs")
    if [ "$unit" = Mmsg/s ]; then
        a=$(awk -v v="$a" 'BEGIN { print v / 1e6 }')
        b=$(awk -v v="$b" 'BEGIN { print v / 1e6 }')
    fi
    printf '%-26s %9.3f %-6s %9.3f %-6s %6.2f\n' "$name" "$a" "$unit" \
        "$b" "$unit" "$(awk -v a="$a" -v b="$b" 'BEGIN { print a / b }')"
done
echo "(latency: lower is better; rate and bandwidth: higher is better)"

echo
echo "instructions per operation in the transport's send function (callgrind)"
printf '%-12s %10s %10s %8s\n' op rc_ib2 rc_verbs ib2/verbs
for op in "am_short|ib2_ep_am_short|uct_rc_verbs_ep_am_short|-t am_bw -n 20000" \
          "put_short|ib2_ep_put_short|uct_rc_verbs_ep_put_short|-t put_bw -D short -s 8 -n 20000"; do
    IFS='|' read -r name f_ib2 f_verbs args <<<"$op"
    # shellcheck disable=SC2086
    PORT=$((PORT + 1))
    a=$(count_instr $PORT rc_ib2 "$f_ib2" $args)
    PORT=$((PORT + 1))
    # shellcheck disable=SC2086
    b=$(count_instr $PORT rc_verbs "$f_verbs" $args)
    r=n/a
    if [ "$a" != n/a ] && [ "$b" != n/a ]; then
        r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')
    fi
    printf '%-12s %10s %10s %8s\n' "$name" "$a" "$b" "$r"
done
