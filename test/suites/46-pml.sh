# pml ib2, the Open MPI PML component over p2p (src/pml_ib2): ompi_info
# lists it; the MPI programs of test/mpi/pml (each checks its own results
# and prints "NAME: OK") run under --mca pml ib2 over UCX's shared memory
# and TCP, with 2 ranks and some with 3 and 4, and over rc_ib2 on
# softverbs; and the same programs under --mca pml ob1 (vader, tcp) as the
# reference that the programs themselves are right (pml_intercomm, the
# intercommunicators, at 2, 3 and 4 ranks). pml_failure (a rank
# killed mid-exchange) runs under pml ib2 only, with 3 ranks. pml_freed
# and pml_failure also run where they must fail (UCP's own registration
# cache on; failure detection off), to show they see what they guard
# against. Open MPI's own example programs (hello, ring, connectivity, the
# C++ and Fortran rings; contrib/ompi-examples) run under pml ib2 over
# shm, tcp and rc_ib2 and under ob1, their output checked. So do
# mpi4py's benchmark programs and a map over its futures pool.
# Skipped, with the reason, where configure found no Open MPI development
# headers (the component is then not built).
for v in $(compgen -e | grep '^P2P_\|^UCX_\|^SOFTVERBS_\|^OMPI_'); do
    unset "$v"
done

pml_dir=$BUILD/src/pml_ib2
pml_bin=$BUILD/test/mpi/pml
if ! grep -q '^ompicomponent_LTLIBRARIES' "$pml_dir/Makefile" 2>/dev/null; then
    ib2_result SKIP "pml (Open MPI development headers not found by configure: install libopenmpi-dev or pass --with-ompi=DIR)"
    return 0
fi

pml_sysdir=$(ompi_info --parsable --path pkglibdir | sed -n 's/^path:pkglibdir://p')
export OMPI_MCA_mca_base_component_path=$pml_dir/component:$pml_sysdir
export LD_LIBRARY_PATH=$BUILD/src/p2p/.libs:$BUILD/src/reg_cache/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# a program that hangs ends itself (alarm) before mpirun's timeout
export PML_TEST_TIMEOUT=90
# neither pml ib2 nor ob1 cancels a send (src/pml_ib2/README.md): a send
# that says it was cancelled fails pml_sendcancel
export PML_SENDCANCEL_EXPECT=none
pml_mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none
            --timeout 120 -x OMPI_MCA_mca_base_component_path
            -x LD_LIBRARY_PATH -x PML_TEST_TIMEOUT -x PML_SENDCANCEL_EXPECT)

ib2_check pml/ompi_info-lists-ib2 bash -c '
    out=$(ompi_info --param pml ib2 --level 9) || exit 1
    echo "$out"
    echo "$out" | grep -q "MCA pml: ib2" &&
    echo "$out" | grep -q "pml_ib2_priority"'

# Longer ends for programs that move hundreds of MiB: pml_bigdt takes 4 s
# alone here, about a minute while other builds and suites share the two
# cores (at nice 19).
declare -A pml_prog_timeout=([pml_bigdt]=400)

# pml_run NAME NP PROGRAM [mpirun args...]: passes when the program says OK
pml_run() {
    local name=$1 np=$2 prog=$3 t
    shift 3
    t=${pml_prog_timeout[$prog]:-$PML_TEST_TIMEOUT}
    ib2_check "pml/$name" bash -c '
        np=$1 prog=$2 t=$3; shift 3
        out=$(PML_TEST_TIMEOUT=$t "$@" -np "$np" "$prog" 2>&1)
        rc=$?
        echo "$out"
        [ $rc -eq 0 ] && echo "$out" | grep -q "^$(basename "$prog"): OK ($np ranks)"' \
        _ "$np" "$pml_bin/$prog" "$t" "${pml_mpirun[@]}" \
        --timeout $((t + 30)) "$@"
}

