# rc_ib2, the ib2 UCT transport, inside the system's UCX on the softverbs
# device: UCX lists it, its configuration is documented, every ucx_perftest
# test runs over it with each receive-queue mode, UCP selects it, bad
# settings are refused with a clear message, and the ABI it was built
# against is the installed one. (Its UCT-level gtests are in 35-*.)
for v in $(compgen -e | grep '^SOFTVERBS_\|^UCX_'); do unset "$v"; done

IB2_LIB=$BUILD/src/uct_ib2/.libs/libuct_ib2.so
IB2_ENV=$SRC/contrib/ib2-env.sh
SV_RUN=$BUILD/contrib/softverbs/softverbs-run
SV_PAIR=$SRC/test/gtest/softverbs/sv_pair.sh
IB2_SHM=ib2-suite-$$
ib2_port=$((20000 + ($$ + 7777) % 20000))
ib2_next_port() { ib2_port=$((ib2_port + 1)); }
ib2_cleanup() { rm -rf "/dev/shm/$IB2_SHM" "/dev/shm/$IB2_SHM".* \
                       "/dev/shm/$IB2_SHM"-*; }
trap ib2_cleanup EXIT
# The plugin preloaded by its env script, on the software device.
IB2R=("$IB2_ENV" --lib "$IB2_LIB" "$SV_RUN" --shm "$IB2_SHM")

ib2_check uct_ib2/abi-matches-installed-ucx \
    "$BUILD/src/uct_ib2/ib2_abi_check"

ib2_check uct_ib2/no-device-no-resources bash -c '
    # Without any RDMA device the component offers nothing and UCX tools
    # carry on with their other transports.
    out=$("$@" ucx_info -d) || { echo "ucx_info failed"; exit 1; }
    echo "$out" | grep -q "Transport: tcp" || exit 1
    ! echo "$out" | grep -q "rc_ib2"' sh "$IB2_ENV" --lib "$IB2_LIB"

ib2_check uct_ib2/ucx_info-lists-rc_ib2 bash -c '
    out=$("$@" ucx_info -d) || exit 1
    echo "$out"
    echo "$out" | grep -B1 -A6 "Component: ib2" | grep -q "Transport: rc_ib2" &&
    echo "$out" | grep -A1 "Transport: rc_ib2" | grep -q "Device: softverbs0:1" &&
    echo "$out" | grep -A40 "Transport: rc_ib2" | grep -q "error handling: peer failure"' \
    sh "${IB2R[@]}"

