#!/usr/bin/env bash
#
# The product's main job, run by `contrib/setup.sh main` after the build:
# two processes exchange messages through p2p over UCP over the rc_ib2
# transport, and the same two processes run again over UCX's own
# transports -- rc_verbs on the same device, and shared memory -- rounds
# alternating; and rc_ib2 once more on an iWARP device, connected through
# rdmacm (always softverbs' iWARP device type, beside a RoCE port that
# carries UCP's wire-up through ud_verbs). It prints one table: latency
# (half a ping-pong round trip) and streaming bandwidth per message size,
# medians over the rounds, and the ratio rc_ib2 / rc_verbs.
#
# Then the MPI view: the same sizes through Open MPI, pml ib2 (this
# product's PML, on p2p) next to Open MPI's pml ucx, over rc_ib2 and over
# shared memory (contrib/bench/mpi/mpi_pml_bench.sh), with the ratios and
# whether the targets hold. Both tables are also drawn, latency and
# bandwidth against message size with log scales, one line per transport
# and PML: OUT/p2p.png and OUT/mpi.png, next to the tables they are
# drawn from (OUT/*-latency.txt, OUT/*-bandwidth.txt).
#
# Where the machine has no RDMA device, the verbs transports run on
# softverbs, the software device built here.
#
#   contrib/main-job.sh BUILD_DIR [ROUNDS]
#
# MAIN_JOB_OUT is OUT (default BUILD_DIR/main-job).
# MAIN_JOB_BENCH_ARGS adds options to p2p_bench (e.g. "-m 1048576");
# MAIN_JOB_MPI_ARGS to mpi_pml_bench.sh (e.g. "-b 21"; "-p ib2,ucx,ob1"
# adds ob1).
#
set -euo pipefail
BUILD=$(cd "${1:?usage: main-job.sh BUILD_DIR [ROUNDS]}" && pwd)
ROUNDS=${2:-3}
OUT=${MAIN_JOB_OUT:-$BUILD/main-job}
BENCH=$BUILD/contrib/bench/p2p/p2p_bench
MPI_BENCH=$(cd "$(dirname "$0")" && pwd)/bench/mpi/mpi_pml_bench.sh
PLOT=$(dirname "$MPI_BENCH")/mpi_plot.sh
IB2_LIB=$BUILD/src/uct_ib2/.libs/libuct_ib2.so
MPIRUN=$(command -v mpirun) || {
    echo "main-job: mpirun not found: install openmpi-bin" \
         "(contrib/setup.sh does)" >&2
    exit 1
}
command -v gnuplot >/dev/null || {
    echo "main-job: gnuplot not found: install gnuplot-nox" \
         "(contrib/setup.sh does)" >&2
    exit 1
}
for f in "$BENCH" "$IB2_LIB"; do
    [ -e "$f" ] || { echo "main-job: $f is missing: build first" \
                          "(contrib/setup.sh build)" >&2; exit 1; }
done
case $ROUNDS in
''|*[!0-9]*|0) echo "main-job: ROUNDS must be a positive number" >&2
               exit 2 ;;
esac
mkdir -p "$OUT" || { echo "main-job: cannot create $OUT" >&2; exit 1; }

# No variable of the caller's may change what is measured.
for v in $(compgen -e | grep '^UCX_\|^P2P_\|^SOFTVERBS_'); do unset "$v"; done

TMP=$(mktemp -d)
SHM=ib2-main-job-$$
trap 'rm -rf "$TMP" /dev/shm/$SHM /dev/shm/$SHM.* /dev/shm/$SHM-*' EXIT

# A real adapter if there is one, else softverbs.
if compgen -G '/sys/class/infiniband/*' >/dev/null; then
    RUNNER=()
    DEVICE="the machine's RDMA device"
else
    RUNNER=("$BUILD/contrib/softverbs/softverbs-run" --shm "$SHM")
    DEVICE="softverbs (software RDMA device: no adapter on this machine)"
fi

