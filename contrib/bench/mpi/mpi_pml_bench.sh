#!/usr/bin/env bash
#
# pml ib2 (this product's Open MPI PML, on p2p) next to Open MPI's pml ucx
# and pml ob1, in one run: mpi_pingpong measures ping-pong latency and
# streaming bandwidth (a window of MPI_Isend answered by one message) from
# 8 bytes to 16 MiB, over shared memory and over the rc_ib2 transport on
# the verbs device (softverbs where the machine has no RDMA adapter):
#
#   transport  pml ib2, pml ucx                  pml ob1
#   shm        UCX_TLS=shm                       btl vader,self
#   rc_ib2     UCX_TLS=rc_ib2,ud_verbs:aux and   btl openib,self on the
#              the thresholds contrib/ib2-env.sh same device
#              sets
#
# Every configuration runs once per round; rounds alternate the order
# (ABBA), so none always runs first. Per size the tables give the median
# over the rounds of each run's median batch, and the ratios ib2/ucx and
# ib2/ob1; then whether the targets hold: pml ib2's 8-byte latency at
# most 1.10x pml ucx's on the same transport, its bandwidth at 1 MiB and
# above at least 0.95x. Before the rounds one short verbose run of each
# configuration shows which transports carry the messages; the script
# stops if it is not the one meant (e.g. tcp instead of shm, or shared
# memory under rc_ib2).
#
#   contrib/bench/mpi/mpi_pml_bench.sh [options] BUILD_DIR
#     -r ROUNDS   rounds (default 5)
#     -s SIZES    message sizes, comma separated, k/m suffixes (default:
#                 every power of two from 8 to 16m)
#     -p PMLS     PMLs to run, of ib2,ucx,ob1 (default all three)
#     -t TLS      transports, of shm,rc_ib2 (default both)
#     -b BATCHES  timed batches per size in each run (default 21)
#     -n ITERS    ping-pongs per batch (default: mpi_pingpong's, by size)
#     -W WINDOW   sends in flight per streaming window (default 32)
#     -N WINDOWS  streaming windows per batch (default: mpi_pingpong's)
#     -B BINDING  mpirun --bind-to BINDING (default core where the machine
#                 has two cores or more, else none)
#     -P PREFIX   also write PREFIX.png (latency and bandwidth against
#                 size, one line per PML and transport, log scales) and
#                 the tables it is drawn from, PREFIX-latency.txt and
#                 PREFIX-bandwidth.txt (medians; "-" where not measured)
#     -T SECONDS  a run (one mpirun) that takes longer fails the script
#                 (default 1800; on a quiet machine a run of the default
#                 sizes takes well under a minute, on a loaded one the
#                 ranks wait for a core at every message and runs take
#                 many times that)
#
# Variables of the caller (UCX_*, OMPI_*, P2P_*, SOFTVERBS_*) are cleared:
# only the options change what is measured. Timings of a machine loaded by
# other work are noisy; the script prints the load average before and
# after.
#
set -euo pipefail

usage() { sed -n '/^#   contrib/,/^# Variables/p' "$0" | sed 's/^# \{0,1\}//' |
          sed '$d'; }
die() { echo "mpi_pml_bench: $*" >&2; exit 2; }

ROUNDS=5
SIZES=
PMLS=ib2,ucx,ob1
TLS=shm,rc_ib2
BATCHES=
ITERS=
WINDOW=
WINDOWS=
BIND=
PLOT=
RUN_TIMEOUT=1800
while getopts "r:s:p:t:b:n:W:N:B:P:T:h" opt; do
    case $opt in
    r) ROUNDS=$OPTARG ;;
    s) SIZES=$OPTARG ;;
    p) PMLS=$OPTARG ;;
    t) TLS=$OPTARG ;;
    b) BATCHES=$OPTARG ;;
    n) ITERS=$OPTARG ;;
    W) WINDOW=$OPTARG ;;
    N) WINDOWS=$OPTARG ;;
    B) BIND=$OPTARG ;;
    P) PLOT=$OPTARG ;;
    T) RUN_TIMEOUT=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { usage >&2; exit 2; }
