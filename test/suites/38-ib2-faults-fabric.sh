# rc_ib2 under the failures of a real adapter and on fabrics of other
# shapes, both made by softverbs (SOFTVERBS_FAULTS rules; several devices
# and ports, subnet prefixes, RoCE addresses, PCI addresses):
#   - UCT (test_uct_ib2_faults): QP fatal, error completions, refused
#     posts, CQ overruns, a delayed request, refused registrations; ports
#     on two subnets, SL and traffic class at the receiver, RoCE with each
#     GID choice, the adapter's PCI function as UCX's system device;
#   - UCP (test_ucp_ib2_faults): three processes streaming under each fault;
#   - UCP (test_ucp_ib2_rails): a transfer striped over two ports, every
#     byte checked and each port's share counted;
#   - UCP (ucx_perftest pairs): a transfer striped over two ports, ports
#     on two subnet prefixes refused, the tag API on RoCE, the lane on the
#     adapter nearer to UCX_SELECT_DISTANCE_MD's device;
#   - p2p over rc_ib2 on a RoCE port, under recoverable faults, and with
#     one rank's QP failed by the device (test_p2p_faults).
# Each process uses a segment of the suite's own (removed at the end).
# UCX allocates its buffer pools as it does by default (transparent huge
# pages): softverbs holds registered pages as an adapter's pin does, so
# khugepaged's collapses do not move them (docs/softverbs.md).
for v in $(compgen -e | grep '^SOFTVERBS_\|^UCX_\|^P2P_\|^OMPI_'); do
    unset "$v"
done

fab_shm=ib2-fabric-suite-$$
fab_cleanup() { rm -rf "/dev/shm/$fab_shm" "/dev/shm/$fab_shm".* \
                       "/dev/shm/$fab_shm"-*; }
trap fab_cleanup EXIT

fab_t=$BUILD/test/gtest/uct_ib2
IB2_TEST_SHM=$fab_shm-uct ib2_gtest uct_ib2-faults-fabric \
    "$fab_t/test_uct_ib2_faults"
IB2_TEST_SHM=$fab_shm-ucp ib2_gtest ucp-ib2-faults "$fab_t/test_ucp_ib2_faults"

# ---- UCP with ucx_perftest ---------------------------------------------
fab_lib=$BUILD/src/uct_ib2/.libs/libuct_ib2.so
fab_pair=$SRC/test/gtest/softverbs/sv_pair.sh
fab_side=$SRC/test/gtest/uct_ib2/side_env.sh
# the plugin, softverbs with the devices given, rc_ib2 for UCP
fab_run() {   # fab_run TAG DEVICES VAR=VALUE...: the runner of a pair
    local tag=$1 devs=$2
    shift 2
    fab_r=("$SRC/contrib/ib2-env.sh" --lib "$fab_lib"
           "$BUILD/contrib/softverbs/softverbs-run" --shm "$fab_shm-$tag"
           --devices "$devs" env UCX_TLS=rc_ib2,ud_verbs:aux
           UCX_LOG_LEVEL=info "$@")
}

# A 16 MiB transfer over two ports: the tag protocol stripes it over a
# lane on each (UCP's rendezvous rails), or uses one with one rail.
fab_run rails mr0:ib:2
ib2_check ucp/multi-rail-two-ports bash -c '
    out=$("$@" 2>&1); rc=$?
    echo "$out"
    [ $rc -eq 0 ] &&
    echo "$out" | grep "ep_cfg\[" | grep "tag(" | grep "rc_ib2/mr0:1" |
        grep -q "rc_ib2/mr0:2"' _ "$fab_pair" --expect '^Final:' \
    "${fab_r[@]}" -- ucx_perftest -p @PORT@ -t tag_bw -s 16777216 -n 50 -w 5
ib2_check ucp/multi-rail-one-rail bash -c '
    out=$("$@" 2>&1); rc=$?
    echo "$out"
    [ $rc -eq 0 ] &&
    echo "$out" | grep "ep_cfg\[" | grep -q "tag(rc_ib2/mr0:[12])"' _ \
    "$fab_pair" --expect '^Final:' "${fab_r[@]}" UCX_MAX_RNDV_RAILS=1 -- \
    ucx_perftest -p @PORT@ -t tag_bw -s 16777216 -n 50 -w 5

# perftest checks no payload: the same striping in one process, with every
# byte of each message checked and softverbs' port counters showing that
# each port carried its share; limited to either port, that port alone
# carries the messages, intact (test_ucp_rails.cc).
ib2_gtest ucp/multi-rail-data "$BUILD/contrib/softverbs/softverbs-run" \
    --shm "$fab_shm-railsdata" --devices mr0:ib:2 \
    env UCX_TLS=rc_ib2,ud_verbs:aux IB2_RAILS_DEVICE=mr0 \
    "$fab_t/test_ucp_ib2_rails" --gtest_color=no

