# UCX's own uct test suite (test/gtest of the installed UCX's source
# package, built by contrib/ucx-gtest/build.sh with rc_ib2 added to its IB
# transport list) on softverbs: every class in contrib/ucx-gtest/classes.list
# for rc_verbs, the reference, and for rc_ib2 with mixed, per-peer-only,
# shared-only and XRC-only receive queues, and connected through rdmacm on
# a RoCE and on an iWARP device (modes.sh), each class under its own time
# limit. A test
# rc_ib2 cannot run is left out only through contrib/ucx-gtest/rc_ib2.skip;
# rc_verbs' own failures on softverbs are expected through rc_verbs.xfail.
# See docs/ucx-gtest.md.
for v in $(compgen -e | grep '^SOFTVERBS_\|^UCX_'); do unset "$v"; done

ucxg=$SRC/contrib/ucx-gtest
. "$ucxg/modes.sh"

# IB2_UCXG_MODES names the modes to run (default: all of modes.sh's
# UCXG_MODES). Keep
# verbs among them: a test that skips itself on rc_ib2 is judged against
# its rc_verbs result.
if [ -n "${IB2_UCXG_MODES:-}" ]; then
    for mode in $IB2_UCXG_MODES; do
        if ! ucxg_mode_tl "$mode" >/dev/null; then
            ib2_result FAIL "ucx-gtest/IB2_UCXG_MODES (unknown mode '$mode': use some of $UCXG_MODES_ALL)"
            return 0
        fi
    done
    UCXG_MODES=$IB2_UCXG_MODES
fi
ucxg_out=$LOGDIR/${IB2_PREFIX:-}ucx-gtest
rm -rf "$ucxg_out"
mkdir -p "$ucxg_out"

# Normally already built (contrib/setup.sh test builds it; a cached build
# is reused); otherwise this builds it once, which takes a while.
# IB2_UCX_GTEST_DIR names another build of it instead.
if [ -n "${IB2_UCX_GTEST_DIR:-}" ]; then
    ucxg_dir=$IB2_UCX_GTEST_DIR
elif ! ucxg_dir=$("$ucxg/build.sh" 2>"$ucxg_out/build.err"); then
    cat "$ucxg_out/build.err"
    ib2_result FAIL "ucx-gtest/build (see $ucxg_out/build.err)"
    return 0
fi

ucxg_run() {   # ucxg_run ARGS...: run-class.sh for this build
    "$ucxg/run-class.sh" -b "$BUILD" -g "$ucxg_dir" -o "$ucxg_out" "$@" \
        </dev/null
}

ucxg_tag() {   # ucxg_tag MODE: the mode's name in result lines
    case $1 in
    verbs) echo rc_verbs ;;
    *) echo "rc_ib2-$1" ;;
    esac
}

# Every class UCX instantiates for either transport must be in classes.list,
# to be run or to say why not: a class is never left out silently.
ucxg_run verbs --classes >"$ucxg_out/classes.rc_verbs"
ucxg_run mixed --classes >"$ucxg_out/classes.rc_ib2"
if [ ! -s "$ucxg_out/classes.rc_ib2" ]; then
    ib2_result FAIL "ucx-gtest/rc_ib2-instantiated (no rc_ib2 test: is the plugin loaded and softverbs0:1 there?)"
fi
if [ ! -s "$ucxg_out/classes.rc_verbs" ]; then
    ib2_result FAIL "ucx-gtest/rc_verbs-instantiated (no rc_verbs test on softverbs0:1)"
fi
sort -u "$ucxg_out"/classes.rc_* >"$ucxg_out/classes.all"
grep -v '^\s*\(#\|$\)' "$ucxg/classes.list" | awk '{ print $1 }' | sort -u \
    >"$ucxg_out/classes.listed"
while read -r c; do
    ib2_result FAIL "ucx-gtest/classes.list ($c is instantiated but not listed)"
done < <(comm -23 "$ucxg_out/classes.all" "$ucxg_out/classes.listed")