[ -d "$1" ] || die "build directory $1 does not exist"
BUILD=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)

case $ROUNDS in
''|*[!0-9]*|0) die "-r: ROUNDS must be a positive number" ;;
esac
case $RUN_TIMEOUT in
''|*[!0-9]*|0) die "-T: SECONDS must be a positive number" ;;
esac
for v in BATCHES ITERS WINDOW WINDOWS; do   # mpi_pingpong checks ranges
    case ${!v} in
    *[!0-9]*) die "-${v:0:1}: \"${!v}\" is not a number" ;;
    esac
done
if [ -z "$SIZES" ]; then
    SIZES=8
    for ((s = 16; s <= 16 << 20; s *= 2)); do SIZES+=",$s"; done
fi
IFS=, read -r -a pml_list <<<"$PMLS"
IFS=, read -r -a tl_list <<<"$TLS"
[ ${#pml_list[@]} -gt 0 ] || die "-p: no PML given"
[ ${#tl_list[@]} -gt 0 ] || die "-t: no transport given"
for p in "${pml_list[@]}"; do
    case $p in ib2|ucx|ob1) ;;
    *) die "-p: \"$p\" is not a PML: give ib2, ucx and/or ob1" ;; esac
done
for t in "${tl_list[@]}"; do
    case $t in shm|rc_ib2) ;;
    *) die "-t: \"$t\" is not a transport: give shm and/or rc_ib2" ;; esac
done
if [ -z "$BIND" ]; then
    BIND=core
    [ "$(nproc)" -ge 2 ] || BIND=none
fi
case $BIND in
none|core|hwthread|socket|numa|l3cache|l2cache) ;;
*) die "-B: \"$BIND\": give none, core, hwthread, socket, numa, l2cache" \
       "or l3cache" ;;
esac
if [ -n "$PLOT" ]; then
    [ -d "$(dirname "$PLOT")" ] ||
        die "-P: directory $(dirname "$PLOT") does not exist"
    command -v gnuplot >/dev/null ||
        die "-P: gnuplot not found: install gnuplot-nox (contrib/setup.sh does)"
fi

BENCH=$BUILD/contrib/bench/mpi/mpi_pingpong
IB2_LIB=$BUILD/src/uct_ib2/.libs/libuct_ib2.so
SV_RUN=$BUILD/contrib/softverbs/softverbs-run
PML_DIR=$BUILD/src/pml_ib2/component
MPIRUN=$(command -v mpirun) || {
    echo "mpi_pml_bench: mpirun not found: install openmpi-bin" >&2; exit 1; }
need=("$BENCH")
[[ ",$PMLS," == *,ib2,* ]] && need+=("$PML_DIR/mca_pml_ib2.so")
[[ ",$TLS," == *,rc_ib2,* ]] && need+=("$IB2_LIB" "$SV_RUN")
for f in "${need[@]}"; do
    [ -e "$f" ] || { echo "mpi_pml_bench: $f is missing: build first" \
                          "(contrib/setup.sh build; pml ib2 needs Open MPI's" \
                          "development headers, libopenmpi-dev)" >&2; exit 1; }
done

for v in $(compgen -e | grep '^UCX_\|^OMPI_\|^P2P_\|^SOFTVERBS_'); do
    unset "$v"
done

TMP=$(mktemp -d)
SHM=ib2-mpi-pml-bench-$$
trap 'rm -rf "$TMP" /dev/shm/$SHM /dev/shm/$SHM.* /dev/shm/$SHM-*' EXIT