# name | UCX_TLS | runs on: 1 the verbs device, 0 none, iwarp softverbs'
# iWARP device (rc_ib2 connects through rdmacm there)
CONFIGS=(
    "rc_ib2|rc_ib2,ud_verbs:aux|1"
    "rc_verbs|rc_verbs,ud_verbs:aux|1"
    "shm|shm|0"
    "rc_ib2_iwarp|rc_ib2,ud_verbs:aux|iwarp"
)
SV_RUN=$BUILD/contrib/softverbs/softverbs-run
IB2_PARAMS=$(cd "$(dirname "$0")/.." && pwd)/src/uct_ib2/ib2-device-params.ini

run_bench() {   # run_bench NAME TLS ON_VERBS OUT
    local runner=() vars=(UCX_TLS="$2")
    [ "$3" = 1 ] && runner=("${RUNNER[@]}")
    if [ "$3" = iwarp ]; then
        # UCP's wire-up needs ud_verbs, which iWARP lacks: a RoCE port
        # carries it. rc_ib2 opens on both ports; one rail keeps the data
        # on the first lane, and the check below makes sure that lane is
        # the iWARP port's.
        runner=("$SV_RUN" --shm "$SHM-iw")
        vars+=(SOFTVERBS_DEVICES=iw0:iwarp:1,roce0:eth:1
               UCX_NET_DEVICES=iw0:1,roce0:1 UCX_MAX_EAGER_RAILS=1
               UCX_MAX_RNDV_RAILS=1 UCX_LOG_LEVEL=info)
    fi
    # p2p loads the transport itself when told where it is
    # (and reads the device parameter file as installed: a build tree
    # has none)
    case $1 in rc_ib2*) vars+=(P2P_UCT_IB2="$IB2_LIB"
                               UCX_IB2_DEVICE_PARAMS="$IB2_PARAMS") ;; esac
    # shellcheck disable=SC2086
    if ! env "${vars[@]}" timeout 600 "${runner[@]}" "$MPIRUN" \
            --allow-run-as-root --bind-to none -np 2 "$BENCH" -r 1 \
            ${MAIN_JOB_BENCH_ARGS:-} >"$4.log" 2>&1; then
        echo "main-job: p2p_bench over $1 (UCX_TLS=$2) failed:" >&2
        tail -n 20 "$4.log" >&2
        exit 1
    fi
    if [ "$3" = iwarp ] &&
       ! grep -q 'ep_cfg\[.*tag(rc_ib2/iw0:1) .*am(rc_ib2/iw0:1)' \
            "$4.log"; then
        echo "main-job: over $1, UCP did not put its tag and am lanes on" \
             "rc_ib2/iw0:1 alone (see $4.log)" >&2
        grep 'ep_cfg' "$4.log" >&2 || true
        exit 1
    fi
    # bytes latency_us bandwidth_MBs of p2p, one line per size
    awk '$1 ~ /^[0-9]+$/ && NF == 7 { print $1, $2, $5 }' "$4.log" >>"$4"
}

echo "p2p over UCP: two processes, latency and bandwidth by message size"
echo "verbs device: $DEVICE"
echo "transports: rc_ib2 (this product), rc_verbs and shm (UCX's own);"
echo "iWARP: rc_ib2 on softverbs' iWARP device, connected through rdmacm;"
echo "$ROUNDS rounds, transports alternating in each; medians"
for r in $(seq 1 "$ROUNDS"); do
    for c in "${CONFIGS[@]}"; do
        IFS='|' read -r name tls verbs <<<"$c"
        printf '  round %d/%d: %s\n' "$r" "$ROUNDS" "$name" >&2
        run_bench "$name" "$tls" "$verbs" "$TMP/$name"
    done
done

