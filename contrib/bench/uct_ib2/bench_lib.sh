# What the ucx_perftest scripts of this directory share; sourced after
# the caller set BUILD.

# bench_setup NAME: DEV (IB2_BENCH_DEVICE, or softverbs0:1), PORT, LIB
# (libuct_ib2.so), RUNNER (the softverbs runner on segment NAME-PID, or
# IB2_BENCH_RUNNER: empty on hardware) and TMP (a scratch directory, gone
# at exit with the segment); stops unless rc_ib2 is built
bench_setup() {
    DEV=${IB2_BENCH_DEVICE:-softverbs0:1}
    SHM=$1-$$
    PORT=$((30000 + $$ % 20000))
    LIB=$BUILD/src/uct_ib2/.libs/libuct_ib2.so
    RUNNER=${IB2_BENCH_RUNNER-$BUILD/contrib/softverbs/softverbs-run --shm $SHM}
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP" /dev/shm/$SHM /dev/shm/$SHM.* /dev/shm/$SHM-*' EXIT
    [ -f "$LIB" ] || { echo "no $LIB: build first" >&2; exit 1; }
}

# run_pair PORT TL ARGS...: prints the client's "Final:" line
# (called in $(...), so the caller advances PORT)
run_pair() {
    local PORT=$1 tl=$2
    shift 2
    LD_PRELOAD=$LIB timeout 120 $RUNNER ucx_perftest -x "$tl" -d "$DEV" \
        -p $PORT "$@" >"$TMP/srv" 2>&1 &
    local spid=$! out
    for _ in $(seq 1 50); do
        out=$(LD_PRELOAD=$LIB timeout 120 $RUNNER ucx_perftest -x "$tl" \
              -d "$DEV" -p $PORT "$@" localhost 2>&1)
        if echo "$out" | grep -q '^Final:'; then
            break
        fi
        sleep 0.2
    done
    wait $spid
    echo "$out" | grep '^Final:'
}

median() { sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2);
    print (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }
