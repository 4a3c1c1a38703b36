#!/usr/bin/env bash
#
# An MPI ping-pong (mpi_pingpong, two ranks) through Open MPI's pml ucx
# over the rc_ib2 transport, next to Open MPI's ob1 with the openib BTL on
# the same verbs device -- softverbs where the machine has no adapter. The
# configurations alternate round by round (ABBA order, so neither always
# runs first). Each run reports per size the median of its short batches
# and the 10th percentile of its single round trips; the tables give, per
# size, the median over the rounds of each, the ratio to openib, and the
# range of the per-round ratios. On a machine loaded by other work the
# busy-polling ranks often wait for a core: the median batch then shows
# what the load leaves, the percentile what the protocols cost while both
# ranks run.
#
# Before the rounds, one short verbose run of each configuration shows
# which transports carry the messages between the two ranks; the script
# stops if that is not rc_ib2 (pml ucx) or openib (ob1), e.g. if shared
# memory took over. It also prints UCP's protocol ranges (ucx_info) for
# each pml ucx configuration: tag_send_nbr is what MPI_Send uses.
#
#   contrib/bench/mpi/mpi_vs_openib.sh [options] BUILD_DIR
#     -r ROUNDS   rounds (default 5)
#     -s SIZES    message sizes for mpi_pingpong -s (default 8,1k,64k,1m,4m)
#     -b BATCHES  timed batches per size in each run (default mpi_pingpong's)
#     -n ITERS    ping-pongs per batch (default: mpi_pingpong's)
#     -B BINDING  mpirun --bind-to BINDING (default core: each rank on a
#                 core of its own where there are two; "none" lets the
#                 scheduler place them, and under load it at times puts
#                 both on one core, where every message then waits for the
#                 waiting rank to yield its core)
#     -i          send with MPI_Isend + MPI_Wait (mpi_pingpong -i) instead
#                 of MPI_Send: pml ucx then takes UCP's ucp_tag_send_nb
#                 protocols instead of ucp_tag_send_nbr's
#     -u 'NAME VAR=VALUE ...'
#                 one more pml ucx over rc_ib2 configuration (UCX's
#                 defaults, without what contrib/ib2-env.sh adds), with these
#                 environment variables for the ranks (repeatable); with
#                 UCX_TLS among them, over its first transport instead
#                 (e.g. 'rc_verbs UCX_TLS=rc_verbs,ud_verbs:aux')
#     -o 'NAME PARAM=VALUE ...'
#                 one more ob1 + openib configuration, with these MCA
#                 parameters (repeatable)
#
# Variables of the caller (UCX_*, OMPI_*, SOFTVERBS_*) are cleared: only
# what the options say changes what is measured.
#
set -euo pipefail

usage() { sed -n '/^#   contrib/,/^# Variables/p' "$0" | sed 's/^# \{0,1\}//' |
          sed '$d'; }

ROUNDS=5
SIZES=8,1k,64k,1m,4m
BATCHES=
ITERS=
ISEND=
BIND=
EXTRA_UCX=()
EXTRA_OB1=()
while getopts "r:s:b:n:B:iu:o:h" opt; do
    case $opt in
    r) ROUNDS=$OPTARG ;;
    s) SIZES=$OPTARG ;;
    b) BATCHES=$OPTARG ;;
    n) ITERS=$OPTARG ;;
    i) ISEND=-i ;;
    B) BIND=$OPTARG ;;
    u) EXTRA_UCX+=("$OPTARG") ;;
    o) EXTRA_OB1+=("$OPTARG") ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { usage >&2; exit 2; }
BUILD=$(cd "$1" && pwd)
case $ROUNDS in
''|*[!0-9]*|0) echo "mpi_vs_openib: -r: ROUNDS must be a positive number" >&2
               exit 2 ;;
esac

BENCH=$BUILD/contrib/bench/mpi/mpi_pingpong
IB2_LIB=$BUILD/src/uct_ib2/.libs/libuct_ib2.so
SV_RUN=$BUILD/contrib/softverbs/softverbs-run
MPIRUN=$(command -v mpirun) || {
    echo "mpi_vs_openib: mpirun not found: install openmpi-bin" >&2; exit 1; }
