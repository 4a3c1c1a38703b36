#!/usr/bin/env bash
# Runs every suite in test/suites against a configured and built tree, then
# the suites marked "# sanitizer: yes" again against a build configured with
# --enable-sanitizers (if given), those marked "# tsan: yes" against a
# ThreadSanitizer build (if given; contrib/setup.sh builds only p2p's
# thread test there), and ends with one line
# "N passed, N failed". Exits 0 only if something ran and nothing failed.
#
# Usage: test/run-tests.sh BUILD_DIR [SANITIZER_BUILD_DIR [TSAN_BUILD_DIR]]
# IB2_SUITES=pattern limits the suites run (shell glob on the suite name).
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
main_build=$(cd "${1:?usage: run-tests.sh BUILD_DIR [SANITIZER_BUILD_DIR]}" && pwd)
san_build=${2:+$(cd "$2" && pwd)}
tsan_build=${3:+$(cd "$3" && pwd)}
PATTERN=${IB2_SUITES:-*}
LOGDIR=$main_build/test-logs
RESULTS=$LOGDIR/results
rm -rf "$LOGDIR"
mkdir -p "$LOGDIR"
: >"$RESULTS"
export SRC LOGDIR RESULTS

. "$SRC/test/lib.sh"

run_pass() {   # run_pass BUILD PREFIX ONLY_MARKED [MARK]
    local suite name start
    for suite in "$SRC"/test/suites/$PATTERN.sh; do
        [ -f "$suite" ] || continue
        if [ "$3" = 1 ] && ! grep -q "^# ${4:-sanitizer}: yes" "$suite"; then
            continue
        fi
        name=$2$(basename "$suite" .sh)
        echo "=== suite $name"
        start=$(date +%s)
        # A subshell keeps each suite's variables and traps its own.
        ( BUILD=$1 IB2_PREFIX=$2; export BUILD IB2_PREFIX; . "$suite" )
        echo "=== suite $name took $(( $(date +%s) - start )) s"
    done
}

run_pass "$main_build" "" 0
if [ -n "$san_build" ]; then
    # Leak checking is on; a sanitizer report fails the test that caused it.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    # Suppressed leaks (third-party libraries, test/lsan.supp) are not
    # listed: tests that check a program's stderr would see the listing.
    export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$SRC/test/lsan.supp:print_suppressions=0}
    run_pass "$san_build" "sanitizer/" 1
fi
if [ -n "$tsan_build" ]; then
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
    run_pass "$tsan_build" "tsan/" 1 tsan
fi

passed=$(grep -c '^PASS: ' "$RESULTS")
failed=$(grep -c '^FAIL: ' "$RESULTS")
skipped=$(grep -c '^SKIP: ' "$RESULTS")
if [ "$skipped" -ne 0 ]; then
    echo "--- skipped (each says why in its log):"
    grep '^SKIP: ' "$RESULTS"
fi
if [ "$failed" -ne 0 ]; then
    # Each failure's log ends here again: on a clean clone the logs go
    # with the machine, and only the end of this output is kept.
    echo "--- the end of each failure's log:"
    sed -n 's/^FAIL: //p' "$RESULTS" | while read -r line; do
        echo "=== $line"
        case $line in
        *"see "*")")   # a check, or a binary that failed as a whole
            log=${line##*see }
            tail -n 25 "${log%)}" 2>/dev/null ;;
        */*)          # one googletest case: its own lines in its log
            # The binary's log is the longest prefix of the name that has
            # one (a parameterized case's name has '/' of its own); the
            # case's name is compared as a string, not a pattern.
            bin=${line%/*}
            while [ ! -f "$LOGDIR/$bin.log" ] && [ "$bin" != "${bin%/*}" ]
            do
                bin=${bin%/*}
            done
            awk -v t="${line#"$bin"/}" '
                index($0, "[ RUN      ] " t) == 1 &&
                    length($0) == 13 + length(t) { on = 1 }
                on { print }
                index($0, "[  FAILED  ] " t) == 1 &&
                    substr($0, 14 + length(t), 1) ~ /[ ,]/ { on = 0 }' \
                "$LOGDIR/$bin.log" 2>/dev/null | tail -n 25 ;;
        esac | cut -c1-300
    done
    echo "--- failures (logs in $LOGDIR):"
    grep '^FAIL: ' "$RESULTS"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