# ucxg_report MODE CLASS: one result line per test of the class's .res.
ucxg_report() {
    local mode=$1 class=$2 tag status test why vstatus
    tag=$(ucxg_tag "$mode")
    while IFS=$'\t' read -r status test why; do
        case $status in
        PASS)   ib2_result PASS "ucx-gtest/$tag/$test" ;;
        XPASS)  ib2_result PASS "ucx-gtest/$tag/$test ($why)" ;;
        FAIL)   ib2_result FAIL "ucx-gtest/$tag/$test ($why, see $ucxg_out/$mode/$class.out)" ;;
        XFAIL)  ib2_result SKIP "ucx-gtest/$tag/$test (expected failure: $why)" ;;
        LISTED) ib2_result SKIP "ucx-gtest/$tag/$test (skip list: $why)" ;;
        SKIP)
            # A test that skips itself on rc_ib2 but runs on rc_verbs needs
            # a line in rc_ib2.skip (or the mode's rc_ib2-MODE.skip) saying
            # why it cannot apply.
            vstatus=$(awk -F'\t' -v t="$test" '$2 == t { print $1 }' \
                      "$ucxg_out/verbs/$class.res" 2>/dev/null)
            if [ "$mode" != verbs ] && [ "$vstatus" = PASS ]; then
                ib2_result FAIL "ucx-gtest/$tag/$test (skips itself: $why; passes on rc_verbs and is not in rc_ib2.skip or rc_ib2-$mode.skip)"
            else
                ib2_result SKIP "ucx-gtest/$tag/$test (skipped by the test: $why)"
            fi
            ;;
        *)      ib2_result FAIL "ucx-gtest/$tag/$test (unknown status $status)" ;;
        esac
    done <"$ucxg_out/$mode/$class.res"
}

# ucxg_one MODE CLASS LIMIT TEST-LIMIT: run a class, keep its exit status
# and time.
ucxg_one() {
    local t0 rc cpu
    t0=$(date +%s)
    # CPU time (user+system s) of the class's processes too: on a busy
    # machine the wall clock says little about what the class costs
    local TIMEFORMAT='%U+%S'
    { time ucxg_run -l "$3" -t "$4" "$1" "$2" >"$ucxg_out/$1/$2.out" 2>&1
      echo $? >"$ucxg_out/$1/$2.exit"; } 2>"$ucxg_out/$1/$2.cpu"
    rc=$(cat "$ucxg_out/$1/$2.exit")
    cpu=$(tail -n 1 "$ucxg_out/$1/$2.cpu")
    echo "$rc $(( $(date +%s) - t0 )) $cpu" >"$ucxg_out/$1/$2.rc"
    echo "--- $2 on $(ucxg_tag "$1"): exit $rc, $(( $(date +%s) - t0 )) s, cpu $cpu"
}

# The classes, as (mode, class, limit, test limit), in list order.
: >"$ucxg_out/jobs"
while read -r class limit tlimit _; do
    case $class in ''|'#'*) continue ;; esac
    [ "$limit" = - ] && continue
    [[ $tlimit =~ ^[0-9]+$ ]] || tlimit=60
    for mode in $UCXG_MODES; do
        # A class rc_ib2 skips as a whole says nothing run on rc_verbs.
        if [ "$mode" = verbs ] &&
                grep -q "^$class\.\*[[:space:]]" "$ucxg/rc_ib2.skip"; then
            continue
        fi
        echo "$mode $class $limit $tlimit" >>"$ucxg_out/jobs"
    done
done <"$ucxg/classes.list"

# Run them IB2_UCXG_JOBS at a time (default: one per core, at most 2):
# each gtest process is one thread doing both sides of its connections.
jobs_max=${IB2_UCXG_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs_max" -gt 2 ] && [ -z "${IB2_UCXG_JOBS:-}" ] && jobs_max=2
start=$(date +%s)
for mode in $UCXG_MODES; do mkdir -p "$ucxg_out/$mode"; done
while read -r mode class limit tlimit; do
    if ! grep -qx "$class" "$ucxg_out/classes.$(ucxg_mode_tl "$mode")"; then
        continue   # reported below
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
        wait -n
    done
    ucxg_one "$mode" "$class" "$limit" "$tlimit" &
done <"$ucxg_out/jobs"
wait
took=$(( $(date +%s) - start ))

# Results in list order; rc_verbs' results are all there before rc_ib2's
# are compared with them.
while read -r mode class _; do
    tl=$(ucxg_mode_tl "$mode")
    tag=$(ucxg_tag "$mode")
    if ! grep -qx "$class" "$ucxg_out/classes.$tl"; then
        ib2_result FAIL "ucx-gtest/$tag/$class (listed but not instantiated for $tl)"
        continue
    fi
    rc=none
    [ -f "$ucxg_out/$mode/$class.rc" ] && read -r rc _ <"$ucxg_out/$mode/$class.rc"
    case $rc in
    none) ib2_result FAIL "ucx-gtest/$tag/$class (the run did not finish)" ;;
    3) ib2_result FAIL "ucx-gtest/$tag/$class (no test listed, see $ucxg_out/$mode/$class.log)" ;;
    2) ib2_result FAIL "ucx-gtest/$tag/$class (could not run: $(tail -n 1 "$ucxg_out/$mode/$class.out"))" ;;
    *) ucxg_report "$mode" "$class" ;;
    esac
done <"$ucxg_out/jobs"

"$ucxg/table.sh" "$ucxg_out" >"$ucxg_out/table.md"
cat "$ucxg_out/table.md"
echo "--- UCX uct tests took $took s ($jobs_max at a time); table in $ucxg_out/table.md"