for f in "$BENCH" "$IB2_LIB" "$SV_RUN"; do
    [ -e "$f" ] || { echo "mpi_vs_openib: $f is missing: build first" \
                          "(contrib/setup.sh build)" >&2; exit 1; }
done

for v in $(compgen -e | grep '^UCX_\|^OMPI_\|^SOFTVERBS_'); do unset "$v"; done

TMP=$(mktemp -d)
SHM=ib2-mpi-bench-$$
trap 'rm -rf "$TMP" /dev/shm/$SHM /dev/shm/$SHM.* /dev/shm/$SHM-*' EXIT

# A real adapter if there is one, else softverbs. The ranks of pml ucx get
# the transport library in the same LD_PRELOAD as the device's library:
# mpirun's -x LD_PRELOAD would otherwise replace softverbs' preload.
if compgen -G '/sys/class/infiniband/*' >/dev/null; then
    RUNNER=()
    DEVICE="the machine's RDMA device"
    PRELOAD=$IB2_LIB
else
    RUNNER=("$SV_RUN" --shm "$SHM")
    DEVICE="softverbs (software RDMA device: no adapter on this machine)"
    sv_preload=$("$SV_RUN" --print-env | sed -n 's/^LD_PRELOAD=//p')
    PRELOAD="${sv_preload// /:}:$IB2_LIB"
fi

if [ -z "$BIND" ]; then
    BIND=core
    [ "$(nproc)" -ge 2 ] || BIND=none
fi
case $BIND in
none|core|hwthread|socket|numa|l3cache|l2cache) ;;
*) echo "mpi_vs_openib: -B: \"$BIND\": give none, core, hwthread, socket," \
        "numa, l2cache or l3cache" >&2; exit 2 ;;
esac
MPI_COMMON=(--allow-run-as-root --bind-to "$BIND" -np 2)
# pml ucx: UCX's transports are only rc_ib2 (and ud_verbs for wire-up);
# Open MPI's BTLs are limited to self, so nothing else is even opened.
UCX_TLS_DEFAULT=rc_ib2,ud_verbs:aux
UCX_MCA=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
         --mca btl self -x LD_PRELOAD="$PRELOAD")
OB1_MCA=(--mca pml ob1 --mca btl openib,self --mca btl_openib_allow_ib 1
         --mca btl_openib_warn_no_device_params_found 0)

# Configurations: "NAME|ucx|VAR=VALUE ..." or "NAME|ob1|PARAM=VALUE ...".
# rc_ib2 as a user runs it: with the UCX settings contrib/ib2-env.sh adds
# (a caller's -u configurations start from UCX's own defaults instead).
ib2_env_defaults=$("$(dirname "$0")/../../ib2-env.sh" --print-defaults | tr '\n' ' ')
CONFIGS=("openib|ob1|" "rc_ib2|ucx|$ib2_env_defaults")
for c in "${EXTRA_OB1[@]}"; do CONFIGS+=("${c%% *}|ob1|${c#"${c%% *}"}"); done
for c in "${EXTRA_UCX[@]}"; do CONFIGS+=("${c%% *}|ucx|${c#"${c%% *}"}"); done
names=()
for c in "${CONFIGS[@]}"; do
    n=${c%%|*}
    case $n in
    ''|*[!A-Za-z0-9_.+-]*)
        echo "mpi_vs_openib: configuration name \"$n\": use letters," \
             "digits and _.+- (first word of -u/-o)" >&2; exit 2 ;;
    esac
    for m in "${names[@]}"; do
        [ "$m" != "$n" ] || { echo "mpi_vs_openib: configuration name" \
                                   "\"$n\" given twice" >&2; exit 2; }
    done
    names+=("$n")
done

# config_args CONFIG: mpirun arguments of one configuration, one a line
config_args() {
    local kind rest a
    IFS='|' read -r _ kind rest <<<"$1"
    if [ "$kind" = ucx ]; then
        printf '%s\n' "${UCX_MCA[@]}"
        [[ " $rest" == *" UCX_TLS="* ]] ||
            printf -- '-x\nUCX_TLS=%s\n' "$UCX_TLS_DEFAULT"
        for a in $rest; do
            [[ $a == *=* ]] || { echo "mpi_vs_openib: -u: \"$a\" is not" \
                                      "VAR=VALUE" >&2; return 2; }
            printf -- '-x\n%s\n' "$a"
        done
    else
        printf '%s\n' "${OB1_MCA[@]}"
        for a in $rest; do
            [[ $a == *=* ]] || { echo "mpi_vs_openib: -o: \"$a\" is not" \
                                      "PARAM=VALUE" >&2; return 2; }
            printf -- '--mca\n%s\n%s\n' "${a%%=*}" "${a#*=}"
        done
    fi
}

