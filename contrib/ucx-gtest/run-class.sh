#!/usr/bin/env bash
#
# Runs one class of UCX's uct tests in one mode on the softverbs device and
# writes one result per test. A crash or hang ends only the test it
# happened in: the class goes on with the tests after it, within the time
# limit of the class.
#
#   contrib/ucx-gtest/run-class.sh [options] MODE CLASS
#
#   MODE    verbs | mixed | P | S | X | roce-cm | iwarp  (modes.sh:
#           rc_verbs, or rc_ib2 with its default, per-peer-only,
#           shared-only or XRC-only receive queues, or connected through
#           rdmacm on RoCE and iWARP)
#   CLASS   a uct test class, e.g. uct_flush_test; or --classes: print
#           the classes instantiated for the mode's transport, one a line
#
#   -b DIR  ib2 build tree with libuct_ib2 and softverbs (default ./build
#           of this clone, or $IB2_BUILD_DIR)
#   -g DIR  UCX gtest build (default: the cache dir build.sh names)
#   -o DIR  output directory (default ./ucx-gtest-out); this writes
#           DIR/MODE/CLASS.log (the test output) and DIR/MODE/CLASS.res
#   -l SEC  time limit for the whole class (default 600)
#   -t SEC  time limit for one test, UCX's gtest watchdog (default 60)
#   -f PAT  only the tests of CLASS matching the gtest pattern PAT
#           (e.g. 'put_bcopy_flush_ep_no_comp/*')
#
# CLASS.res has one line per test: STATUS <TAB> CLASS.TEST/N <TAB> REASON,
# STATUS one of
#   PASS, FAIL (REASON: the failure, crash or hang from the log),
#   SKIP   the test skipped itself (REASON: its message),
#   LISTED rc_ib2 only: not run, rc_ib2.skip says why (REASON),
#   XFAIL  rc_verbs only: failed as rc_verbs.xfail expects (REASON: the
#          list's reason, then the failure),
#   XPASS  rc_verbs only: in rc_verbs.xfail but passed.
# Exit status: 0 all passed or skipped, 1 something failed, 2 usage or
# set-up error, 3 the class has no test in this mode.
#
# Variables set by the caller (UCX_*, SOFTVERBS_*) reach the test, so a
# failing case can be rerun with more logging.
set -uo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
. "$HERE/modes.sh"

usage() { sed -n '3,/^set -uo/p' "$0" | sed -e '/^set -uo/d' -e 's/^# \{0,1\}//'; }
die() { printf 'run-class: %s\n' "$*" >&2; exit 2; }

build=${IB2_BUILD_DIR:-$TOP/build}
gdir=
out=./ucx-gtest-out
limit=600
wd=60
pat='*'
while getopts b:g:o:l:t:f:h opt; do
    case $opt in
    b) build=$OPTARG ;;
    g) gdir=$OPTARG ;;
    o) out=$OPTARG ;;
    l) limit=$OPTARG ;;
    t) wd=$OPTARG ;;
    f) pat=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { usage >&2; exit 2; }
