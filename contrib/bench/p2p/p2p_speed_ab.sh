#!/usr/bin/env bash
#
# Small messages at UCP's speed: p2p next to UCP's tag API, over shared
# memory and over rc_ib2 (on softverbs where the machine has no RDMA
# device), as issue 10 measures them. p2p_bench runs both on the same
# worker and endpoints (so with the same UCP configuration: transports,
# peer error handling), rounds alternating p2p and UCP, and reports
# medians; this script runs it RUNS times per transport, transports
# alternating run by run, and prints per size up to the eager limit
#
#   latency: p2p us, UCP tag us, p2p / UCP   (target: at most 1.10)
#   and for 8 bytes the message rate ratio   (target: at least 0.90)
#
# each the median over the runs of the run's own medians and ratio. With
# OLD_BUILD it then compares the 8-byte latency of two p2p builds (issue
# 9: not worse than before), runs alternating, medians.
#
#   contrib/bench/p2p/p2p_speed_ab.sh BUILD_DIR [RUNS [OLD_BUILD_DIR]]
#
# P2P_SPEED_ROUNDS (9), P2P_SPEED_ITERS (2000), P2P_SPEED_MAX (16383, the
# default eager limit: sizes 8 .. 8192) change what p2p_bench is given;
# P2P_SPEED_SPIN sets P2P_WAIT_SPIN for p2p (default: p2p's default);
# P2P_SPEED_TLS chooses the transports ("shm rc_ib2", each with p2p's
# defaults: eager rings on over shared memory, off over RDMA; a suffix
# -ring sets P2P_RING=y, -noring P2P_RING=n: "shm shm-noring" compares
# rings on and off over shm, "rc_ib2 rc_ib2-ring" over rc_ib2, runs
# alternating);
# on softverbs
# P2P_SPEED_CQE_INLINE=0 turns off its delivery of receives of up to 56
# bytes inside the completion (SOFTVERBS_CQE_INLINE=0), so that p2p and
# UCP take the same receive path at every size (see docs/p2p.md).
# Wall-clock figures need a quiet machine: on a loaded one they scatter,
# and p2p's blocking calls, which yield the core after P2P_WAIT_SPIN idle
# polls, lose it to other processes where UCP's baseline spins on.
#
set -euo pipefail
BUILD=$(cd "${1:?usage: p2p_speed_ab.sh BUILD_DIR [RUNS [OLD_BUILD_DIR]]}" &&
        pwd)
RUNS=${2:-3}
PARAMS=$(cd "$(dirname "$0")/../../.." && pwd)/src/uct_ib2/ib2-device-params.ini
OLD=${3:+$(cd "$3" && pwd)}
ROUNDS=${P2P_SPEED_ROUNDS:-9}
ITERS=${P2P_SPEED_ITERS:-2000}
MAX=${P2P_SPEED_MAX:-16383}
SPIN=${P2P_SPEED_SPIN:-}
TLS=${P2P_SPEED_TLS:-shm rc_ib2}
CQE_INLINE=${P2P_SPEED_CQE_INLINE:-}
for tl in $TLS; do
    case $tl in shm|rc_ib2|shm-ring|rc_ib2-ring|shm-noring|rc_ib2-noring) ;;
        *) echo "p2p_speed_ab: P2P_SPEED_TLS: '$tl' is not shm or rc_ib2," \
                "with or without -ring or -noring" >&2; exit 2 ;; esac
done
case $CQE_INLINE in ''|0|1) ;; *) echo "p2p_speed_ab: P2P_SPEED_CQE_INLINE"                                        "must be 0 or 1" >&2; exit 2 ;; esac
MPIRUN=$(command -v mpirun) || { echo "p2p_speed_ab: mpirun not found" >&2
                                 exit 1; }
for b in "$BUILD" ${OLD:+"$OLD"}; do
    [ -x "$b/contrib/bench/p2p/p2p_bench" ] ||
        { echo "p2p_speed_ab: $b/contrib/bench/p2p/p2p_bench is missing:" \
               "build first" >&2; exit 1; }
done
case $RUNS in ''|*[!0-9]*|0) echo "p2p_speed_ab: RUNS must be a positive" \
                                  "number" >&2; exit 2 ;; esac

# No variable of the caller's may change what is measured.
for v in $(compgen -e | grep '^UCX_\|^P2P_\|^SOFTVERBS_'); do unset "$v"; done

TMP=$(mktemp -d)
SHM=ib2-p2p-speed-$$
trap 'rm -rf "$TMP" /dev/shm/$SHM /dev/shm/$SHM.* /dev/shm/$SHM-*' EXIT
if compgen -G '/sys/class/infiniband/*' >/dev/null; then
    VERBS_RUNNER=()
    DEVICE="the machine's RDMA device"
else
    VERBS_RUNNER=("$BUILD/contrib/softverbs/softverbs-run" --shm "$SHM")
    DEVICE="softverbs"
fi

