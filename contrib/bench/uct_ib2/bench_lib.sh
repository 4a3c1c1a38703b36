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

# Calls of FUNCTION in $TMP/cg.out: in --tree=caller output a function's
# line ("* fn") follows the lines of its callers ("< caller (Nx)"). Run
# away from the sources: where it finds them, callgrind_annotate leaves
# the caller lines out.
cg_calls() {   # cg_calls FUNCTION
    (cd "$TMP" && callgrind_annotate --auto=no --tree=caller \
         --threshold=100 cg.out 2>/dev/null) |
    awk -v fn="$1" '
        /^$/ { calls = 0; next }
        / < / { n = $0; sub(/.*\(/, "", n); sub(/x\).*/, "", n);
                gsub(",", "", n); calls += n; next }
        / \* / { if (index($0, ":" fn " ") > 0 && calls > total)
                    total = calls
                calls = 0 }
        END { print total + 0 }'
}

# Instructions per send operation, exclusive to the transport's function
# (its inlined helpers included; the device's ibv_post_send excluded).
# (on the device DEV; callgrind's output stays in $TMP/cg.out)
count_instr() {   # count_instr PORT TL FUNCTION PERFTEST-ARGS...
    local PORT=$1 tl=$2 fn=$3
    shift 3
    LD_PRELOAD=$LIB timeout 300 $RUNNER ucx_perftest -x "$tl" -d "$DEV" \
        -p $PORT "$@" >"$TMP/srv" 2>&1 &
    local spid=$!
    sleep 1
    LD_PRELOAD=$LIB timeout 600 $RUNNER valgrind --tool=callgrind \
        --callgrind-out-file="$TMP/cg.out" ucx_perftest -x "$tl" -d "$DEV" \
        -p $PORT "$@" localhost >"$TMP/cli" 2>&1
    wait $spid
    # Instructions: every line of the flat profile attributed to the
    # function, whatever file the code came from (code inlined from
    # headers is listed under the header's name); calls: cg_calls.
    # FUNCTION may be "fn+helper+...": the helpers the send path calls
    # out of line count too (per call of fn).
    local ir=0 calls part
    for part in ${fn//+/ }; do
        ir=$((ir + $(cd "$TMP" && callgrind_annotate --auto=no \
                         --threshold=100 cg.out 2>/dev/null |
                     awk -v fn="$part" '
                         $0 !~ / [<>*] / && index($0, ":" fn " ") > 0 ||
                         $0 ~ (":" fn "$") {
                             x = $1; gsub(",", "", x); ir += x }
                         END { print ir + 0 }')))
    done
    fn=${fn%%+*}
    calls=$(cg_calls "$fn")
    if [ "$ir" -gt 0 ] && [ "$calls" -gt 0 ]; then
        awk -v a="$ir" -v b="$calls" 'BEGIN { printf "%.1f\n", a / b }'
    else
        echo n/a
    fi
}

# Inclusive instructions of FUNCTION per call, from the last count_instr's
# $TMP/cg.out (everything it calls counted: for a progress function, what
# one call costs on average, empty polls and messages together)
incl_per_call() {   # incl_per_call FUNCTION
    local fn=$1 ir calls
    ir=$(cd "$TMP" && callgrind_annotate --auto=no --inclusive=yes \
             --threshold=100 cg.out 2>/dev/null |
         awk -v fn="$fn" 'index($0, ":" fn " [") > 0 {
                              x = $1; gsub(",", "", x); print x; exit }')
    calls=$(cg_calls "$fn")
    if [ -n "$ir" ] && [ "$calls" -gt 0 ]; then
        awk -v a="$ir" -v b="$calls" 'BEGIN { printf "%.1f %d\n", a / b, b }'
    else
        echo "n/a 0"
    fi
}
