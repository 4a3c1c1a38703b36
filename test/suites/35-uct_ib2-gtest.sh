# rc_ib2 at the UCT level (googletest): the receive queue and device
# parameter file parsers alone, then the transport through the public UCT
# API on softverbs: every operation at its thresholds in each receive-queue
# mode, ordering, flush, fence, credits and pending, configuration errors,
# the device parameter file, two processes and dead peers; then the
# regression tests of issue 8 (their own binary). The binaries link
# libsoftverbs and the plugin themselves; their segments are named here so
# that they are removed even after a crash.
for v in $(compgen -e | grep '^SOFTVERBS_\|^UCX_'); do unset "$v"; done

# A failed parameterized case prints "[  FAILED  ] Name/Case, where
# GetParam() = ... (N ms)", which ib2_gtest does not see: count it here.
ib2t_param_failures() {   # ib2t_param_failures NAME
    sed -n 's|^\[  FAILED  \] \([^ ,]*\), where GetParam() = .* ([0-9]* ms)$|\1|p' \
        "$LOGDIR/${IB2_PREFIX:-}$1.log" |
    while read -r t; do
        ib2_result FAIL "$1/$t"
    done
}

ib2_gtest uct_ib2-unit "$BUILD/test/gtest/uct_ib2/test_uct_ib2_unit"
ib2t_param_failures uct_ib2-unit

ib2t_shm=ib2-gtest-suite-$$
ib2t_cleanup() { rm -rf "/dev/shm/$ib2t_shm" "/dev/shm/$ib2t_shm".* \
                        "/dev/shm/$ib2t_shm"-*; }
trap ib2t_cleanup EXIT
IB2_TEST_SHM=$ib2t_shm ib2_gtest uct_ib2-uct \
    "$BUILD/test/gtest/uct_ib2/test_uct_ib2" --gtest_filter=-XrcNodes.*
ib2t_param_failures uct_ib2-uct
# X queues across two nodes (two devices of one segment): a process on the
# remote node is killed, its neighbour's endpoint still delivers.
IB2_TEST_DEVICES=softverbs0:ib:1,softverbs1:ib:1 IB2_TEST_SHM=$ib2t_shm-n \
    ib2_gtest uct_ib2-xrc-nodes "$BUILD/test/gtest/uct_ib2/test_uct_ib2" \
    --gtest_filter=XrcNodes.*

# The regression tests of issue 8 (flow control, limits and error paths,
# wire input from a plain verbs peer): one process per test suite, so that
# a test that hangs inside the transport (the binary's watchdog then ends
# the process) or crashes it costs only the results of its own suite.
ib2t_regress=$BUILD/test/gtest/uct_ib2/test_uct_ib2_regress
if [ -x "$ib2t_regress" ]; then
    ib2t_i=0
    for ib2t_s in $("$ib2t_regress" --gtest_list_tests |
                    sed -n 's/^\([^ ].*\)\.$/\1/p'); do
        ib2t_i=$((ib2t_i + 1))
        ib2t_n=uct_ib2-regress-${ib2t_s//\//_}
        IB2_TEST_SHM=$ib2t_shm-r$ib2t_i ib2_gtest "$ib2t_n" "$ib2t_regress" \
            --gtest_filter="$ib2t_s.*"
        ib2t_param_failures "$ib2t_n"
    done
else
    ib2_gtest uct_ib2-regress "$ib2t_regress"
fi
