# rc_ib2 at the UCT level (googletest): the receive queue and device
# parameter file parsers alone, then the transport through the public UCT
# API on softverbs: every operation at its thresholds in each receive-queue
# mode, ordering, flush, fence, credits and pending, configuration errors,
# the device parameter file, two processes and dead peers. The binary links
# libsoftverbs and the plugin itself; its segment is named here so that it
# is removed even after a crash.
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
    "$BUILD/test/gtest/uct_ib2/test_uct_ib2"
ib2t_param_failures uct_ib2-uct