bench() {   # bench BUILD TRANSPORT OUT ARGS...: one p2p_bench run
    local build=$1 tl=$2 out=$3 runner=() vars=(UCX_TLS=shm) ring=
    case $tl in
        *-noring) tl=${tl%-noring} ring=n ;;
        *-ring)   tl=${tl%-ring} ring=y ;;
    esac
    shift 3
    if [ "$tl" = rc_ib2 ]; then
        runner=("${VERBS_RUNNER[@]}")
        # the device parameter file as installed (a build tree has none):
        # it gives softverbs its cost per zero-copy gather entry
        vars=(UCX_TLS=rc_ib2,ud_verbs:aux
              P2P_UCT_IB2="$build/src/uct_ib2/.libs/libuct_ib2.so"
              UCX_IB2_DEVICE_PARAMS="$PARAMS")
        [ -n "$CQE_INLINE" ] && vars+=(SOFTVERBS_CQE_INLINE="$CQE_INLINE")
    fi
    [ -n "$SPIN" ] && vars+=(P2P_WAIT_SPIN="$SPIN")
    [ -n "$ring" ] && vars+=(P2P_RING="$ring")
    if ! env "${vars[@]}" timeout 900 "${runner[@]}" "$MPIRUN" \
            --allow-run-as-root --bind-to none -np 2 \
            "$build/contrib/bench/p2p/p2p_bench" "$@" >"$out.log" 2>&1; then
        echo "p2p_speed_ab: p2p_bench over $tl failed:" >&2
        tail -n 20 "$out.log" >&2
        exit 1
    fi
    grep '^# p2p_bench' "$out.log" | head -1 >"$out.head"
    # bytes p2p_us ucp_us lat_x p2p_MB/s ucp_MB/s bw_x
    awk '$1 ~ /^[0-9]+$/ && NF == 7' "$out.log" >>"$out"
}

# median per size (column 1) of every other column
medians() {
    sort -k1,1n "$1" | awk '
        function med(c, s,    i, j, t, v, m) {
            m = n[s]
            for (i = 1; i <= m; i++) v[i] = x[s, c, i]
            for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
                if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
            return (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
        }
        { if (!($1 in n)) order[++k] = $1
          n[$1]++; for (c = 2; c <= NF; c++) x[$1, c, n[$1]] = $c; nf = NF }
        END { for (i = 1; i <= k; i++) { s = order[i]; printf "%s", s
                  for (c = 2; c <= nf; c++) printf " %s", med(c, s)
                  printf "\n" } }'
}

echo "p2p next to UCP's tag API (same worker, endpoints, UCP configuration)"
echo "p2p_bench -s 8 -m $MAX -r $ROUNDS -n $ITERS; $RUNS run(s) per" \
     "transport, alternating; medians over the runs"
echo "rc_ib2 on: $DEVICE${SPIN:+; P2P_WAIT_SPIN=$SPIN}${CQE_INLINE:+;\
 SOFTVERBS_CQE_INLINE=$CQE_INLINE}"
for r in $(seq 1 "$RUNS"); do
    for tl in $TLS; do
        printf '  run %d/%d: %s\n' "$r" "$RUNS" "$tl" >&2
        bench "$BUILD" "$tl" "$TMP/$tl" -s 8 -m "$MAX" -r "$ROUNDS" \
            -n "$ITERS"
    done
done
for tl in $TLS; do
    echo
    echo "== $tl: $(sed 's/^# p2p_bench: //' "$TMP/$tl.head")"
    printf '%8s %9s %9s %7s %9s %9s %7s\n' bytes p2p_us ucp_us lat_x \
        p2p_MB/s ucp_MB/s rate_x
    medians "$TMP/$tl" | awk '{ printf "%8s %9.3f %9.3f %7.3f %9.1f %9.1f %7.3f\n",
                                 $1, $2, $3, $4, $5, $6, $7 }' |
        tee "$TMP/$tl.med"
    awk -v tl="$tl" '
        { if ($4 > worst) { worst = $4; at = $1 } if ($1 == 8) rate = $7 }
        END { printf "%s: worst latency ratio %.3f (at %s B, target <= 1.10: %s);" \
                     " 8-byte rate ratio %.3f (target >= 0.90: %s)\n", tl, worst,
                     at, (worst <= 1.10) ? "met" : "NOT met", rate,
                     (rate >= 0.90) ? "met" : "NOT met" }' "$TMP/$tl.med"
done

[ -n "$OLD" ] || exit 0
echo
echo "8-byte latency over shm, this build next to $OLD"
echo "(p2p_bench -x 8 -r 5, $RUNS x 3 runs each, alternating; medians)"
for r in $(seq 1 $((RUNS * 3))); do
    for v in new old; do
        b=$BUILD; [ $v = old ] && b=$OLD
        printf '  run %d/%d: %s\n' "$r" $((RUNS * 3)) "$v" >&2
        bench "$b" shm "$TMP/ab.$v" -x 8 -r 5 -n "$ITERS"
    done
done
for v in new old; do medians "$TMP/ab.$v" >"$TMP/ab.$v.med"; done
paste "$TMP/ab.new.med" "$TMP/ab.old.med" | awk '
    { printf "p2p us: %.3f new, %.3f old, new / old %.3f " \
             "(UCP tag in the same runs: %.3f, %.3f; p2p / UCP %.3f, %.3f)\n",
             $2, $9, $2 / $9, $3, $10, $4, $11 }'