# pml_failure's victim kills itself: Open MPI's launcher must let the
# job go on (it then exits 0 whatever the survivors did: their "OK" line
# is what counts). Not run under ob1: ob1 of Open MPI 4.1.4 leaves a
# receive from the dead rank pending for good, over vader and over tcp
# (checked: the survivors give up at the bound).
pml_recovery=(--mca orte_enable_recovery 1)

pml_progs=(pml_pingpong pml_modes pml_match pml_probe pml_persist pml_dtype
           pml_comms pml_truncate pml_threads pml_freed pml_bigdt
           pml_sendcancel pml_dtfrag pml_intercomm)
# the derived-datatype programs once more with every non-contiguous
# message in pieces (none staged whole), small ones too
pml_piece_progs=(pml_dtype pml_truncate pml_probe pml_dtfrag)

# the component is the one running, and says what it set up
ib2_check pml/ib2-is-selected bash -c '
    out=$("$@" -np 2 --mca pml ib2 --mca pml_ib2_verbose 1 -x UCX_TLS=shm \
          "'"$pml_bin"'/pml_pingpong" 2>&1)
    rc=$?
    echo "$out"
    [ $rc -eq 0 ] && echo "$out" | grep -q "pml ib2: initialised" &&
    echo "$out" | grep -q "pml ib2: communicator MPI_COMM_WORLD: context id 0, 2 members"' \
    _ "${pml_mpirun[@]}"

for tls in shm tcp; do
    for p in "${pml_progs[@]}"; do
        pml_run "ib2-$tls/$p" 2 "$p" --mca pml ib2 -x UCX_TLS=$tls
    done
    pml_run "ib2-$tls/pml_match-3" 3 pml_match --mca pml ib2 -x UCX_TLS=$tls
    pml_run "ib2-$tls/pml_comms-4" 4 pml_comms --mca pml ib2 -x UCX_TLS=$tls
    # intercommunicators of uneven groups (one against two, one against
    # three), and two against two
    pml_run "ib2-$tls/pml_intercomm-3" 3 pml_intercomm --mca pml ib2 \
        -x UCX_TLS=$tls
    pml_run "ib2-$tls/pml_intercomm-4" 4 pml_intercomm --mca pml ib2 \
        -x UCX_TLS=$tls
    pml_run "ib2-$tls/pml_failure-3" 3 pml_failure --mca pml ib2 \
        "${pml_recovery[@]}" -x UCX_TLS=$tls
    for p in "${pml_piece_progs[@]}"; do
        pml_run "ib2-$tls/$p-in-pieces" 2 "$p" --mca pml ib2 \
            --mca pml_ib2_stage_max 0 -x UCX_TLS=$tls
    done
done

# elements straddling UCP's fragments over shm too: p2p's eager limit
# below UCP's rendezvous threshold makes UCP cut 1-40 KB messages into
# eager fragments there as well
pml_run "ib2-shm/pml_dtfrag-fragments" 2 pml_dtfrag --mca pml ib2 \
    --mca pml_ib2_stage_max 0 -x UCX_TLS=shm -x P2P_EAGER_LIMIT=1k \
    -x UCX_RNDV_THRESH=100k

# pml_bigdt sees a whole-message copy: with the PML told to stage
# messages up to 1 GiB whole, its peak resident size rises by the 64 MiB
# copy and the PML's staging count says so; it must fail.
ib2_check pml/ib2-shm/pml_bigdt-sees-staging bash -c '
    out=$(PML_TEST_TIMEOUT=400 "$@" 2>&1)
    echo "$out"
    echo "$out" | grep -q "peak resident size rose by" &&
    ! echo "$out" | grep -q "^pml_bigdt: OK"' \
    _ "${pml_mpirun[@]}" --timeout 430 -np 2 --mca pml ib2 \
    --mca pml_ib2_stage_max 1073741824 -x UCX_TLS=shm "$pml_bin/pml_bigdt"