# A real adapter if there is one, else softverbs. pml ucx's ranks get the
# transport library in the same LD_PRELOAD as the device's library
# (mpirun's -x LD_PRELOAD replaces the one softverbs-run sets); p2p, under
# pml ib2, loads it itself from P2P_UCT_IB2.
if compgen -G '/sys/class/infiniband/*' >/dev/null; then
    RUNNER=()
    DEVICE="the machine's RDMA device"
    PRELOAD=$IB2_LIB
elif [[ ",$TLS," == *,rc_ib2,* ]]; then
    RUNNER=("$SV_RUN" --shm "$SHM")
    DEVICE="softverbs (software RDMA device: no adapter on this machine)"
    sv_preload=$("$SV_RUN" --print-env | sed -n 's/^LD_PRELOAD=//p')
    PRELOAD="${sv_preload// /:}:$IB2_LIB"
fi

MPI_COMMON=(--allow-run-as-root --bind-to "$BIND" -np 2)
ompi_dir=$(ompi_info --parsable --path pkglibdir |
           sed -n 's/^path:pkglibdir://p')
IB2_MCA=(--mca pml ib2 --mca btl self
         -x "OMPI_MCA_mca_base_component_path=$PML_DIR:$ompi_dir"
         -x "LD_LIBRARY_PATH=$BUILD/src/p2p/.libs:$BUILD/src/reg_cache/.libs")
UCX_MCA=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
         --mca btl self)
# rc_ib2 as a user runs it, with what contrib/ib2-env.sh adds (UCP's
# rendezvous thresholds; p2p follows UCX_RNDV_THRESH too)
mapfile -t RC_UCX_ENV < <("$HERE/../../ib2-env.sh" --print-defaults)
# and the device parameter file as installed (a build tree has none)
RC_UCX_ENV=(UCX_TLS=rc_ib2,ud_verbs:aux "${RC_UCX_ENV[@]}"
            "UCX_IB2_DEVICE_PARAMS=$(cd "$HERE/../../.." && pwd)/src/uct_ib2/ib2-device-params.ini")