ib2_check uct_ib2/config-documented bash -c '
    # Every UCX_IB2_* variable appears with a description above it.
    out=$("$@" ucx_info -c -f) || exit 1
    vars=$(echo "$out" | grep -c "^UCX_IB2_")
    [ "$vars" -ge 20 ] || { echo "only $vars UCX_IB2_ variables"; exit 1; }
    echo "$out" | awk "/^UCX_IB2_/ { if (prev !~ /^#/) { print \"undocumented: \" \$0; bad=1 } }
                      { if (\$0 != \"\") prev = \$0 } END { exit bad }"' \
    sh "$IB2_ENV" --lib "$IB2_LIB"

# UCT: every operation class under ucx_perftest, with the default queues
# (P for small messages, S above) and with each mode alone.
for rq in "auto" "P,128,256,192,128:P,8256,64,32,16" \
          "S,256,1024,512,64:S,8256,512,256,32" \
          "P,64,32,16,8:S,1024,256,128,16:S,8256,256,128,16" \
          "X,256,1024,512,64:X,8256,512,256,32"; do
    tag=${rq//,/.}
    tag=${tag//:/_}
    for t in "-t am_lat" "-t put_lat" "-t get -D zcopy -s 65536" \
             "-t get -D bcopy -s 4096" "-t am_bw" \
             "-t am_bw -D bcopy -s 4000" "-t am_bw -D zcopy -s 8000" \
             "-t put_bw -D zcopy -s 1048576 -n 2000" "-t put_bw -D bcopy" \
             "-t fadd" "-t cswap" "-t add_lat"; do
        # the small-queue modes only need the message-size tests; X
        # queues carry RDMA and atomics on their own QP type: all
        if [ "$rq" != auto ] && [[ "$rq" != X* ]] && [[ "$t" != *am_* ]]; then
            continue
        fi
        ib2_next_port
        ib2_check "uct_ib2/ucx_perftest-rq-$tag${t// /_}" "$SV_PAIR" \
            --expect '^Final:' "${IB2R[@]}" env UCX_IB2_RECEIVE_QUEUES="$rq" \
            -- ucx_perftest -x rc_ib2 -d softverbs0:1 -n 20000 -w 1000 \
            -p $ib2_port $t
    done
done

# UCP over rc_ib2, with ud_verbs only to exchange the connection addresses;
# the log must show the tag lane on rc_ib2.
for t in "-t tag_lat" "-t tag_bw -s 8" "-t tag_bw -s 1048576 -n 2000" \
         "-t tag_lat -E sleep -n 2000" "-t tag_lat -e"; do
    ib2_next_port
    ib2_check "uct_ib2/ucp${t// /_}" "$SV_PAIR" --expect '^Final:' \
        "${IB2R[@]}" env UCX_TLS=rc_ib2,ud_verbs:aux UCX_LOG_LEVEL=info -- \
        ucx_perftest -n 20000 -w 1000 -p $ib2_port $t
    ib2_check "uct_ib2/ucp${t// /_}-uses-rc_ib2" bash -c \
        'grep -q "ep_cfg\[.*tag(rc_ib2/softverbs0:1" \
            "$0"/uct_ib2_ucp"${1// /_}".log' "$LOGDIR" "$t"
done

# UCP over X queues: UCP's wire-up connects the endpoints, and rc_ib2
# asks for their TGT QPs over UD from progress; with -E sleep the process
# sleeps in the event fd and must still answer and resend the requests.
for t in "-t tag_lat -n 2000" "-t tag_lat -E sleep -n 2000"; do
    ib2_next_port
    ib2_check "uct_ib2/ucp-X${t// /_}" "$SV_PAIR" --expect '^Final:' \
        "${IB2R[@]}" env UCX_TLS=rc_ib2,ud_verbs:aux \
        UCX_IB2_RECEIVE_QUEUES=X,256,1024,512,64:X,8256,512,256,32 \
        UCX_LOG_LEVEL=info -- ucx_perftest -n 20000 -w 1000 -p $ib2_port $t
    ib2_check "uct_ib2/ucp-X${t// /_}-uses-rc_ib2" bash -c \
        'grep -q "ep_cfg\[.*tag(rc_ib2/softverbs0:1" \
            "$0"/uct_ib2_ucp-X"${1// /_}".log' "$LOGDIR" "$t"
done

# Bad settings: the interface is not opened, with an error that names the
# problem; no crash, no hang.
ib2_bad() {   # ib2_bad NAME EXPECTED-MESSAGE-REGEX VAR=VALUE...
    local name=$1 re=$2
    shift 2
    ib2_check "uct_ib2/refuses-$name" bash -c '
        re=$1; shift
        out=$(timeout 60 "$@" ucx_info -d 2>&1)
        rc=$?
        echo "$out"
        [ $rc -lt 124 ] && echo "$out" | grep -qE "$re" &&
            ! echo "$out" | grep -A12 "Transport: rc_ib2" |
              grep -q "am_short"' \
        sh "$re" "${IB2R[@]}" env "$@"
}
ib2_bad not-a-number 'queue 1 "P,12x,256": size "12x" is not a non-negative number' \
    UCX_IB2_RECEIVE_QUEUES=P,12x,256
ib2_bad descending 'queue 2 .*must be larger than the size 8192' \
    UCX_IB2_RECEIVE_QUEUES=P,8192,64:S,1024,256
ib2_bad watermark 'low watermark 300 must be less than the number of buffers 256' \
    UCX_IB2_RECEIVE_QUEUES=S,1024,256,300
ib2_bad xrc-mixed 'queue 2 is an X \(XRC\) queue but queue 1 is not: either every queue is X or none is' \
    UCX_IB2_RECEIVE_QUEUES=P,128,256:X,4096,256
ib2_bad service-level 'UCX_IB2_SL=16: service levels are 0 to 15' UCX_IB2_SL=16
ib2_bad device-params-missing 'cannot read device parameter file /nonexistent' \
    UCX_IB2_DEVICE_PARAMS=/nonexistent/params.ini

# The device parameter file: an adapter that presents itself as a
# ConnectX-6 gets that section's receive queues (largest 65536 bytes, so
# am_bcopy up to 65532), unless the variable says otherwise.
ib2_check uct_ib2/device-params-applied bash -c '
    out=$(SOFTVERBS_VENDOR_ID=0x02c9 SOFTVERBS_VENDOR_PART_ID=4123 \
          UCX_IB2_DEVICE_PARAMS="$0" "$@" ucx_info -d) || exit 1
    echo "$out" | grep -A30 "Transport: rc_ib2" | grep -q "am_bcopy: <= 65532" ||
        { echo "ConnectX-6 queues not applied"; exit 1; }
    out=$(SOFTVERBS_VENDOR_ID=0x02c9 SOFTVERBS_VENDOR_PART_ID=4123 \
          UCX_IB2_DEVICE_PARAMS="$0" UCX_IB2_RECEIVE_QUEUES=P,128,64:S,4096,256 \
          "$@" ucx_info -d) || exit 1
    echo "$out" | grep -A30 "Transport: rc_ib2" | grep -q "am_bcopy: <= 4092"' \
    "$SRC/src/uct_ib2/ib2-device-params.ini" "$IB2_ENV" --lib "$IB2_LIB" \
    "$SV_RUN" --shm "$IB2_SHM-cx6"
