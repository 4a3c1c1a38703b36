# Helpers shared by the suites under test/suites. Each suite is a shell
# script sourced by test/run-tests.sh with these variables set:
#   BUILD   absolute path of the configured build tree
#   SRC     absolute path of the source tree
#   RESULTS file to which every result line is appended
#   LOGDIR  directory for per-test logs
# A result line is "PASS: <name>" or "FAIL: <name>"; the runner counts them.

ib2_result() {   # ib2_result <PASS|FAIL> <name>; names carry the pass prefix
    printf '%s: %s%s\n' "$1" "${IB2_PREFIX:-}" "$2" | tee -a "$RESULTS"
}

# Run a googletest binary; every test case becomes one result line.
# ib2_gtest <name> <binary> [args...]
ib2_gtest() {
    local name=$1 bin=$2 log
    shift 2
    log="$LOGDIR/${IB2_PREFIX:-}$name.log"
    mkdir -p "$(dirname "$log")"
    if [ ! -x "$bin" ]; then
        ib2_result FAIL "$name (binary $bin not built)"
        return 1
    fi
    timeout --kill-after=10 "${IB2_TEST_TIMEOUT:-900}" "$bin" "$@" >"$log" 2>&1
    local rc=$?
    # Each finished test prints "[       OK ] Suite.Test (N ms)" or
    # "[  FAILED  ] Suite.Test (N ms)".
    local before after
    before=$(wc -l <"$RESULTS")
    sed -n -e 's|^\[       OK \] \([^ ]*\) (.*|PASS: '"${IB2_PREFIX:-}$name"'/\1|p' \
           -e 's|^\[  FAILED  \] \([^ ]*\) (.*|FAIL: '"${IB2_PREFIX:-}$name"'/\1|p' \
           -e 's|^\[  SKIPPED \] \([^ ]*\) (.*|SKIP: '"${IB2_PREFIX:-}$name"'/\1|p' \
           "$log" | tee -a "$RESULTS"
    after=$(wc -l <"$RESULTS")
    if [ "$after" -eq "$before" ]; then
        # A binary that ran no test proves nothing.
        ib2_result FAIL "$name (no test ran, see $log)"
        tail -n 30 "$log"
        return 1
    fi
    local hung
    hung=$(sed -n 's/^\*\*\* test hung ([^)]*): \([^ ]*\)$/\1/p' "$log" |
           tail -n 1)
    if [ -n "$hung" ]; then
        # The binary's watchdog named the test that hung: say which, so
        # that the summary alone points at it.
        ib2_result FAIL "$name/$hung (hung: no progress, see $log)"
        tail -n 30 "$log"
    elif [ $rc -ne 0 ] && ! grep -q '^\[  FAILED  \] [^ ]* (' "$log"; then
        # Crashed, hung or failed outside a test case: still one failure.
        ib2_result FAIL "$name (exit $rc, see $log)"
        tail -n 30 "$log"
    elif [ $rc -ne 0 ]; then
        grep -B 20 '^\[  FAILED  \] [^ ]* (' "$log" | head -n 80
    fi
    return $rc
}

# Run any command as one test. ib2_check <name> <command> [args...]
ib2_check() {
    local name=$1 log
    shift
    log="$LOGDIR/${IB2_PREFIX:-}$(printf '%s' "$name" | tr -c 'A-Za-z0-9_.-' '_').log"
    mkdir -p "$(dirname "$log")"
    if timeout --kill-after=10 "${IB2_TEST_TIMEOUT:-900}" "$@" >"$log" 2>&1; then
        ib2_result PASS "$name"
    else
        ib2_result FAIL "$name (exit $?, see $log)"
        tail -n 30 "$log"
        return 1
    fi
}
