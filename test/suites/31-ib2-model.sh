# rc_ib2's memory model (docs/uct_ib2.md, "Memory model"): ib2_info model
# computes it and refuses bad input; ib2_memcheck runs processes on two
# softverbs "nodes" (two devices on one fabric), connects them all to all
# over rc_ib2 and fails unless the QPs, SRQs, CQs, receives posted,
# registered bytes and ring memory softverbs reports for every process
# equal the model's prediction.
for v in $(compgen -e | grep '^SOFTVERBS_\|^UCX_'); do unset "$v"; done

IB2_LIB=$BUILD/src/uct_ib2/.libs/libuct_ib2.so
IB2_ENV=$SRC/contrib/ib2-env.sh
SV_RUN=$BUILD/contrib/softverbs/softverbs-run
IB2_INFO=$BUILD/src/uct_ib2/ib2_info
MEMCHECK=$BUILD/contrib/bench/uct_ib2/ib2_memcheck
MODEL_SHM=ib2-model-$$
model_cleanup() { rm -rf "/dev/shm/$MODEL_SHM" "/dev/shm/$MODEL_SHM".* \
                         "/dev/shm/$MODEL_SHM"-*; }
trap model_cleanup EXIT

ib2_check ib2-model/info-side-by-side bash -c '
    out=$("$1" model --rq "P,128,256,192,128:S,2048,1024,1008,64" \
          --nodes 4 --ppn 2) || exit 1
    echo "$out"
    echo "$out" | grep -q "^P     P,128,256,192,128,3:P,2048,1024,1008,504,4$" &&
    echo "$out" | grep -q "^S     S,128,256,192,48:S,2048,1024,1008,64$" &&
    echo "$out" | grep -q "^X     X,128,256,192,48:X,2048,1024,1008,64$" &&
    echo "$out" | grep -Eq "^  RC QPs +12 +12 +0$" &&
    echo "$out" | grep -Eq "^  XRC INI QPs +0 +0 +3$"' sh "$IB2_INFO"

