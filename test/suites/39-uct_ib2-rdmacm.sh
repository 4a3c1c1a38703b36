# rc_ib2 connected through rdmacm (docs/uct_ib2.md, "Connection
# management"): on a softverbs iWARP device and on a RoCE device with
# UCX_IB2_CM=rdmacm, every ucx_perftest UCT test that applies (no atomics
# on iWARP), UCP over it (tag_lat and tag_bw with -e; ud_verbs on the RoCE
# device helps UCP wire up, since UCX 1.13 has no auxiliary transport on
# an iWARP port alone), UCP's client/server connection over tcp's
# connection manager (what an iWARP-only host uses), the connection
# manager's googletests (data, held requests, timeouts, gone and killed
# peers, 64 endpoints at once, settings), p2p with 2 and 3 ranks, and
# the refusal of X (XRC) queues over rdmacm.
for v in $(compgen -e | grep '^SOFTVERBS_\|^UCX_\|^P2P_'); do unset "$v"; done

IB2_LIB=$BUILD/src/uct_ib2/.libs/libuct_ib2.so
IB2_ENV=$SRC/contrib/ib2-env.sh
SV_RUN=$BUILD/contrib/softverbs/softverbs-run
SV_PAIR=$SRC/test/gtest/softverbs/sv_pair.sh
cm_shm=ib2-cm-suite-$$
cm_cleanup() { rm -rf "/dev/shm/$cm_shm" "/dev/shm/$cm_shm".* \
                      "/dev/shm/$cm_shm"-*; }
trap cm_cleanup EXIT
export SOFTVERBS_DEVICES=iw0:iwarp:1,roce0:eth:1
CMR=("$IB2_ENV" --lib "$IB2_LIB" "$SV_RUN" --shm "$cm_shm")

IB2_TEST_SHM=$cm_shm-gt ib2_gtest uct_ib2-rdmacm \
    "$BUILD/test/gtest/uct_ib2/test_uct_ib2_cm"

# A failed parameterized case prints "[  FAILED  ] Name/Case, where
# GetParam() = ... (N ms)", which ib2_gtest does not see: count it here.
cm_param_failures() {   # cm_param_failures NAME
    sed -n 's|^\[  FAILED  \] \([^ ,]*\), where GetParam() = .* ([0-9]* ms)$|\1|p' \
        "$LOGDIR/${IB2_PREFIX:-}$1.log" |
    while read -r t; do
        ib2_result FAIL "$1/$t"
    done
}

# The UCT-level tests of suite 35 that apply, with the device softverbs0
# of type iWARP, and of type RoCE through rdmacm (connect_pair waits for
# the connection). DeadPeer.KilledWithSendsHeldBack's peer never
# progresses after connect_to_ep (pause()): its worker's async thread
# makes its side of the connection. Left out: X (XRC) queues (the XOnly
# and TinyXrq modes and the Xrc tests), which rdmacm cannot connect
# (x-queues-refused checks that); and on iWARP the atomics (none there:
# the atomic cases, the two-process data test, which ends with atomics,
# and Iface.QueryDefaults, which expects them).
cm_uct=$BUILD/test/gtest/uct_ib2/test_uct_ib2
cm_nox='Xrc*:*/Xrc*:*XOnly*:*TinyXrq*'
IB2_TEST_DEVICES=softverbs0:iwarp:1 IB2_TEST_SHM=$cm_shm-uct-iw \
    ib2_gtest uct_ib2-rdmacm/uct-iwarp "$cm_uct" --gtest_color=no \
    --gtest_filter="-*Atomic*:Iface.QueryDefaults:Rq/TwoProcTest.*:$cm_nox"
cm_param_failures uct_ib2-rdmacm/uct-iwarp
IB2_TEST_DEVICES=softverbs0:eth:1 IB2_TEST_CM=rdmacm \
    IB2_TEST_SHM=$cm_shm-uct-roce ib2_gtest uct_ib2-rdmacm/uct-roce \
    "$cm_uct" --gtest_color=no --gtest_filter="-$cm_nox"
cm_param_failures uct_ib2-rdmacm/uct-roce

# The interfaces say how they connect: rdmacm's 32-byte endpoint address
# on iWARP and on RoCE when asked, verbs' 28 bytes on RoCE by default.
ib2_check uct_ib2-rdmacm/ucx_info-ep-address bash -c '
    addrs() {   # "DEVICE BYTES" of each rc_ib2 transport device
        awk "/Transport: / { t = (\$3 == \"rc_ib2\") }
             t && /Device:/ { d = \$3 }
             t && /ep address:/ { print d, \$4 }"
    }
    out=$("$@" ucx_info -d | addrs) || exit 1
    echo "$out"
    echo "$out" | grep -qx "iw0:1 32" && echo "$out" | grep -qx "roce0:1 28" &&
    out=$(UCX_IB2_CM=rdmacm "$@" ucx_info -d | addrs) &&
    echo "$out" && echo "$out" | grep -qx "roce0:1 32"' \
    sh "${CMR[@]}"

# X (XRC) queues need XRC and the verbs exchange: on iWARP (no XRC) and
# over rdmacm (RoCE when asked) the interface is refused with the reason;
# RoCE connected by verbs keeps them (its X endpoint address: 19 + 3 x 2
# bytes).
ib2_check uct_ib2-rdmacm/x-queues-refused bash -c '
    export UCX_IB2_RECEIVE_QUEUES=X,256,1024,512,64:X,8256,512,256,32
    addrs() {   # "DEVICE BYTES" of each rc_ib2 interface that opened
        awk "/Transport: / { t = (\$3 == \"rc_ib2\") }
             t && /Device:/ { d = \$3 }
             t && /ep address:/ { print d, \$4 }"
    }
    iw="iw0: the device has no XRC, which X receive queues need: use S"
    iw="$iw (shared) queues instead (UCX_IB2_RECEIVE_QUEUES)"
    ro="roce0:1: X (XRC) receive queues cannot be used with rdmacm"
    ro="$ro connections (UCX_IB2_CM=rdmacm): give P or S queues in"
    ro="$ro UCX_IB2_RECEIVE_QUEUES, or UCX_IB2_CM=verbs"
    out=$("$@" ucx_info -d 2>&1) || exit 1
    echo "$out"
    echo "$out" | grep -qF "$iw" &&
    [ "$(echo "$out" | addrs)" = "roce0:1 25" ] &&
    out=$(UCX_IB2_CM=rdmacm "$@" ucx_info -d 2>&1) &&
    echo "$out" && echo "$out" | grep -qF "$iw" &&
    echo "$out" | grep -qF "$ro" && [ -z "$(echo "$out" | addrs)" ]' \
    sh "${CMR[@]}"

