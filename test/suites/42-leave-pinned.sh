# Leave-pinned proven end to end (issue 11): on softverbs with pinning on,
# send and receive buffers are freed and taken anew at the same addresses
# (malloc/free, mmap/munmap, mremap, brk shrink, madvise DONTNEED,
# shmat/shmdt) between rendezvous transfers -- over p2p on rc_ib2 (p2p's
# cache and rc_ib2's memory domain cache) and over UCP directly on rc_ib2
# (UCP's own rendezvous, rc_ib2's memory domain cache). Every byte is
# checked. The same tests with invalidation switched off
# (IB2_RCACHE_TEST_NO_INVALIDATION) must fail, each of them, after a
# renewal, with softverbs reporting the stale accesses: the proof that the
# tests see what they claim. And over p2p with p2p's cache alone switched
# off (the memory domain's invalidating) they must fail with the poison
# of the sender's stale registration: p2p's own cache is proven too.
# Also: rendezvous sends from read-only buffers.
for v in $(compgen -e | grep '^P2P_\|^UCX_\|^SOFTVERBS_\|^OMPI_\|^IB2_RCACHE_'); do
    unset "$v"
done

lp_shm=ib2-leavepin-suite-$$
lp_cleanup() { rm -rf "/dev/shm/$lp_shm" "/dev/shm/$lp_shm".* \
                      "/dev/shm/$lp_shm"-*; }
trap lp_cleanup EXIT
lp_sv=("$BUILD/contrib/softverbs/softverbs-run" --shm "$lp_shm")
lp_mpi=("$(command -v mpirun)" --allow-run-as-root --oversubscribe
        --bind-to none -np 2 -x UCX_TLS -x P2P_UCT_IB2 -x P2PTEST_WAIT_LIMIT)
lp_ucp=$BUILD/test/gtest/uct_ib2/test_ucp_ib2
lp_p2p=$BUILD/test/gtest/p2p/test_p2p_leavepin
export P2P_UCT_IB2=$BUILD/src/uct_ib2/.libs/libuct_ib2.so
export UCX_TLS=rc_ib2,ud_verbs:aux
export P2PTEST_WAIT_LIMIT=60

# With the caches invalidating: every byte arrives, softverbs sees no stale
# access, read-only buffers are sent.
ib2_gtest leave-pinned/ucp-rc_ib2 "${lp_sv[@]}" "$lp_ucp" --gtest_color=no
ib2_gtest leave-pinned/p2p-rc_ib2 "${lp_sv[@]}" "${lp_mpi[@]}" "$lp_p2p" \
    --gtest_color=no
UCX_TLS=shm ib2_gtest leave-pinned/p2p-shm-read-only "${lp_mpi[@]}" \
    "$lp_p2p" --gtest_color=no --gtest_filter='ReadOnlyP2P.*'