# pml_failure sees a failure that is never reported: with p2p's
# same-host check and UCP's keepalive off, shared memory never tells the
# survivors, and they must give up at the bound, not pass.
ib2_check pml/ib2-shm/pml_failure-sees-no-report bash -c '
    out=$("$@" 2>&1)
    echo "$out"
    echo "$out" | grep -q "still pending after 5 s" &&
    ! echo "$out" | grep -q "^pml_failure: OK"' \
    _ "${pml_mpirun[@]}" -np 3 --mca pml ib2 "${pml_recovery[@]}" \
    -x UCX_TLS=shm -x P2P_KEEPALIVE_INTERVAL=0 -x UCX_KEEPALIVE_INTERVAL=inf \
    -x PML_FAILURE_BOUND=5 "$pml_bin/pml_failure"

# Reference: ob1 with vader's single copy off, since ob1 of Open MPI
# 4.1.4 writes a truncated rendezvous message past the receive buffer
# over single copy (and crashes over tcp): pml_truncate shows it.
for p in "${pml_progs[@]}"; do
    pml_run "ob1-vader/$p" 2 "$p" --mca pml ob1 --mca btl self,vader \
        --mca btl_vader_single_copy_mechanism none
done
pml_run "ob1-vader/pml_match-3" 3 pml_match --mca pml ob1 \
    --mca btl self,vader --mca btl_vader_single_copy_mechanism none
pml_run "ob1-vader/pml_comms-4" 4 pml_comms --mca pml ob1 \
    --mca btl self,vader --mca btl_vader_single_copy_mechanism none
for np in 3 4; do
    pml_run "ob1-vader/pml_intercomm-$np" $np pml_intercomm --mca pml ob1 \
        --mca btl self,vader --mca btl_vader_single_copy_mechanism none
done
# and over tcp, all but pml_truncate (ob1 crashes there, see above)
for p in "${pml_progs[@]}"; do
    [ "$p" = pml_truncate ] && continue
    pml_run "ob1-tcp/$p" 2 "$p" --mca pml ob1 --mca btl self,tcp
done

# Open MPI's own example programs (contrib/ompi-examples/fetch.sh: from
# the installed Open MPI's source package, built in a cache outside the
# tree), each run's output checked by test/mpi/ompi-examples-check.sh
# against what the program prints when every message arrived right: the
# C ones at 2 and 4 ranks under pml ib2 over shm, tcp and rc_ib2 (below)
# and under ob1; the C++ and Fortran rings at 4 ranks over shm and ob1.
pml_ex_c=(hello_c ring_c connectivity_c)
pml_ex_rings=(ring_cxx ring_mpifh ring_usempi ring_usempif08)
pml_ex_dir=
if ib2_check pml/ompi-examples/fetch-and-build \
        "$SRC/contrib/ompi-examples/fetch.sh"; then
    pml_ex_dir=$("$SRC/contrib/ompi-examples/fetch.sh" --dir)/bin
fi

# pml_example NAME NP PROGRAM [mpirun args...]: passes when the program
# exits 0 and printed what it should
pml_example() {
    local name=$1 np=$2 prog=$3
    shift 3
    [ -n "$pml_ex_dir" ] || return 0   # fetch-and-build failed, said so
    if [ ! -x "$pml_ex_dir/$prog" ]; then
        # fetch.sh builds each program whose compiler wrapper works
        ib2_result SKIP "pml/$name ($prog not built: its compiler is missing, see $pml_ex_dir/../build.log)"
        return 0
    fi
    ib2_check "pml/$name" bash -c '
        np=$1 prog=$2 check=$3; shift 3
        out=$("$@" -np "$np" "$prog" 2>&1)
        rc=$?
        echo "$out"
        echo "exit $rc"
        [ $rc -eq 0 ] &&
        printf "%s\n" "$out" | "$check" "$(basename "$prog")" "$np"' \
        _ "$np" "$pml_ex_dir/$prog" "$SRC/test/mpi/ompi-examples-check.sh" \
        "${pml_mpirun[@]}" --timeout 60 "$@"
}

