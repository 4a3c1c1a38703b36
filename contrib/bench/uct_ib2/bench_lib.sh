# What the ucx_perftest scripts of this directory share; sourced. The
# caller sets LIB (libuct_ib2.so), RUNNER (the softverbs runner, or empty
# on hardware), DEV (device:port) and TMP (a scratch directory).

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