# Invalidation off: the run must fail, and every stress test of it must
# have found wrong bytes after a renewal -- in its own output block, named
# by its own method, and seen by the process that checks (rank 0 over p2p:
# other ranks' messages may reach mpirun's output late) -- and never before
# one; the caches must have said that invalidation is off, and softverbs
# must have reported stale accesses. Needs page frame numbers (root): as
# another user softverbs sees only unmapped pages, not replaced ones.
# PREFIX WHO CACHES COMMAND...: CACHES is "all", or "p2p" for p2p's cache
# alone (the switch naming it; the memory domain's then invalidates, so the
# receive buffers are fresh and every wrong byte must be the poison that
# the sender's stale registration reads: the receiver's reads from it are
# reported, no write into a stale registration is).
lp_expect_stale='
    prefix=$1 who=$2 caches=$3; shift 3
    v=stale-registrations-corrupt-data
    [ "$caches" = all ] || v=$v:$caches
    out=$(IB2_RCACHE_TEST_NO_INVALIDATION=$v "$@" 2>&1)
    rc=$?
    echo "$out"
    echo "--- expected-failure check ($caches)"
    if [ $rc -eq 0 ]; then
        echo "passed with invalidation off: the tests do not see stale"
        echo "registrations"
        exit 1
    fi
    said=$(echo "$out" | grep "IB2_RCACHE_TEST_NO_INVALIDATION is set")
    [ -n "$said" ] ||
        { echo "the caches did not say that invalidation is off"; exit 1; }
    if [ "$caches" != all ] &&
       echo "$said" | grep -v "^rcache $caches: WARNING"; then
        echo "caches other than $caches ignore memory events"; exit 1
    fi
    if echo "$out" | grep -q "(before any renewal)"; then
        echo "a transfer failed before any renewal"; exit 1
    fi
    for tm in "MallocFree=malloc/free" "MmapMunmap=mmap/munmap" \
              "Mremap=mremap" "BrkShrink=brk shrink" \
              "MadviseDontneed=madvise(MADV_DONTNEED)" \
              "ShmatShmdt=shmat/shmdt"; do
        t=${tm%%=*} m=${tm#*=}
        block=$(echo "$out" | sed -n "/^\[ RUN      \] $prefix\.$t\$/,/^\[ *[A-Z]* *\] $prefix\.$t (/p")
        echo "$block" | grep -q "^\[  FAILED  \] $prefix\.$t (" ||
            { echo "$prefix.$t did not fail"; exit 1; }
        wrong=$(echo "$block" | grep -F "$m, round " |
                grep -F "(after renewal), $who" | grep " bytes wrong")
        n=$(echo "$wrong" | grep -c " bytes wrong")
        [ "$n" -gt 0 ] ||
            { echo "$prefix.$t: no wrong bytes after a renewal"; exit 1; }
        if [ "$caches" = all ]; then
            echo "$prefix.$t: $n transfers with wrong bytes"
            continue
        fi
        # "W of L bytes wrong (first at F): P are the poison 0xa5 (...),
        # U still 0x5a (...)": every wrong byte must be the poison
        p=$(echo "$wrong" | sed -n "s/.*: \([0-9]*\) of [0-9]* bytes wrong (first at [0-9-]*): \([0-9]*\) are the poison .*, 0 still 0x5a .*/\1 \2/p" |
            awk "\$1 == \$2 && \$1 > 0" | wc -l)
        [ "$p" -eq "$n" ] || { echo "$prefix.$t: of $n transfers with" \
            "wrong bytes, only $p hold the poison alone"; exit 1; }
        echo "$prefix.$t: $n transfers with wrong bytes, all of them poison"
    done
    n=$(echo "$out" | grep -c "stale registration: RDMA")
    [ "$n" -gt 0 ] || { echo "softverbs reported no stale access"; exit 1; }
    echo "softverbs reported $n stale accesses"
    if [ "$caches" != all ]; then
        r=$(echo "$out" | grep -c "stale registration: RDMA READ from")
        w=$(echo "$out" | grep -c "stale registration: .* into region")
        echo "of them $r reads from a stale send buffer, $w writes into a" \
             "stale receive buffer"
        [ "$r" -gt 0 ] && [ "$w" -eq 0 ] ||
            { echo "not the sender'"'"'s registration alone"; exit 1; }
    fi'
if [ "$(id -u)" = 0 ]; then
    ib2_check leave-pinned/ucp-rc_ib2-fails-without-invalidation \
        bash -c "$lp_expect_stale" _ LeavePinnedUcp "" all "${lp_sv[@]}" \
        "$lp_ucp" --gtest_color=no --gtest_filter='LeavePinnedUcp.*'
    ib2_check leave-pinned/p2p-rc_ib2-fails-without-invalidation \
        bash -c "$lp_expect_stale" _ LeavePinnedP2P "from rank 1:" all \
        "${lp_sv[@]}" "${lp_mpi[@]}" -x IB2_RCACHE_TEST_NO_INVALIDATION \
        "$lp_p2p" --gtest_color=no --gtest_filter='LeavePinnedP2P.*'
    ib2_check leave-pinned/p2p-cache-alone-stale-sends-poison \
        bash -c "$lp_expect_stale" _ LeavePinnedP2P "from rank 1:" p2p \
        "${lp_sv[@]}" "${lp_mpi[@]}" -x IB2_RCACHE_TEST_NO_INVALIDATION \
        "$lp_p2p" --gtest_color=no --gtest_filter='LeavePinnedP2P.*'
else
    ib2_result SKIP "leave-pinned/*-fails-without-invalidation (not root: softverbs cannot tell replaced pages without page frame numbers)"
fi
unset UCX_TLS P2P_UCT_IB2 P2PTEST_WAIT_LIMIT