# medians per size of column 2 (latency) and 3 (bandwidth) of each file
medians() {   # medians FILE -> "bytes lat bw" per size, in size order
    sort -k1,1n -k2,2g "$1" | awk '
        { n[$1]++; lat[$1, n[$1]] = $2; bw[$1, n[$1]] = $3
          if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } }
        function med(a, s, c,    i, j, t, v) {
            for (i = 1; i <= c; i++) v[i] = a[s, i]
            for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++)
                if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
            return (c % 2) ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2
        }
        END { for (i = 1; i <= k; i++) { s = order[i]
                  print s, med(lat, s, n[s]), med(bw, s, n[s]) } }'
}
medians "$TMP/rc_ib2" >"$TMP/m_ib2"
medians "$TMP/rc_verbs" >"$TMP/m_verbs"
medians "$TMP/shm" >"$TMP/m_shm"
medians "$TMP/rc_ib2_iwarp" >"$TMP/m_iw"

echo
printf '%9s | %-47s | %-47s\n' "" "latency (us)" "bandwidth (MB/s)"
printf '%9s | %9s %9s %6s %9s %9s | %9s %9s %6s %9s %9s\n' bytes rc_ib2 \
    rc_verbs ratio shm iWARP rc_ib2 rc_verbs ratio shm iWARP
awk 'FILENAME == ARGV[1] { vl[$1] = $2; vb[$1] = $3; next }
     FILENAME == ARGV[2] { sl[$1] = $2; sb[$1] = $3; next }
     FILENAME == ARGV[3] { wl[$1] = $2; wb[$1] = $3; next }
     ($1 in vl) && ($1 in sl) && ($1 in wl) {
         printf "%9d | %9.3f %9.3f %6.2f %9.3f %9.3f | %9.1f %9.1f %6.2f " \
                "%9.1f %9.1f\n", $1, $2, vl[$1], $2 / vl[$1], sl[$1], \
                wl[$1], $3, vb[$1], $3 / vb[$1], sb[$1], wb[$1] }' \
    "$TMP/m_verbs" "$TMP/m_shm" "$TMP/m_iw" "$TMP/m_ib2"
echo "(latency ratio below 1 and bandwidth ratio above 1: rc_ib2 is ahead;"
echo " iWARP: rc_ib2 over rdmacm on softverbs' iWARP device type)"
echo "full output of each run: p2p_bench, also next to UCP's tag API;"
echo "see docs/p2p.md and docs/uct_ib2.md"

# p2p's medians as plot tables: one column per transport
for k in 2:latency 3:bandwidth; do
    {
        echo "bytes p2p/rc_ib2 p2p/rc_verbs p2p/shm p2p/rc_ib2-iWARP"
        awk -v c="${k%%:*}" '
            FILENAME == ARGV[1] { v[$1] = $c; next }
            FILENAME == ARGV[2] { s[$1] = $c; next }
            FILENAME == ARGV[3] { w[$1] = $c; next }
            { print $1, $c, (($1 in v) ? v[$1] : "-"),
                    (($1 in s) ? s[$1] : "-"), (($1 in w) ? w[$1] : "-") }' \
            "$TMP/m_verbs" "$TMP/m_shm" "$TMP/m_iw" "$TMP/m_ib2"
    } >"$OUT/p2p-${k#*:}.txt"
done
"$PLOT" -t "p2p over UCP, 2 processes: medians of $ROUNDS rounds" \
    "$OUT/p2p.png" "$OUT/p2p-latency.txt" "$OUT/p2p-bandwidth.txt"

# The MPI view: pml ib2 and pml ucx over rc_ib2 and shm. Fewer batches
# than the benchmark's default keep the main job to a few minutes.
echo
echo "---- MPI: Open MPI with pml ib2 (on p2p) and pml ucx ----"
# shellcheck disable=SC2086
"$MPI_BENCH" -r "$ROUNDS" -p ib2,ucx -t rc_ib2,shm -b 7 -P "$OUT/mpi" \
    ${MAIN_JOB_MPI_ARGS:-} "$BUILD"
echo
echo "plots: $OUT/p2p.png (p2p by transport), $OUT/mpi.png (MPI by PML" \
     "and transport); docs/pml_ib2.md explains them"