for fab in "iwarp=iw0:1" "roce=roce0:1"; do
    name=${fab%%=*}
    dev=${fab#*=}
    tests=("-t am_lat" "-t put_lat" "-t get -D zcopy -s 65536"
           "-t get -D bcopy -s 4096" "-t am_bw" "-t am_bw -D bcopy -s 4000"
           "-t am_bw -D zcopy -s 8000" "-t put_bw -D zcopy -s 1048576 -n 2000"
           "-t put_bw -D bcopy")
    [ "$name" = roce ] && tests+=("-t fadd" "-t cswap")
    for t in "${tests[@]}"; do
        ib2_check "uct_ib2-rdmacm/$name/ucx_perftest${t// /_}" "$SV_PAIR" \
            --expect '^Final:' "${CMR[@]}" env UCX_IB2_CM=rdmacm -- \
            ucx_perftest -x rc_ib2 -d "$dev" -n 10000 -w 500 -p @PORT@ $t
    done
    # UCP: the tag lane on rc_ib2 of this device (ud_verbs on RoCE only
    # carries the wire-up)
    for t in "-t tag_lat -e" "-t tag_bw -s 8 -e" \
             "-t tag_bw -s 1048576 -n 1000 -e"; do
        tn=${t// /_}
        ib2_check "uct_ib2-rdmacm/$name/ucp$tn" "$SV_PAIR" --expect '^Final:' \
            "${CMR[@]}" env UCX_TLS=rc_ib2,ud_verbs:aux UCX_IB2_CM=rdmacm \
            UCX_NET_DEVICES="$dev,roce0:1" UCX_LOG_LEVEL=info -- \
            ucx_perftest -n 10000 -w 500 -p @PORT@ $t
        ib2_check "uct_ib2-rdmacm/$name/ucp$tn-uses-rc_ib2" grep -q \
            "ep_cfg\[.*tag(rc_ib2/$dev" \
            "$LOGDIR/${IB2_PREFIX:-}uct_ib2-rdmacm_${name}_ucp$tn.log"
    done
done

# An iWARP-only host: UCP's client/server connection over tcp's connection
# manager wires up the rc_ib2 lanes (UCX's example, unmodified).
cm_cs=$BUILD/test/gtest/uct_ib2/ucp_client_server
ib2_check uct_ib2-rdmacm/build-ucp_client_server \
    cc -O1 -o "$cm_cs" -I/usr/share/doc/libucx-dev/examples \
    /usr/share/doc/libucx-dev/examples/ucp_client_server.c -lucp -lucs
ib2_check uct_ib2-rdmacm/iwarp/ucp_client_server-tcp-cm bash -c '
    cs=$1; shift
    port=$((20000 + RANDOM % 20000))
    export UCX_TLS=rc_ib2,tcp UCX_SOCKADDR_TLS_PRIORITY=tcp
    export UCX_NET_DEVICES=iw0:1,lo UCX_LOG_LEVEL=info
    timeout 60 "$@" "$cs" -l 127.0.0.1 -p $port -c tag -i 10 >"$0.srv" 2>&1 &
    srv=$!
    for i in $(seq 100); do
        grep -q "Waiting for connection" "$0.srv" && break
        sleep 0.1
    done
    timeout 60 "$@" "$cs" -a 127.0.0.1 -p $port -c tag -i 10 >"$0.cli" 2>&1
    rc=$?
    kill $srv 2>/dev/null; wait $srv
    cat "$0.cli"
    [ $rc = 0 ] && grep -q "iteration #10" "$0.cli" &&
        grep -q "ep_cfg\[.*tag(rc_ib2/iw0:1" "$0.cli"' \
    "$LOGDIR/uct_ib2-rdmacm-cs" "$cm_cs" "${CMR[@]}"

# p2p over rc_ib2 connected through rdmacm, on iWARP (ud_verbs on RoCE
# carries UCP's wire-up) and on RoCE: the whole p2p test with 2 ranks
# (the shared-memory cases skip themselves; 20,000 communicators, not a
# million: on iWARP the million took 785 s in one run beside a build,
# on RoCE 22 s; docs/uct_ib2.md),
# the wildcard and ordering cases with 3, and a killed peer.
p2pt=$BUILD/test/gtest/p2p
p2p_mpirun=$(command -v mpirun)
p2p_mpi=(--allow-run-as-root --oversubscribe --bind-to none)
export P2PTEST_WAIT_LIMIT=120 P2P_UCT_IB2=$IB2_LIB P2PTEST_COMM_LOOPS=20000
export UCX_TLS=rc_ib2,ud_verbs:aux UCX_IB2_CM=rdmacm
cm_sv=("$SV_RUN" --shm "$cm_shm-p2p")
for fab in "iwarp=iw0:1,roce0:1" "roce=roce0:1"; do
    export UCX_NET_DEVICES=${fab#*=}
    ib2_gtest "uct_ib2-rdmacm/p2p-2ranks-${fab%%=*}" "${cm_sv[@]}" \
        "$p2p_mpirun" "${p2p_mpi[@]}" -x P2PTEST_COMM_LOOPS -np 2 \
        "$p2pt/test_p2p" --gtest_color=no
    ib2_gtest "uct_ib2-rdmacm/p2p-3ranks-${fab%%=*}" "${cm_sv[@]}" \
        "$p2p_mpirun" "${p2p_mpi[@]}" -np 3 "$p2pt/test_p2p" \
        --gtest_color=no \
        --gtest_filter='P2P.OrderingStress:P2P.WildcardsKeepPerSourceOrder'
done
export UCX_NET_DEVICES=iw0:1,roce0:1
ib2_gtest uct_ib2-rdmacm/p2p-killed "${cm_sv[@]}" "$p2p_mpirun" \
    "${p2p_mpi[@]}" --enable-recovery -np 2 "$p2pt/test_p2p_killed" \
    --gtest_color=no --gtest_filter='P2PKilled.Survivor*'
ib2_check uct_ib2-rdmacm/p2p-lanes-on-iwarp bash -c '
    out=$(UCX_LOG_LEVEL=info "$@" 2>&1) || { echo "$out"; exit 1; }
    echo "$out" | grep "ep_cfg"
    echo "$out" | grep -q "ep_cfg\[.*am(rc_ib2/iw0:1"' _ \
    "${cm_sv[@]}" "$p2p_mpirun" "${p2p_mpi[@]}" -x UCX_LOG_LEVEL \
    -np 2 "$p2pt/test_p2p" --gtest_color=no \
    --gtest_filter=P2P.SendRecvAcrossProtocols
unset UCX_TLS UCX_IB2_CM UCX_NET_DEVICES P2P_UCT_IB2 P2PTEST_COMM_LOOPS