# Counts that follow from the accounting alone (docs: per process, peers
# of the other nodes; XRC: an INI QP per peer node, the node holding a TGT
# QP per INI QP ending there, and a UD QP per process for connection
# requests).
ib2_check ib2-model/info-counts bash -c '
    kv=$("$1" model --rq "P,128,256,192,128:S,8256,1024,1008,64" --nodes 3 \
         --ppn 4 --forms GPSX --kv) || exit 1
    echo "$kv"
    want() { echo "$kv" | grep -qx "$1" || { echo "expected $1"; exit 1; }; }
    want given.peers=8;    want given.qp_rc=16;  want given.srq=1
    want given.recv_posted=$((1024 + 8 * (256 + 3)))
    want P.qp_rc=16;       want P.srq=0;         want S.srq=2
    want S.recv_posted=$((256 + 1024))
    want X.qp_rc=0;        want X.qp_xrc_ini=2;  want X.node_tgt=8
    want X.qp_xrc_tgt=2.0000; want X.srq_xrc=2;  want X.node_qps=20
    want X.qp_ud=1;        want S.qp_ud=0
    want P.node_qps=64
    kv=$("$1" model --rq "S,1024,64" --nodes 2 --ppn 4 --intra --forms X --kv)
    want X.peers=7; want X.qp_xrc_ini=2; want X.node_tgt=8
    # X send rings: per peer node 2^n slots of the request and the larger
    # of gather list and inline bytes; 2048 more inline bytes add 2048
    # bytes to each of 256 slots on each of the 2 peer nodes
    ring() { "$1" model --rq "P,128,256,192,128:S,8256,1024,1008,64" \
                 --nodes 3 --ppn 4 --forms SX --kv --max-inline "$2" |
             sed -n "s/^$3.xring_bytes=//p"; }
    a=$(ring "$1" 2048 X) b=$(ring "$1" 4096 X) c=$(ring "$1" 4096 S)
    [ -n "$a" ] && [ $((b - a)) -eq $((2 * 256 * 2048)) ] && [ "$c" = 0 ] ||
        { echo "X send rings: $a, $b (want +$((2 * 256 * 2048))), S: $c"
          exit 1; }
    # a sweep: one line per job size, QPs per process of each form
    sw=$("$1" model --rq "P,128,256,192,128:S,8256,1024,1008,64" --ppn 64 \
         --sweep 64:256) || exit 1
    echo "$sw"
    [ "$(echo "$sw" | grep -vc "^#")" -eq 3 ] &&
    echo "$sw" | grep -Eq "^256 4 384.00 [0-9.]+ 24576 384.00 [0-9.]+ 24576 7.00 [0-9.]+ 448$"' \
    sh "$IB2_INFO"

ib2_check ib2-model/info-refuses-bad-input bash -c '
    fail() { out=$("$@" 2>&1); rc=$?; echo "$out"
             [ $rc -eq 2 ] && echo "$out" | grep -q "$want"; }
    want="give a number from 1" fail "$1" model --ppn 0 || exit 1
    want="is not P (per-peer), S (shared) or X" \
        fail "$1" model --rq "Q,128,8" || exit 1
    want="every queue must be X" fail "$1" model --rq "X,128,8:S,256,8" ||
        exit 1
    want="unknown device" fail "$1" model --device foo || exit 1
    want="needs --vendor and --part" fail "$1" model --rq auto || exit 1
    want="give FROM:TO" fail "$1" model --sweep 64 || exit 1' \
    sh "$IB2_INFO"

# The device parameter file gives the queues of an adapter ("auto").
ib2_check ib2-model/info-device-params bash -c '
    ini=$(mktemp) || exit 1
    trap "rm -f $ini" EXIT
    printf "[Some adapter]\nvendor_id = 0x02c9\nvendor_part_id = 4123\n%s\n" \
        "receive_queues = P,64,32:S,4096,512,256,64" >"$ini"
    out=$("$1" model --rq auto --vendor 0x02c9 --part 4123 --params "$ini" \
          --forms G) || exit 1
    echo "$out"
    echo "$out" | grep -q "^given P,64,32,16,8,7:S,4096,512,256,64$" &&
    out=$("$1" model --rq auto --vendor 0x15b3 --part 1 --params "$ini" \
          --forms G) &&
    echo "$out" | grep -q "^given P,128,256,192,128,3:S,8256,1024,1008,64$"' \
    sh "$IB2_INFO"

# Two nodes: devices n0 and n1 of one segment (one fabric, one subnet).
MODEL_RUN=("$IB2_ENV" --lib "$IB2_LIB" "$SV_RUN" --shm "$MODEL_SHM"
           --devices "n0:ib:1,n1:ib:1")

model_case() {   # model_case NAME ARGS... (ib2_memcheck's)
    local name=$1
    shift
    ib2_check "ib2-model/measured/$name" "${MODEL_RUN[@]}" \
        "$MEMCHECK" --devs n0:1,n1:1 --timeout 120 "$@"
}

for rq in "P,128,256,192,128:P,4096,64,48,16" \
          "S,128,512,256,64:S,8256,256,128,32" \
          "P,128,256,192,128:S,8256,1024,1008,64"; do
    tag=${rq//,/.}
    tag=${tag//:/_}
    for ppn in 1 2 3 4; do
        model_case "$tag/ppn$ppn" --ppn "$ppn" --rq "$rq"
    done
    model_case "$tag/ppn4-intra" --ppn 4 --intra --rq "$rq"
done

# The same through the registration cache (rc_ib2's default): it must
# register what the pools hold and no more. Consecutive pool chunks are
# adjacent mmaps, all held by their pools; the cache must not merge a new
# chunk with them (docs/reg_cache.md, "Merging"; when it did, the first
# and third specifications registered up to 3.7x and 1.07x their pools;
# the second matched all the same).
for rq in "P,128,256,192,128:P,4096,64,48,16" \
          "S,128,512,256,64:S,8256,256,128,32" \
          "P,128,256,192,128:S,8256,1024,1008,64"; do
    tag=${rq//,/.}
    tag=${tag//:/_}
    model_case "cache/$tag/ppn4-intra" --reg cache --ppn 4 --intra --rq "$rq"
done

# X queues, against the model's per-node accounting: per process an INI
# QP per peer node (with --intra its own node is one), shared by the
# endpoints to that node's processes, and on each node one TGT QP per INI
# QP ending there, made by one of its processes and opened by the others
# (docs/uct_ib2.md, "Per-node INI QPs").
xrq="X,128,512,256,64:X,8256,256,128,32"
for ppn in 1 2 4; do
    for intra in "" "--intra"; do
        [ -z "$intra" ] || [ "$ppn" -gt 1 ] || continue
        model_case "X/ppn$ppn${intra:+-intra}" --ppn "$ppn" $intra --rq "$xrq"
    done
done