# config_args PML TRANSPORT: mpirun arguments of a configuration, one a line
config_args() {
    local a
    case $1/$2 in
    ob1/shm)    printf '%s\n' --mca pml ob1 --mca btl vader,self ;;
    ob1/rc_ib2) printf '%s\n' --mca pml ob1 --mca btl openib,self \
                    --mca btl_openib_allow_ib 1 \
                    --mca btl_openib_warn_no_device_params_found 0 ;;
    ib2/*)      printf '%s\n' "${IB2_MCA[@]}" ;;
    ucx/*)      printf '%s\n' "${UCX_MCA[@]}" ;;
    esac
    case $1/$2 in
    ib2/shm|ucx/shm) printf -- '-x\nUCX_TLS=shm\n' ;;
    ib2/rc_ib2|ucx/rc_ib2)
        for a in "${RC_UCX_ENV[@]}"; do printf -- '-x\n%s\n' "$a"; done ;;
    esac
    case $1/$2 in
    ib2/rc_ib2) printf -- '-x\nP2P_UCT_IB2=%s\n' "$IB2_LIB" ;;
    ucx/rc_ib2) printf -- '-x\nLD_PRELOAD=%s\n' "$PRELOAD" ;;
    esac
}

# run_mpi PML TRANSPORT LOG [MPIRUN_ARGS...] -- [BENCH_ARGS...]
run_mpi() {
    local pml=$1 tl=$2 log=$3 args extra=() runner=()
    shift 3
    while [ $# -gt 0 ] && [ "$1" != -- ]; do extra+=("$1"); shift; done
    shift
    mapfile -t args < <(config_args "$pml" "$tl")
    [ "$tl" = rc_ib2 ] && runner=("${RUNNER[@]}")
    local rc=0
    timeout "$RUN_TIMEOUT" "${runner[@]}" "$MPIRUN" "${MPI_COMMON[@]}" \
        "${args[@]}" "${extra[@]}" "$BENCH" "$@" >"$log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        [ $rc -ne 124 ] ||
            echo "mpi_pml_bench: pml $pml over $tl took more than" \
                 "$RUN_TIMEOUT s (-T)" >&2
        echo "mpi_pml_bench: pml $pml over $tl failed (mpirun" \
             "${MPI_COMMON[*]} ${args[*]} ${extra[*]} $BENCH $*):" >&2
        tail -n 30 "$log" >&2
        exit 1
    fi
}

CONFIGS=()   # "PML TRANSPORT", transports outer
for t in "${tl_list[@]}"; do
    for p in "${pml_list[@]}"; do CONFIGS+=("$p $t"); done
done

# ---- which transports carry the messages ---------------------------------
echo "MPI ping-pong and streaming bandwidth, 2 ranks: pml ${PMLS//,/, pml }" \
     "($(ompi_info --version 2>/dev/null | head -n 1))"
[ -n "${DEVICE:-}" ] && echo "verbs device: $DEVICE"
echo "configurations:"
for c in "${CONFIGS[@]}"; do
    read -r p t <<<"$c"
    mapfile -t args < <(config_args "$p" "$t")
    line="mpirun ${MPI_COMMON[*]} ${args[*]}"
    [ -n "${PRELOAD:-}" ] && line=${line//$PRELOAD/\$PRELOAD}
    printf '  %-10s %s\n' "$p/$t:" "$line"
done
[ -n "${PRELOAD:-}" ] && echo "  (PRELOAD=$PRELOAD)"
echo "transports between the two ranks (a verbose run of each):"
for c in "${CONFIGS[@]}"; do
    read -r p t <<<"$c"
    log=$TMP/check-$p-$t.log
    if [ "$p" = ob1 ]; then
        run_mpi "$p" "$t" "$log" --mca btl_base_verbose 100 -- \
            -s 8 -b 1 -n 10 -w 2
        used=$(grep -Eo 'Using [a-z0-9]+ btl for send to \[\[[0-9]+,[0-9]+\],[0-9]+\]' \
               "$log" | sort -u)
        btl=vader
        [ "$t" = rc_ib2 ] && btl=openib
        # each rank reaches the other through the BTL meant, itself
        # through self
        if [ "$(grep -c "Using $btl btl" <<<"$used")" -ne 2 ] ||
                grep -v "Using \($btl\|self\) btl" <<<"$used" | grep -q .
        then
            echo "mpi_pml_bench: ob1/$t: the ranks did not talk over the" \
                 "$btl BTL; ob1 said:" >&2
            echo "${used:-(nothing)}" >&2
            exit 1
        fi
        sed 's/^/  ob1\/'"$t"': /' <<<"$used"
    else
        # UCP names each endpoint configuration's lanes at info level
        # (for pml ib2, those of p2p's endpoints)
        run_mpi "$p" "$t" "$log" -x UCX_LOG_LEVEL=info -- -s 8 -b 1 -n 10 \
            -w 2
        lanes=$(grep -o 'ep_cfg\[[0-9]*\]: .*' "$log" | sort -u)
        if [ "$t" = rc_ib2 ]; then
            ok_re='rc_ib2/'
            bad_re='(posix|sysv|cma|xpmem|knem|tcp|rc_verbs|rc_mlx5|dc_mlx5|self)/'
        else
            ok_re='(posix|sysv|cma|xpmem|knem)/'
            bad_re='(tcp|rc_ib2|rc_verbs|ud_verbs|rc_mlx5|ud_mlx5|dc_mlx5)/'
        fi
        if ! grep -Eq "$ok_re" <<<"$lanes" || grep -Eq "$bad_re" <<<"$lanes"
        then
            echo "mpi_pml_bench: $p/$t: the ranks did not talk over $t" \
                 "alone; UCP's lanes:" >&2
            echo "${lanes:-(none printed)}" >&2
            exit 1
        fi
        sed 's/^/  '"$p\/$t"': UCP /' <<<"$lanes"
    fi
done

# ---- the rounds ------------------------------------------------------------
bench_args=(-m both -s "$SIZES")
[ -n "$BATCHES" ] && bench_args+=(-b "$BATCHES")
[ -n "$ITERS" ] && bench_args+=(-n "$ITERS")
[ -n "$WINDOW" ] && bench_args+=(-W "$WINDOW")
[ -n "$WINDOWS" ] && bench_args+=(-N "$WINDOWS")
echo "$ROUNDS rounds, configurations alternating (ABBA):" \
     "mpi_pingpong ${bench_args[*]}"
echo "load before: $(uptime | sed 's/.*load/load/')"
start=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
    order=("${CONFIGS[@]}")
    if [ $((r % 2)) -eq 0 ]; then   # even rounds run in reverse order
        order=()
        for ((i = ${#CONFIGS[@]} - 1; i >= 0; i--)); do
            order+=("${CONFIGS[i]}")
        done
    fi
    for c in "${order[@]}"; do
        read -r p t <<<"$c"
        printf '  round %d/%d: pml %s over %s\n' "$r" "$ROUNDS" "$p" "$t" >&2
        run_mpi "$p" "$t" "$TMP/run.log" -- "${bench_args[@]}"
        # round bytes latency_us(median batch) latency_us(p10 round trip)
        awk -v r="$r" '$1 ~ /^[0-9]+$/ && NF == 6 { print r, $1, $3, $5 }' \
            "$TMP/run.log" >>"$TMP/lat-$p-$t"
        # round bytes MB/s(median batch)
        awk -v r="$r" '$1 == "bw" && NF == 6 { print r, $2, $5 }' \
            "$TMP/run.log" >>"$TMP/bw-$p-$t"
        n=$(tr , '\n' <<<"$SIZES" | wc -l)
        if [ "$(awk -v r="$r" '$1 == r' "$TMP/lat-$p-$t" | wc -l)" -ne "$n" ] ||
           [ "$(awk -v r="$r" '$1 == r' "$TMP/bw-$p-$t" | wc -l)" -ne "$n" ]
        then
            echo "mpi_pml_bench: pml $p over $t did not print a latency" \
                 "and a bandwidth for each of the $n sizes:" >&2
            cat "$TMP/run.log" >&2
            exit 1
        fi
    done
done
echo "load after:  $(uptime | sed 's/.*load/load/') ($(( $(date +%s) - start )) s)"

# ---- the tables ------------------------------------------------------------
# medians FILE COLUMN: "bytes median" per size, in size order, over rounds
medians() {
    awk -v col="$2" '
        { if (!($2 in n)) order[++k] = $2
          v[$2, ++n[$2]] = $col }
        END { for (i = 1; i <= k; i++) {
                  s = order[i]; c = n[s]; delete a
                  for (j = 1; j <= c; j++) a[j] = v[s, j] + 0
                  for (j = 1; j <= c; j++) for (m = j + 1; m <= c; m++)
                      if (a[m] < a[j]) { t = a[j]; a[j] = a[m]; a[m] = t }
                  printf "%s %.4f\n", s,
                         (c % 2) ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2
              } }' "$1"
}
for c in "${CONFIGS[@]}"; do
    read -r p t <<<"$c"
    medians "$TMP/lat-$p-$t" 3 >"$TMP/m-lat-$p-$t"
    medians "$TMP/lat-$p-$t" 4 >"$TMP/m-p10-$p-$t"
    medians "$TMP/bw-$p-$t" 3 >"$TMP/m-bw-$p-$t"
done

has_pml() { [[ ",$PMLS," == *,$1,* ]]; }
ratios=()
has_pml ib2 && has_pml ucx && ratios+=(ucx)
has_pml ib2 && has_pml ob1 && ratios+=(ob1)

# table TRANSPORT: one line per size, latency and bandwidth side by side
table() {
    local t=$1 p files=() hdr
    for p in "${pml_list[@]}"; do
        files+=("$TMP/m-lat-$p-$t" "$TMP/m-bw-$p-$t")
    done
    hdr=$(printf '%9s |' bytes)
    for p in "${pml_list[@]}"; do hdr+=$(printf ' %9s' "$p"); done
    for p in "${ratios[@]}"; do hdr+=$(printf ' %7s' "ib2/$p"); done
    hdr+=' |'
    for p in "${pml_list[@]}"; do hdr+=$(printf ' %9s' "$p"); done
    for p in "${ratios[@]}"; do hdr+=$(printf ' %7s' "ib2/$p"); done
    echo "$hdr"
    awk -v pmls="${pml_list[*]}" -v ratios="${ratios[*]}" '
        BEGIN { np = split(pmls, pm, " "); nr = split(ratios, rt, " ") }
        FNR == 1 { fi++ }
        { f = int((fi - 1) / 2) + 1; kind = (fi - 1) % 2
          if (!($1 in seen)) { seen[$1] = 1; sz[++ns] = $1 }
          val[kind, pm[f], $1] = $2 }
        END { for (i = 1; i <= ns; i++) { s = sz[i]
                  printf "%9d |", s
                  for (k = 0; k <= 1; k++) {
                      for (j = 1; j <= np; j++)
                          printf (k ? " %9.1f" : " %9.3f"), val[k, pm[j], s]
                      # a ratio to nothing (a loaded machine can make a
                      # small size'"'"'s bandwidth round to 0.0) is "-"
                      for (j = 1; j <= nr; j++)
                          if (val[k, rt[j], s] > 0)
                              printf " %7.2f", val[k, "ib2", s] / val[k, rt[j], s]
                          else
                              printf " %7s", "-"
                      printf (k ? "\n" : " |")
                  } } }' "${files[@]}"
}

echo
echo "Medians of $ROUNDS rounds: latency in us (half a round trip, each" \
     "run's median batch), streaming bandwidth in MB/s (10^6 B/s, each" \
     "run's median batch)."
echo "A latency ratio below 1.00 and a bandwidth ratio above 1.00: pml ib2" \
     "is ahead."
for t in "${tl_list[@]}"; do
    echo
    # what each PML of the table runs on
    how=()
    for p in "${pml_list[@]}"; do
        case $p/$t in
        ob1/shm)    how+=("pml ob1: btl vader") ;;
        ob1/rc_ib2) how+=("pml ob1: btl openib on the same device") ;;
        */shm)      how+=("pml $p: UCX_TLS=shm") ;;
        *)          how+=("pml $p: UCX_TLS=rc_ib2,ud_verbs:aux") ;;
        esac
    done
    if [ "$t" = shm ]; then
        echo "over shared memory"
    else
        echo "over rc_ib2 on $DEVICE"
    fi
    (IFS=';'; echo "(${how[*]})" | sed 's/;/; /g')
    printf '%9s | %-*s | %s\n' "" \
        $(( ${#pml_list[@]} * 10 + ${#ratios[@]} * 8 - 1 )) \
        "latency (us)" "bandwidth (MB/s)"
    table "$t"
done

# ---- the targets -----------------------------------------------------------
# pml ib2 against pml ucx on each transport: 8-byte latency ratio of the
# medians (and the range of single rounds' ratios), bandwidth ratios at
# 1 MiB and above (the smallest of them).
if has_pml ib2 && has_pml ucx; then
    echo
    echo "Targets, pml ib2 against pml ucx on the same transport:"
    for t in "${tl_list[@]}"; do
        awk -v t="$t" '
            FILENAME ~ /\/lat-ib2-/ && $2 == 8 { li[$1] = $3 }
            FILENAME ~ /\/lat-ucx-/ && $2 == 8 { lu[$1] = $3 }
            FILENAME ~ /\/m-lat-ib2-/ && $1 == 8 { mi = $2 }
            FILENAME ~ /\/m-lat-ucx-/ && $1 == 8 { mu = $2 }
            FILENAME ~ /\/m-p10-ib2-/ && $1 == 8 { pi = $2 }
            FILENAME ~ /\/m-p10-ucx-/ && $1 == 8 { pu = $2 }
            FILENAME ~ /\/m-bw-ib2-/ && $1 >= 1048576 { bi[$1] = $2 }
            FILENAME ~ /\/m-bw-ucx-/ && $1 >= 1048576 { bu[$1] = $2 }
            END {
                if (mi == "" || mu == "") {
                    printf "  %-6s 8-byte latency: not measured (8 is not" \
                           " among the sizes)\n", t ":"
                } else {
                    lo = 1e30; hi = 0
                    for (r in li) if ((r in lu) && lu[r] > 0) {
                        q = li[r] / lu[r]; if (q < lo) lo = q; if (q > hi) hi = q }
                    q = (mu > 0) ? mi / mu : 1e30
                    printf "  %-6s 8-byte latency  ib2/ucx %.2f (rounds %.2f-%.2f;" \
                           " 10th percentile of round trips %.2f): %s (at most 1.10)\n",
                           t ":", q, lo, hi, (pu > 0) ? pi / pu : 1e30,
                           (q <= 1.10) ? "met" : "NOT met"
                }
                n = 0; worst = 1e30
                for (s in bi) if (s in bu) {
                    n++; q = (bu[s] > 0) ? bi[s] / bu[s] : 1e30
                    if (q < worst) { worst = q; ws = s }
                }
                if (n == 0) {
                    printf "  %-6s bandwidth >= 1 MiB: not measured (no size" \
                           " of 1 MiB or more)\n", t ":"
                } else {
                    printf "  %-6s bandwidth >= 1 MiB ib2/ucx at least %.2f" \
                           " (%d sizes, lowest at %d bytes): %s (at least 0.95)\n",
                           t ":", worst, n, ws, (worst >= 0.95) ? "met" : "NOT met"
                }
            }' "$TMP/lat-ib2-$t" "$TMP/lat-ucx-$t" "$TMP/m-lat-ib2-$t" \
               "$TMP/m-lat-ucx-$t" "$TMP/m-p10-ib2-$t" "$TMP/m-p10-ucx-$t" \
               "$TMP/m-bw-ib2-$t" "$TMP/m-bw-ucx-$t"
    done
fi

# ---- the plot --------------------------------------------------------------
# plot_table KIND OUT: the medians of every configuration as columns
plot_table() {
    local kind=$1 out=$2 c p t name hdr=bytes files=()
    for c in "${CONFIGS[@]}"; do
        read -r p t <<<"$c"
        name=$t
        [ "$p/$t" = ob1/shm ] && name=vader
        [ "$p/$t" = ob1/rc_ib2 ] && name=openib
        hdr+=" pml_$p/$name"
        files+=("$TMP/m-$kind-$p-$t")
    done
    echo "$hdr" >"$out"
    awk -v nf=${#files[@]} '
        FNR == 1 { fi++ }
        { if (!($1 in seen)) { seen[$1] = 1; sz[++ns] = $1 }
          val[fi, $1] = $2 }
        END { for (i = 1; i <= ns; i++) { line = sz[i]
                  for (f = 1; f <= nf; f++)
                      line = line " " (((f, sz[i]) in val) ? val[f, sz[i]] : "-")
                  print line } }' "${files[@]}" >>"$out"
}
if [ -n "$PLOT" ]; then
    plot_table lat "$PLOT-latency.txt"
    plot_table bw "$PLOT-bandwidth.txt"
    "$HERE/mpi_plot.sh" -t "Open MPI, 2 ranks, pml ${PMLS//,/, }: medians of $ROUNDS rounds" \
        "$PLOT.png" "$PLOT-latency.txt" "$PLOT-bandwidth.txt"
    echo
    echo "plot: $PLOT.png (tables: $PLOT-latency.txt, $PLOT-bandwidth.txt)"
fi