mode=$1
class=$2
[[ $limit =~ ^[0-9]+$ ]] || die "-l $limit: give the class time limit in seconds"
[[ $wd =~ ^[0-9]+$ ]] || die "-t $wd: give the test time limit in seconds"
tl=$(ucxg_mode_tl "$mode") || exit 2
rq=$(ucxg_mode_rq "$mode")
mapfile -t mode_env < <(ucxg_mode_env "$mode")
[ ${#mode_env[@]} -gt 0 ] || exit 2

[ -n "$gdir" ] || gdir=$("$HERE/build.sh" --dir)
gtest=$gdir/ucx/test/gtest/gtest
[ -f "$gdir/ok" ] && [ -x "$gtest" ] ||
    die "no UCX gtest build in $gdir: run contrib/ucx-gtest/build.sh"
sv_lib=$build/contrib/softverbs/.libs/libsoftverbs.so
ib2_lib=$build/src/uct_ib2/.libs/libuct_ib2.so
[ -f "$sv_lib" ] && [ -f "$ib2_lib" ] ||
    die "softverbs or libuct_ib2 not built in $build: run contrib/setup.sh build"

if [ "$class" != --classes ]; then
    mkdir -p "$out/$mode" || die "cannot create $out/$mode"
    log=$out/$mode/$class.log
    res=$out/$mode/$class.res
    : >"$log"
    : >"$res"
fi

# Each run has a softverbs segment of its own, removed however it ends.
shm=ucx-gtest-$mode-$$
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "/dev/shm/$shm" "/dev/shm/$shm".* "/dev/shm/$shm"-*' EXIT

preload=$sv_lib
[ "$tl" = rc_ib2 ] && preload="$sv_lib $ib2_lib"
run_gtest() {   # run_gtest TIMEOUT ARGS...
    local t=$1
    shift
    # The device's ring heap at 8 GiB instead of 1: test_uct_peer_failure_
    # multiple opens a receiver per send queue entry (256), and rc_verbs'
    # CQs and receive queues for them outgrow 1 GiB (ENOMEM from
    # ibv_create_cq); the heap is sparse, only pages in use cost memory.
    # UCX_HANDLE_ERRORS=bt: a crash prints where and exits, never freezes;
    # with SIGABRT among the error signals, so does the gtest watchdog's
    # abort of a hung test, which then shows where it hung.
    timeout --kill-after=10 "$t" env \
        LD_PRELOAD="$preload${LD_PRELOAD:+ $LD_PRELOAD}" \
        SOFTVERBS_SHM="$shm" \
        SOFTVERBS_HEAP_MB="${SOFTVERBS_HEAP_MB:-8192}" \
        UCX_HANDLE_ERRORS="${UCX_HANDLE_ERRORS:-bt}" \
        UCX_ERROR_SIGNALS="${UCX_ERROR_SIGNALS:-ILL,SEGV,BUS,FPE,ABRT}" \
        ${rq:+UCX_IB2_RECEIVE_QUEUES="$rq"} \
        "${mode_env[@]}" \
        ${sv_pin:+SOFTVERBS_PIN="${SOFTVERBS_PIN:-$sv_pin}"} \
        "$gtest" "$@"
}

demangle() {   # C++ names in backtraces, readable where c++filt exists
    if command -v c++filt >/dev/null 2>&1; then c++filt; else cat; fi
}

# list_match FILE NAME: print the reason of the first pattern in FILE
# ("CLASS.TEST" glob, then the reason) that NAME (CLASS.TEST/N) matches.
list_match() {
    local pattern why
    [ -f "$1" ] || return 1
    while read -r pattern why; do
        case $pattern in ''|'#'*) continue ;; esac
        # shellcheck disable=SC2053  # the pattern is a glob on purpose
        if [[ $2 == $pattern || $2 == $pattern/* ]]; then
            printf '%s\n' "$why"
            return 0
        fi
    done <"$1"
    return 1
}

if [ "$class" = --classes ]; then
    run_gtest 120 --gtest_list_tests --gtest_filter="$tl/*" >"$tmp/list" 2>&1
    sed -n "s|^$tl/\([A-Za-z0-9_]*\)\.\$|\1|p" "$tmp/list" | sort -u
    exit 0
fi

# All tests of the class in this mode, by full name (TL/CLASS.TEST/N).
run_gtest 120 --gtest_list_tests --gtest_filter="$tl/$class.$pat" \
    >"$tmp/list" 2>&1
awk '/^[A-Za-z0-9_]+\/[A-Za-z0-9_]+\.$/ { s = $1; next }
     /^  [^ ]/ && s != "" { print s $1 }' "$tmp/list" >"$tmp/all"
if [ ! -s "$tmp/all" ]; then
    { echo "=== no test of $tl/$class.$pat is listed:"; cat "$tmp/list"; } >>"$log"
    exit 3
fi

# rc_ib2.skip holds for every rc_ib2 mode; rc_ib2-MODE.skip, where there
# is one, adds what that mode's device cannot do (iWARP: no atomics).
skip_list=$HERE/rc_ib2.skip
mode_skip_list=$HERE/rc_ib2-$mode.skip
xfail_list=$HERE/rc_verbs.xfail
todo=()
while read -r full; do
    short=${full#"$tl"/}
    if [ "$tl" = rc_ib2 ] &&
            { why=$(list_match "$skip_list" "$short") ||
              { why=$(list_match "$mode_skip_list" "$short") &&
                why="$why [rc_ib2-$mode.skip]"; }; }; then
        printf 'LISTED\t%s\t%s\n' "$short" "$why" >>"$res"
    else
        todo+=("$full")
    fi
done <"$tmp/all"

# run_todo: run the tests in todo; after a crash or hang, again from the
# next test, until the class's deadline.
run_todo() {
    while [ ${#todo[@]} -gt 0 ]; do
        left=$(( deadline - $(date +%s) ))
        if [ $left -le 0 ]; then
            for full in "${todo[@]}"; do
                printf 'FAIL\t%s\tnot run: the class used up its %s s limit\n' \
                    "${full#"$tl"/}" "$limit" >>"$res"
            done
            break
        fi
        attempt=$((attempt + 1))
        filter=$(IFS=:; printf '%s' "${todo[*]}")
        echo "=== run $attempt: ${#todo[@]} tests, $left s left" >>"$log"
        run_gtest "$left" -t "$wd" --gtest_filter="$filter" >"$tmp/run" 2>&1
        rc=$?
        cat "$tmp/run" >>"$log"
        echo "=== run $attempt exit $rc" >>"$log"
        awk -f "$HERE/parse-log.awk" "$tmp/run" | demangle >"$tmp/parsed"
        if [ ! -s "$tmp/parsed" ]; then
            why=$(grep -v '^\s*$' "$tmp/run" | tail -n 1)
            for full in "${todo[@]}"; do
                printf 'FAIL\t%s\tgtest ran no test (exit %s): %s\n' \
                    "${full#"$tl"/}" "$rc" "$why" >>"$res"
            done
            break
        fi
        while IFS=$'\t' read -r status full why; do
            short=${full#"$tl"/}
            if [ "$status" = RUNNING ]; then
                if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
                    why="hang: still running when the class's $limit s ran out"
                fi
                why="ended the process (exit $rc): $why"
                status=FAIL
            fi
            printf '%s\t%s\t%s\n' "$status" "$short" "$why" >>"$res"
        done <"$tmp/parsed"
        # what is not in the results yet is still to do
        cut -f2 "$tmp/parsed" | sort >"$tmp/done"
        mapfile -t todo < <(printf '%s\n' "${todo[@]}" | sort | comm -23 - "$tmp/done")
        if [ $rc -eq 0 ] && [ ${#todo[@]} -gt 0 ]; then
            # gtest succeeded but left tests out: they are not lost silently
            for full in "${todo[@]}"; do
                printf 'FAIL\t%s\tnot run by gtest although selected\n' \
                    "${full#"$tl"/}" >>"$res"
            done
            break
        fi
    done
}

# Tests in unpinned.list run with softverbs' pinning checks off, on both
# transports alike; the rest with the device's defaults.
unpinned_list=$HERE/unpinned.list
all_todo=("${todo[@]}")
todo=()
pinned=()
for full in "${all_todo[@]}"; do
    if list_match "$unpinned_list" "${full#"$tl"/}" >/dev/null; then
        todo+=("$full")
    else
        pinned+=("$full")
    fi
done
deadline=$(( $(date +%s) + limit ))
attempt=0
sv_pin=0
run_todo
todo=("${pinned[@]}")
sv_pin=
run_todo

# rc_verbs' known failures on softverbs.
if [ "$tl" = rc_verbs ] && [ -f "$xfail_list" ]; then
    while IFS=$'\t' read -r status short why; do
        if xwhy=$(list_match "$xfail_list" "$short"); then
            case $status in
            FAIL) status=XFAIL; why="$xwhy; this run: $why" ;;
            PASS) status=XPASS; why="listed in rc_verbs.xfail ($xwhy) but passed" ;;
            esac
        fi
        printf '%s\t%s\t%s\n' "$status" "$short" "$why"
    done <"$res" >"$tmp/res"
    cp "$tmp/res" "$res"
fi

# Results in the order gtest lists the tests.
awk -F'\t' -v tl="$tl/" 'NR == FNR { sub("^" tl, ""); order[$0] = NR; next }
     { print order[$2] "\t" $0 }' "$tmp/all" "$res" |
    sort -n -k1,1 | cut -f2- >"$tmp/res"
cp "$tmp/res" "$res"
! grep -q '^FAIL' "$res"