# Server and client on ports of two subnet prefixes: UCP finds no
# transport and says so; the same ports on one prefix connect.
fab_run subnets sn0:ib:2/p2.subnet=fe80:0:0:2
ib2_check ucp/subnets-refused bash -c '
    out=$(SV_PAIR_TIMEOUT=30 "$@" 2>&1); rc=$?
    echo "$out"
    [ $rc -ne 0 ] &&
    echo "$out" | grep -q "no active messages transport to .*rc_ib2/sn0:1 - Destination is unreachable"' \
    _ "$fab_pair" "${fab_r[@]}" "$fab_side" UCX_NET_DEVICES=sn0:2 \
    UCX_NET_DEVICES=sn0:1 -- ucx_perftest -p @PORT@ -t tag_lat -n 1000
fab_run onesubnet sn0:ib:2
ib2_check ucp/subnets-same-prefix-connects "$fab_pair" --expect '^Final:' \
    "${fab_r[@]}" "$fab_side" UCX_NET_DEVICES=sn0:2 UCX_NET_DEVICES=sn0:1 \
    -- ucx_perftest -p @PORT@ -t tag_lat -n 1000

# The tag API on a RoCE port, eager and rendezvous, with each GID choice.
fab_roce=roce0:eth:1/p1.ip=10.1.0.1+fd00::1
for g in auto UCX_IB2_GID_INDEX=1 UCX_IB2_GID_ADDR=fd00::1 \
         UCX_IB2_GID_ADDR=10.1.0.1; do
    [ "$g" = auto ] && g=UCX_IB2_GID_INDEX=auto
    for t in "-t tag_lat -n 5000" "-t tag_bw -s 1048576 -n 200"; do
        fab_run roce "$fab_roce" "$g"
        ib2_check "ucp/roce-${g#UCX_IB2_}${t// /_}" bash -c '
            out=$("$@" 2>&1); rc=$?
            echo "$out"
            [ $rc -eq 0 ] &&
            echo "$out" | grep -q "ep_cfg\[.*tag(rc_ib2/roce0:1)"' _ \
            "$fab_pair" --expect '^Final:' "${fab_r[@]}" -- \
            ucx_perftest -p @PORT@ $t
    done
done

# UCP weighs each device by its distance from UCX_SELECT_DISTANCE_MD's
# device, which rc_ib2 places by its PCI address: the lane is on the
# adapter that shares a PCI bus with it, far0 (listed first, so it would
# win a tie) when the reference is on its bus, near0 when on near0's. Each
# side has a reference of its own, on a subnet the other cannot reach.
# That holds by UCX's own figures only where a path across PCI roots is
# the slower one: UCX 1.13 (ucs_topo_sys_root_distance) gives it 220
# MB/s, but 5100 MB/s on CPUs it takes for AMD Rome or Milan (family
# 0x17 model 0x31; family 0x19 with base model 0 or 1, e.g. EPYC 9004),
# above the at most 3500 MB/s of a path within one root, so there the
# farther device may win the bandwidth lanes.
fab_cross_root_fast=0
if awk -F': *' '/^vendor_id/ { v = $2 } /^cpu family/ { f = $2 + 0 }
        /^model[ \t]*:/ { m = $2 + 0 }
        /^$/ { exit }
        END { exit !(v == "AuthenticAMD" &&
                     ((f == 23 && m == 49) || (f == 25 && m % 16 <= 1))) }' \
        /proc/cpuinfo; then
    fab_cross_root_fast=1
