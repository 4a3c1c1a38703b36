# softverbs, the software RDMA device: its own tests, then unmodified
# programs on it (ibverbs-utils, and UCX 1.13's rc_verbs and ud_verbs under
# ucx_perftest, UCT and UCP). The sanitizer pass runs the gtests only:
# uninstrumented tools cannot preload an instrumented library.
# sanitizer: yes
# the checks expect the default device configuration
for v in $(compgen -e | grep '^SOFTVERBS_'); do unset "$v"; done
ib2_gtest softverbs "$BUILD/test/gtest/softverbs/test_softverbs"

if [ -z "${IB2_PREFIX:-}" ]; then
    SV_RUN=$BUILD/contrib/softverbs/softverbs-run
    SV_PAIR=$SRC/test/gtest/softverbs/sv_pair.sh
    # a segment of this run only; removed at the end. Ports: sv_pair.sh
    # picks a free one for @PORT@.
    SV_SHM=softverbs-suite-$$
    sv_cleanup() { rm -rf "/dev/shm/$SV_SHM" "/dev/shm/$SV_SHM".* \
                          "/dev/shm/$SV_SHM"-*; }
    trap sv_cleanup EXIT
    SVR=("$SV_RUN" --shm "$SV_SHM")

    ib2_check softverbs/ibv_devinfo bash -c '
        out=$("$@" ibv_devinfo -v) || exit 1
        echo "$out"
        echo "$out" | grep -q "hca_id:[[:space:]]*softverbs0" &&
        echo "$out" | grep -q "state:[[:space:]]*PORT_ACTIVE" &&
        echo "$out" | grep -q "GID\[  0\]:[[:space:]]*fe80:" &&
        echo "$out" | grep -q "atomic_cap:[[:space:]]*ATOMIC_HCA"' \
        sv "${SVR[@]}"

    # -c validates the received data where the tool offers it
    for t in "ibv_rc_pingpong -c -n 2000" "ibv_rc_pingpong -e -c -n 1000" \
             "ibv_rc_pingpong -c -s 65536 -n 200" \
             "ibv_srq_pingpong -c -n 1000 -q 8" \
             "ibv_srq_pingpong -e -n 500" \
             "ibv_rc_pingpong -N -c -n 1000" \
             "ibv_ud_pingpong -c -n 2000" "ibv_ud_pingpong -e -c -n 500"; do
        ib2_check "softverbs/${t// /_}" "$SV_PAIR" \
            --expect 'iters in .* usec/iter' "${SVR[@]}" -- $t -p @PORT@
    done

    # perftest's verbs benchmarks, unmodified
    for t in "ib_write_bw" "ib_read_bw" "ib_send_lat" "ib_read_lat" \
             "ib_atomic_lat"; do
        ib2_check "softverbs/perftest/$t" "$SV_PAIR" \
            --expect '^ *[0-9]+ +1000 ' "${SVR[@]}" -- \
            $t -d softverbs0 -n 1000 -p @PORT@
    done

    ib2_check softverbs/ucx_info-lists-rc_verbs-ud_verbs bash -c '
        out=$("$@" ucx_info -d) || exit 1
        echo "$out"
        for tl in rc_verbs ud_verbs; do
            echo "$out" | grep -A1 "Transport: $tl\$" |
                grep -q "Device: softverbs0:1" ||
                { echo "$tl is not listed on softverbs0:1"; exit 1; }
        done' sv "${SVR[@]}"

    # presenting itself as a ConnectX-6 (for device-parameter code), the
    # device still offers UCX only its verbs transports, which work
    ib2_check softverbs/looks-like-connectx6 bash -c '
        out=$(SOFTVERBS_VENDOR_ID=0x02c9 SOFTVERBS_VENDOR_PART_ID=4123 \
              "$@" ibv_devinfo; SOFTVERBS_VENDOR_ID=0x02c9 \
              SOFTVERBS_VENDOR_PART_ID=4123 "$@" ucx_info -d) || exit 1
        echo "$out"
        echo "$out" | grep -q "vendor_id:[[:space:]]*0x02c9" &&
        echo "$out" | grep -q "vendor_part_id:[[:space:]]*4123" &&
        echo "$out" | grep -q "Transport: rc_verbs" &&
        ! echo "$out" | grep -qE "Transport: (rc_mlx5|dc_mlx5|ud_mlx5)"' \
        sv "$SV_RUN" --shm "$SV_SHM-cx6"

    # UCT over UCX's own verbs transports
    for t in "-x rc_verbs -t am_lat" "-x rc_verbs -t put_lat" \
             "-x rc_verbs -t get -D zcopy -s 65536" \
             "-x rc_verbs -t am_bw" "-x rc_verbs -t am_bw -D bcopy -s 4096" \
             "-x rc_verbs -t put_bw -D zcopy -s 1048576 -n 2000" \
             "-x rc_verbs -t fadd" "-x rc_verbs -t cswap" \
             "-x rc_verbs -t add_lat" "-x ud_verbs -t am_lat"; do
        ib2_check "softverbs/ucx_perftest${t// /_}" "$SV_PAIR" \
            --expect '^Final:' "${SVR[@]}" -- ucx_perftest -d softverbs0:1 \
            -n 20000 -w 1000 -p @PORT@ $t
    done

    # UCP tag matching with only the verbs transports
    for t in "-t tag_lat" "-t tag_bw -s 1048576 -n 2000" "-t tag_bw -s 8"; do
        ib2_check "softverbs/ucp${t// /_}" "$SV_PAIR" --expect '^Final:' \
            "${SVR[@]}" env UCX_TLS=rc_verbs,ud_verbs UCX_LOG_LEVEL=info -- \
            ucx_perftest -n 20000 -w 1000 -p @PORT@ $t
        # and the endpoints really used rc_verbs on the software device
        ib2_check "softverbs/ucp${t// /_}-uses-rc_verbs" bash -c \
            'grep -q "ep_cfg\[.*rc_verbs/softverbs0:1" \
                "$0"/softverbs_ucp*"${1// /_}".log' "$LOGDIR" "$t"
    done
fi

if [ -z "${IB2_PREFIX:-}" ]; then
    # RoCE: an Ethernet device, GIDs of the loopback addresses, GRH always
    SVE=("$SV_RUN" --shm "$SV_SHM-roce" --devices roce0:eth:1)
    for t in "ibv_rc_pingpong -g 3 -c -n 1000" \
             "ibv_ud_pingpong -g 1 -c -n 1000"; do
        ib2_check "softverbs/roce/${t// /_}" "$SV_PAIR" \
            --expect 'iters in .* usec/iter' "${SVE[@]}" -- $t -p @PORT@
    done
    for t in "-x rc_verbs -t am_lat" "-x ud_verbs -t am_lat"; do
        ib2_check "softverbs/roce/ucx_perftest${t// /_}" "$SV_PAIR" \
            --expect '^Final:' "${SVE[@]}" -- ucx_perftest -d roce0:1 \
            -n 20000 -w 1000 -p @PORT@ $t
    done
    ib2_check softverbs/roce/ucp-t_tag_lat "$SV_PAIR" --expect '^Final:' \
        "${SVE[@]}" env UCX_TLS=rc_verbs,ud_verbs -- \
        ucx_perftest -n 20000 -w 1000 -p @PORT@ -t tag_lat

    # a short run of the benchmark (it must complete; the numbers of a full
    # run are in docs/softverbs.md)
    ib2_check softverbs/benchmark-runs \
        "$BUILD/contrib/bench/softverbs/sv_bench" -r 3 -n 50 -l 3000
fi