# run_mpi CONFIG LOG [MPIRUN_ARGS...] -- [BENCH_ARGS...]
run_mpi() {
    local cfg=$1 log=$2 args extra=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do extra+=("$1"); shift; done
    shift
    mapfile -t args < <(config_args "$cfg")
    [ ${#args[@]} -gt 0 ] || exit 2
    if ! timeout 600 "${RUNNER[@]}" "$MPIRUN" "${MPI_COMMON[@]}" \
            "${args[@]}" "${extra[@]}" "$BENCH" "$@" >"$log" 2>&1; then
        echo "mpi_vs_openib: ${cfg%%|*} failed (mpirun ${args[*]}" \
             "${extra[*]} $BENCH $*):" >&2
        tail -n 30 "$log" >&2
        exit 1
    fi
}

# ---- which transports carry the ping-pong --------------------------------
echo "MPI ping-pong, 2 ranks: pml ucx over rc_ib2 vs ob1 + openib BTL"
echo "verbs device: $DEVICE"
echo "configurations:"
for c in "${CONFIGS[@]}"; do
    mapfile -t args < <(config_args "$c")
    echo "  ${c%%|*}: mpirun ${MPI_COMMON[*]} ${args[*]//$PRELOAD/\$PRELOAD}"
done
echo "  (PRELOAD=$PRELOAD)"
echo "transports between the two ranks (a verbose run of each):"
shm_re='posix|sysv|cma|xpmem|knem|self|tcp|vader|sm|mm'
for c in "${CONFIGS[@]}"; do
    name=${c%%|*}
    log=$TMP/check-$name.log
    if [ "$(cut -d'|' -f2 <<<"$c")" = ucx ]; then
        # UCP names each endpoint configuration's lanes at info level.
        run_mpi "$c" "$log" -x UCX_LOG_LEVEL=info -- -s 8 -b 1 -n 10 -w 2
        # the transport meant: the first of the configuration's UCX_TLS
        tls=$UCX_TLS_DEFAULT
        for a in $(cut -d'|' -f3 <<<"$c"); do
            [[ $a == UCX_TLS=* ]] && tls=${a#UCX_TLS=}
        done
        tl=${tls%%,*}
        lanes=$(grep -o 'ep_cfg\[[0-9]*\]: .*' "$log" | sort -u)
        if ! grep -q "$tl/" <<<"$lanes" ||
                grep -Eq "(^|[ (,;])($shm_re)/" <<<"$lanes"; then
            echo "mpi_vs_openib: $name: the ranks did not talk over" \
                 "$tl alone (shared memory, tcp and self are not" \
                 "allowed); UCP's lanes:" >&2
            echo "${lanes:-(none printed)}" >&2
            exit 1
        fi
        sed 's/^/  '"$name"': UCP /' <<<"$lanes"
        # UCP's protocol for each size range, for the same settings
        env UCX_TLS="$UCX_TLS_DEFAULT" $(cut -d'|' -f3 <<<"$c") \
            LD_PRELOAD="$IB2_LIB" timeout 120 "${RUNNER[@]}" \
            ucx_info -e -u t -D net 2>&1 | grep 'tag_send\(_nbr\)\?:' |
            sed 's/^# */  '"$name"': UCP /'
    else
        run_mpi "$c" "$log" --mca btl_base_verbose 100 -- -s 8 -b 1 -n 10 \
            -w 2
        used=$(grep -Eo 'Using [a-z0-9]+ btl for send to \[\[[0-9]+,[0-9]+\],[0-9]+\]' \
               "$log" | sort -u)
        # each rank reaches the other through openib, itself through self
        if [ "$(grep -c 'Using openib btl' <<<"$used")" -ne 2 ] ||
                grep -v 'Using \(openib\|self\) btl' <<<"$used" |
                grep -q .; then
            echo "mpi_vs_openib: $name: the ranks did not talk over the" \
                 "openib BTL; ob1 said:" >&2
            echo "${used:-(nothing)}" >&2
            exit 1
        fi
        sed 's/^/  '"$name"': ob1 /' <<<"$used"
    fi
done

# ---- the rounds ------------------------------------------------------------
bench_args=(-s "$SIZES")
[ -n "$BATCHES" ] && bench_args+=(-b "$BATCHES")
[ -n "$ITERS" ] && bench_args+=(-n "$ITERS")
[ -n "$ISEND" ] && bench_args+=("$ISEND")
echo "$ROUNDS rounds, configurations alternating (ABBA), mpi_pingpong" \
     "${bench_args[*]}"
echo "load before: $(uptime | sed 's/.*load/load/')"
for r in $(seq 1 "$ROUNDS"); do
    order=("${CONFIGS[@]}")
    if [ $((r % 2)) -eq 0 ]; then   # even rounds run in reverse order
        order=()
        for ((i = ${#CONFIGS[@]} - 1; i >= 0; i--)); do
            order+=("${CONFIGS[i]}")
        done
    fi
    for c in "${order[@]}"; do
        name=${c%%|*}
        printf '  round %d/%d: %s\n' "$r" "$ROUNDS" "$name" >&2
        run_mpi "$c" "$TMP/run.log" -- "${bench_args[@]}"
        # round bytes latency_us: median batch, best batch, p10 round trip
        awk -v r="$r" '$1 ~ /^[0-9]+$/ && NF == 6 { print r, $1, $3, $4, $5 }' \
            "$TMP/run.log" >>"$TMP/$name"
        grep -q . "$TMP/$name" || {
            echo "mpi_vs_openib: $name printed no numbers:" >&2
            cat "$TMP/run.log" >&2; exit 1; }
    done
done
echo "load after:  $(uptime | sed 's/.*load/load/')"

# ---- the tables ------------------------------------------------------------
# Each configuration against openib: median over the rounds per size, the
# ratio of the medians, and the lowest and highest ratio of one round's
# two runs.
table() {   # table COLUMN TITLE: 3 median batch, 4 best batch, 5 p10
    local hdr n
    echo
    echo "$2"
    hdr=$(printf '%9s %10s' bytes openib)
    for n in "${names[@]:1}"; do
        hdr+=$(printf ' | %10s %6s %11s' "$n" ratio "round range")
    done
    echo "$hdr"
    awk -v names="${names[*]}" -v dir="$TMP" -v col="$1" '
        function med(list,    v, n, i, j, t) {
            n = split(list, v, " ")
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
                if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
            return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        }
        BEGIN {
            nc = split(names, nm, " ")
            for (c = 1; c <= nc; c++) {
                f = dir "/" nm[c]
                while ((getline line < f) > 0) {
                    split(line, w, " ")
                    lat[c, w[2]] = lat[c, w[2]] " " w[col]
                    per[c, w[1], w[2]] = w[col]
                    if (!(w[2] in seen)) { seen[w[2]] = 1; sz[++ns] = w[2] }
                    if (w[1] > nr) nr = w[1]
                }
            }
            for (s = 1; s <= ns; s++) {
                b = sz[s]; base = med(lat[1, b])
                printf "%9d %10.3f", b, base
                for (c = 2; c <= nc; c++) {
                    m = med(lat[c, b]); lo = 1e30; hi = 0
                    for (r = 1; r <= nr; r++) {
                        if (!((c, r, b) in per) || !((1, r, b) in per))
                            continue
                        q = per[c, r, b] / per[1, r, b]
                        if (q < lo) lo = q
                        if (q > hi) hi = q
                    }
                    printf " | %10.3f %6.2f %5.2f-%-5.2f", m, m / base, lo, hi
                }
                printf "\n"
            }
        }'
}
table 3 "one-way latency, us (half a round trip): each run's median batch, median of $ROUNDS rounds"
table 5 "one-way latency, us: each run's 10th percentile of single round trips, median of $ROUNDS rounds"
echo "(ratio: configuration / openib; below 1.0 the configuration is faster)"
