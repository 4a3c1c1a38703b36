#!/usr/bin/env bash
#
# UCP striping a large transfer over rc_ib2 lanes on two ports, against
# one rail, in one run: ucx_perftest tag_bw between two processes on a
# device with two ports, UCX_MAX_RNDV_RAILS=1 and =2 alternating round by
# round (ABBA), per message size; prints every round, the medians and the
# ratio two rails / one rail. Each run's log must show the lanes it used.
#
#   contrib/bench/uct_ib2/multirail.sh [-r ROUNDS] [-n ITERS] BUILD_DIR [SIZE...]
#
# On a machine with a two-port HCA, set IB2_BENCH_DEVICES="" to use it
# (the ports are then whatever UCX finds) and IB2_BENCH_RUNNER="".
#
set -u
ROUNDS=6
ITERS=100
while getopts r:n: o; do
    case $o in
        r) ROUNDS=$OPTARG ;;
        n) ITERS=$OPTARG ;;
        *) echo "usage: multirail.sh [-r ROUNDS] [-n ITERS] BUILD_DIR [SIZE...]" >&2
           exit 2 ;;
    esac
done
shift $((OPTIND - 1))
BUILD=$(cd "${1:?usage: multirail.sh [-r ROUNDS] [-n ITERS] BUILD_DIR [SIZE...]}" && pwd)
shift
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(4194304 16777216)
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
SHM=ib2-multirail-$$
LIB=$BUILD/src/uct_ib2/.libs/libuct_ib2.so
DEVICES=${IB2_BENCH_DEVICES-mr0:ib:2}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP" /dev/shm/$SHM /dev/shm/$SHM.* /dev/shm/$SHM-*' EXIT
[ -f "$LIB" ] || { echo "no $LIB: build first" >&2; exit 1; }

RUNNER=("$SRC/contrib/ib2-env.sh" --lib "$LIB")
if [ -n "${IB2_BENCH_RUNNER-x}" ] && [ -n "$DEVICES" ]; then
    RUNNER+=("$BUILD/contrib/softverbs/softverbs-run" --shm "$SHM"
             --devices "$DEVICES")
fi

# run RAILS SIZE: prints the overall bandwidth (MB/s), or fails
run() {
    local out
    out=$("$SRC/test/gtest/softverbs/sv_pair.sh" --expect '^Final:' \
          "${RUNNER[@]}" env UCX_TLS=rc_ib2,ud_verbs:aux \
          UCX_MAX_RNDV_RAILS="$1" UCX_LOG_LEVEL=info -- \
          ucx_perftest -p @PORT@ -t tag_bw -s "$2" -n "$ITERS" -w 5 2>&1) ||
        { echo "$out" | tail -5 >&2; return 1; }
    echo "$out" | grep -m1 'ep_cfg\[' | sed 's/.*ep_cfg/    lanes: ep_cfg/' >&2
    echo "$out" | awk '/^Final:/ { print $7 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2);
    print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }

echo "UCP tag_bw over rc_ib2, one rail vs two (UCX_MAX_RNDV_RAILS), $ROUNDS rounds ABBA, $ITERS messages each"
for s in "${SIZES[@]}"; do
    : >"$TMP/1"
    : >"$TMP/2"
    for r in $(seq 1 "$ROUNDS"); do
        if [ $((r % 2)) -eq 1 ]; then order="1 2"; else order="2 1"; fi
        for rails in $order; do
            v=$(run "$rails" "$s" 2>"$TMP/lanes") || exit 1
            [ "$r" -eq 1 ] && cat "$TMP/lanes"
            echo "$v" >>"$TMP/$rails"
            printf '  %9d B  round %2d  rails %d  %10.1f MB/s\n' "$s" "$r" \
                "$rails" "$v"
        done
    done
    a=$(median <"$TMP/1")
    b=$(median <"$TMP/2")
    printf '%9d B: one rail %10.1f MB/s, two rails %10.1f MB/s, ratio %.2f (medians)\n' \
        "$s" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print b / a }')"
done