for np in 2 4; do
    for p in "${pml_ex_c[@]}"; do
        for tls in shm tcp; do
            pml_example "ib2-$tls/example-$p-$np" $np $p --mca pml ib2 \
                -x UCX_TLS=$tls
        done
        pml_example "ob1-vader/example-$p-$np" $np $p --mca pml ob1 \
            --mca btl self,vader
    done
done
for p in "${pml_ex_rings[@]}"; do
    pml_example "ib2-shm/example-$p-4" 4 $p --mca pml ib2 -x UCX_TLS=shm
    pml_example "ob1-vader/example-$p-4" 4 $p --mca pml ob1 \
        --mca btl self,vader
done

# mpi4py's own programs (Debian's python3-mpi4py, run by Debian's
# python3): its benchmark module's hello world (a token passed down the
# ranks) and ring test (which warns if a message comes back changed: with
# -W error::UserWarning the warning aborts the job), and
# test/mpi/mpi4py/pool.py, a map over mpi4py.futures' static pool: a
# manager thread on rank 0 (MPI_THREAD_MULTIPLE) hands out pickled tasks
# by synchronous send, which the workers find with probes and take with
# matched receives (objects of 0 B to 1 MiB, each checked).
# Under pml ib2 over shm and tcp (here) and rc_ib2 (below), and ob1.
pml_python=/usr/bin/python3
pml_py_here=1
if ! "$pml_python" -c 'import mpi4py.futures' 2>/dev/null; then
    ib2_result SKIP "pml/mpi4py (mpi4py is not importable by $pml_python: install Debian's python3-mpi4py, as contrib/setup.sh does)"
    pml_py_here=0
fi

# pml_py NAME NP LINES REGEX [mpirun args...] -- PYTHON ARGS...: passes
# when the job exits 0 and exactly LINES lines of its output match REGEX
pml_py() {
    local name=$1 np=$2 lines=$3 re=$4 margs=()
    shift 4
    [ "$pml_py_here" = 1 ] || return 0
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        margs+=("$1")
        shift
    done
    shift
    ib2_check "pml/$name" bash -c '
        lines=$1 re=$2; shift 2
        out=$("$@" 2>&1)
        rc=$?
        echo "$out"
        echo "exit $rc"
        [ $rc -eq 0 ] &&
        [ "$(printf "%s\n" "$out" | grep -cE "$re")" -eq "$lines" ]' \
        _ "$lines" "$re" "${pml_mpirun[@]}" "${margs[@]}" -np "$np" \
        "$pml_python" "$@"
}

pml_py_all() {   # pml_py_all PREFIX [mpirun args...]: all of them
    local pre=$1
    shift
    pml_py "$pre/mpi4py-helloworld-3" 3 3 \
        '^Hello, World! I am process [0-2] of 3 on ' \
        "$@" -- -m mpi4py.bench helloworld
    pml_py "$pre/mpi4py-ringtest-3" 3 1 \
        '^time for 200 loops = [0-9.e+-]+ seconds [(]3 processes, 1024 bytes[)]$' \
        "$@" -- -W error::UserWarning -m mpi4py.bench ringtest \
        -n 1024 -l 200
    pml_py "$pre/mpi4py-ringtest-1m-3" 3 1 \
        '^time for 20 loops = [0-9.e+-]+ seconds [(]3 processes, 1048576 bytes[)]$' \
        "$@" -- -W error::UserWarning -m mpi4py.bench ringtest \
        -n 1048576 -l 20
    pml_py "$pre/mpi4py-futures-pool-4" 4 1 '^pool: OK 41266120$' \
        "$@" -- -m mpi4py.futures "$SRC/test/mpi/mpi4py/pool.py"
}

for tls in shm tcp; do
    pml_py_all "ib2-$tls" --mca pml ib2 -x UCX_TLS=$tls
