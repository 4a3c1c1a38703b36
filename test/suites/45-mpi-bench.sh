# The MPI ping-pong benchmark (contrib/bench/mpi): a short run of
# mpi_vs_openib.sh, in which Open MPI's pml ucx over rc_ib2 and ob1 with the
# openib BTL both run on the softverbs device, are seen to talk over those
# transports (the script checks the verbose output and stops otherwise),
# deliver every byte as sent (mpi_pingpong checks its warm-up messages) and
# print a number for every size. Timings are not judged here. Then
# mpi_pingpong's refusals of bad input.
for v in $(compgen -e | grep '^UCX_\|^OMPI_\|^SOFTVERBS_'); do unset "$v"; done

mpb_script=$SRC/contrib/bench/mpi/mpi_vs_openib.sh
mpb_bin=$BUILD/contrib/bench/mpi/mpi_pingpong
mpb_mpirun=(mpirun --allow-run-as-root --bind-to none)

# 8 B: eager short; 1 KiB: eager copy; 64 KiB: copied in fragments (pml ucx)
# and RDMA read (ob1); 1 MiB: rendezvous, RDMA read in both.
ib2_check mpi-bench/both-configurations-run bash -c '
    out=$("$1" -r 1 -s 8,1k,64k,1m -b 1 -n 20 "$2") || exit 1
    echo "$out"
    echo "$out" | grep -q "rc_ib2: UCP ep_cfg\[[0-9]*\]: tag(rc_ib2/" ||
        { echo "no rc_ib2 lane reported"; exit 1; }
    echo "$out" | grep -q "openib: ob1 Using openib btl for send" ||
        { echo "no openib BTL reported"; exit 1; }
    # MPI_Send (ucp_tag_send_nbr) goes to rendezvous at the 32 KiB that
    # contrib/ib2-env.sh sets, not at UCP'"'"'s fixed 256 KiB
    echo "$out" | grep -Eq "rc_ib2: UCP tag_send_nbr: .*\.\.32768\.\.<rndv>" ||
        { echo "MPI_Send rendezvous threshold is not 32768"; exit 1; }
    for s in 8 1024 65536 1048576; do
        # bytes, openib latency | rc_ib2 latency, ratio, round range
        echo "$out" | grep -Eq "^ *$s +[0-9]+\.[0-9]+ \| +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ " ||
            { echo "no numbers for $s bytes"; exit 1; }
    done' _ "$mpb_script" "$BUILD"

ib2_check mpi-bench/pingpong-needs-two-ranks bash -c '
    out=$("${@}" -np 1 "$0" 2>&1)
    rc=$?
    echo "$out"
    [ $rc -ne 0 ] && echo "$out" | grep -q "needs exactly 2 ranks"' \
    "$mpb_bin" "${mpb_mpirun[@]}"

ib2_check mpi-bench/pingpong-refuses-bad-size bash -c '
    out=$("${@}" -np 2 "$0" -s 8,0 2>&1)
    rc=$?
    echo "$out"
    [ $rc -ne 0 ] &&
    echo "$out" | grep -q "\"0\" is not a size from 1 byte"' \
    "$mpb_bin" "${mpb_mpirun[@]}"