fi
for ref in 3b:near0 86:far0; do
    bus=${ref%%:*}
    if [ $fab_cross_root_fast = 1 ]; then
        ib2_result SKIP "ucp/nearer-device-bus-$bus (UCX 1.13 rates a path across PCI roots above one within a root on AMD Rome/Milan CPUs, which this one counts as: the nearer device need not win)"
        continue
    fi
    devs=far0:ib:1/pci=0000:86:00.0,near0:ib:1/pci=0000:3b:00.0
    devs+=,ref0:ib:1/pci=0000:$bus:01.0/p1.subnet=fe80:0:0:9
    devs+=,ref1:ib:1/pci=0000:$bus:02.0/p1.subnet=fe80:0:0:a
    fab_run near "$devs" UCX_MAX_RNDV_RAILS=1
    ib2_check "ucp/nearer-device-bus-$bus" bash -c '
        want=$1; shift
        out=$("$@" 2>&1); rc=$?
        echo "$out"
        [ $rc -eq 0 ] &&
        [ "$(echo "$out" | grep -c "ep_cfg\[.*tag(rc_ib2/$want:1)")" -eq 2 ]' \
        _ "${ref#*:}" "$fab_pair" --expect '^Final:' "${fab_r[@]}" \
        "$fab_side" \
        "UCX_NET_DEVICES=far0:1,near0:1,ref0:1 UCX_SELECT_DISTANCE_MD=ref0" \
        "UCX_NET_DEVICES=far0:1,near0:1,ref1:1 UCX_SELECT_DISTANCE_MD=ref1" \
        -- ucx_perftest -p @PORT@ -t tag_bw -s 1048576 -n 100
done

# ---- p2p over rc_ib2: RoCE, and recoverable faults ---------------------
if [ -z "${IB2_PREFIX:-}" ]; then
    fab_p2p=$BUILD/test/gtest/p2p/test_p2p
    fab_mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
    export P2P_UCT_IB2=$fab_lib UCX_TLS=rc_ib2,ud_verbs:aux
    export P2PTEST_WAIT_LIMIT=120
    fab_sv=("$BUILD/contrib/softverbs/softverbs-run" --devices "$fab_roce")

    # the whole suite on a RoCE port (the GID of its IPv4 address), then
    # the protocols with the link-local GID and an IPv6 address
    ib2_gtest p2p-rc_ib2-roce "${fab_sv[@]}" --shm "$fab_shm-p2p" \
        "${fab_mpi[@]}" -np 2 "$fab_p2p" --gtest_color=no \
        --gtest_filter=-P2P.UnexpectedQueueBound
    for g in UCX_IB2_GID_INDEX=1 UCX_IB2_GID_ADDR=fd00::1; do
        export "${g?}"
        ib2_gtest "p2p-rc_ib2-roce-${g#UCX_IB2_}" "${fab_sv[@]}" \
            --shm "$fab_shm-p2p" "${fab_mpi[@]}" -x "${g%%=*}" -np 2 \
            "$fab_p2p" --gtest_color=no \
            --gtest_filter='P2P.SendRecvAcrossProtocols:P2P.OrderingStress'
        unset "${g%%=*}"
    done

    # Faults the transport recovers from, in both ranks (rules aimed at
    # what only rc_ib2 does: UCX's ud_verbs aborts on a refused post):
    # RDMA reads held back now and then, SRQ refills refused now and then
    # (after the first fill of 1024 buffers: an interface that cannot fill
    # its shared queues when it opens is refused, with a message). Every
    # test passes, every byte checked; softverbs' trace shows the faults
    # were injected.
    SOFTVERBS_FAULTS="seed=11;delay/op=read/prob=0.05/time=2ms"
    SOFTVERBS_FAULTS+=";post_srq_recv/after=1024/prob=0.1"
    export SOFTVERBS_FAULTS
    export SOFTVERBS_DEBUG=1
    ib2_gtest p2p-rc_ib2-recoverable-faults \
        "$BUILD/contrib/softverbs/softverbs-run" --shm "$fab_shm-p2pf" \
        "${fab_mpi[@]}" -x SOFTVERBS_FAULTS -x SOFTVERBS_DEBUG -np 2 \
        "$fab_p2p" --gtest_color=no \
        --gtest_filter='P2P.SendRecvAcrossProtocols:P2P.OrderingStress:P2P.ThousandsOutstanding:P2P.LargeMessage64MiB'
    unset SOFTVERBS_FAULTS SOFTVERBS_DEBUG

    # Registrations refused with ENOMEM under rank 0's leave-pinned cache
    # (once: evicted and registered again; for good: copied, and p2p says
    # what to raise); then a fatal fault, one per job: rank 1's QP fails
    # under an RDMA READ, its rc_ib2 send CQ overruns, that READ completes
    # with REM_ACCESS_ERR, RETRY_EXC_ERR or LOC_PROT_ERR, its next sends
    # complete with RNR_RETRY_EXC_ERR, or its next posts are refused; its
    # requests and rank 0's with it end with P2P_ERR_PEER_FAILED within
    # seconds, a third rank's exchange with rank 0 is untouched, all
    # finalize.
    for np in 2 3; do
        for t in QpFatal CqOverrun ErrorCompletion RetryExc RnrRetryExc \
                 LocProt RefusedPost; do
            ib2_gtest "p2p-rc_ib2-faults-$t-${np}ranks" \
                "$BUILD/contrib/softverbs/softverbs-run" \
                --shm "$fab_shm-p2pq" "${fab_mpi[@]}" -np $np \
                "$BUILD/test/gtest/p2p/test_p2p_faults" --gtest_color=no \
                --gtest_filter="P2PFaults.Registration*:P2PFaults.$t*"
        done
    done
    ib2_check p2p-rc_ib2-recoverable-faults-injected bash -c '
        log=$1
        reads=$(grep -c "injected fault (rule 1): request .*: delay" "$log")
        srq=$(grep -c "injected fault (rule 2): post_srq_recv on .* ENOMEM" "$log")
        echo "delayed reads: $reads, refused SRQ posts: $srq"
        [ "$reads" -gt 0 ] && [ "$srq" -gt 0 ]' _ \
        "$LOGDIR/${IB2_PREFIX:-}p2p-rc_ib2-recoverable-faults.log"
    unset P2P_UCT_IB2 UCX_TLS P2PTEST_WAIT_LIMIT
fi