done
pml_py_all ob1-vader --mca pml ob1 --mca btl self,vader

# pml ib2 over rc_ib2 on the softverbs device (as 40-p2p.sh runs p2p):
# rc_ib2 carries everything, ud_verbs only helps UCP wire up.
pml_shm=ib2-pml-suite-$$
pml_cleanup() { rm -rf "/dev/shm/$pml_shm" "/dev/shm/$pml_shm".* \
                       "/dev/shm/$pml_shm"-*; }
trap pml_cleanup EXIT
# the device parameter file as installed (softverbs' gather cost)
export UCX_IB2_DEVICE_PARAMS=$SRC/src/uct_ib2/ib2-device-params.ini
export P2P_UCT_IB2=$BUILD/src/uct_ib2/.libs/libuct_ib2.so
pml_mpirun=("$BUILD/contrib/softverbs/softverbs-run" --shm "$pml_shm"
            "${pml_mpirun[@]}" -x P2P_UCT_IB2)
for p in "${pml_progs[@]}"; do
    pml_run "ib2-rc_ib2/$p" 2 "$p" --mca pml ib2 --mca btl self \
        -x UCX_TLS=rc_ib2,ud_verbs:aux
done
pml_run "ib2-rc_ib2/pml_intercomm-3" 3 pml_intercomm --mca pml ib2 \
    --mca btl self -x UCX_TLS=rc_ib2,ud_verbs:aux
pml_run "ib2-rc_ib2/pml_failure-3" 3 pml_failure --mca pml ib2 \
    --mca btl self "${pml_recovery[@]}" -x UCX_TLS=rc_ib2,ud_verbs:aux
for p in "${pml_piece_progs[@]}"; do
    pml_run "ib2-rc_ib2/$p-in-pieces" 2 "$p" --mca pml ib2 --mca btl self \
        --mca pml_ib2_stage_max 0 -x UCX_TLS=rc_ib2,ud_verbs:aux
done

for np in 2 4; do
    for p in "${pml_ex_c[@]}"; do
        pml_example "ib2-rc_ib2/example-$p-$np" $np $p --mca pml ib2 \
            --mca btl self -x UCX_TLS=rc_ib2,ud_verbs:aux
    done
done
pml_py_all ib2-rc_ib2 --mca pml ib2 --mca btl self \
    -x UCX_TLS=rc_ib2,ud_verbs:aux

# pml_freed sees the bug it guards against: with UCX 1.13's own
# registration cache on, which p2p leaves off, UCP merges its memory
# pool's new chunk (transparent huge page allocation, from the heap) with
# the freed block p2p still has mapped, and the process aborts. Without
# transparent huge pages UCP takes its chunks from mmap, away from the
# heap, and nothing shows. The damage shows as glibc's abort in free()
# or as a crash in UCX's registration cache putting the merged region
# back (ucs_rcache_region_put from ucs_mpool_cleanup in
# ucp_worker_destroy): which one varies from run to run.
if grep -q '\[never\]' /sys/kernel/mm/transparent_hugepage/enabled \
        2>/dev/null; then
    ib2_result SKIP "pml/ib2-rc_ib2/pml_freed-sees-the-bug (transparent huge pages are off here: UCP allocates its pools by mmap, away from the freed heap)"
else
    ib2_check pml/ib2-rc_ib2/pml_freed-sees-the-bug bash -c '
        out=$("$@" 2>&1)
        rc=$?
        echo "$out"
        echo "exit $rc"
        [ $rc -ne 0 ] &&
        echo "$out" | grep -q "free()\|malloc()\|corrupted\|ucs_rcache_region_put"' \
        _ "${pml_mpirun[@]}" -np 2 --mca pml ib2 --mca btl self \
        -x UCX_TLS=rc_ib2,ud_verbs:aux -x UCX_RCACHE_ENABLE=y \
        "$pml_bin/pml_freed"
fi
unset P2P_UCT_IB2
