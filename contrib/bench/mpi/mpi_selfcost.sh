#!/usr/bin/env bash
#
# Instructions per message of a PML, counted with callgrind (which, unlike
# wall-clock time, does not depend on the machine's load): mpi_selfcost
# sends N messages to itself (MPI_Send then MPI_Recv, or -i: MPI_Irecv
# first), run with two counts; the difference over the extra messages is
# what one message costs, split by where the instructions run.
#
#   contrib/bench/mpi/mpi_selfcost.sh BUILD_DIR [SIZE] [-i]
#
# Both PMLs get UCX_TLS=self,shm: pml ucx sends to itself over UCP's self
# transport; p2p (pml ib2) asks UCP for peer error handling, which self
# does not give, and goes over shared memory.
set -euo pipefail
BUILD=$(cd "${1:?usage: mpi_selfcost.sh BUILD_DIR [SIZE] [-i]}" && pwd)
SIZE=${2:-8}
PRE=${3:-}
BIN=$BUILD/contrib/bench/mpi/mpi_selfcost
[ -x "$BIN" ] || { echo "mpi_selfcost.sh: $BIN not built" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "mpi_selfcost.sh: needs valgrind" >&2
                                    exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
N1=${MPI_SELFCOST_N1:-2000}   # the two runs' message counts
N2=${MPI_SELFCOST_N2:-12000}
[ "$N2" -gt "$N1" ] 2>/dev/null ||
    { echo "mpi_selfcost.sh: MPI_SELFCOST_N2 must exceed MPI_SELFCOST_N1" >&2
      exit 2; }

pml_args() {   # pml_args PML
    case $1 in
    ib2) echo --mca pml ib2 --mca btl self \
              -x OMPI_MCA_mca_base_component_path="$BUILD/src/pml_ib2/component:$(
                  ompi_info --path libdir --parsable | cut -d: -f3)/openmpi3" \
              -x LD_LIBRARY_PATH="$BUILD/src/p2p/.libs:$BUILD/src/reg_cache/.libs" ;;
    ucx) echo --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
              --mca btl self ;;
    esac
}

# count PML N: callgrind output of one run
count() {
    # shellcheck disable=SC2046
    UCX_TLS=self,shm timeout 600 mpirun --allow-run-as-root -np 1 \
        $(pml_args "$1") -x UCX_TLS valgrind --tool=callgrind \
        --callgrind-out-file="$TMP/$1-$2.out" "$BIN" -n "$2" -s "$SIZE" \
        $PRE >"$TMP/$1-$2.log" 2>&1 ||
        { echo "mpi_selfcost.sh: pml $1 failed:" >&2
          tail -n 20 "$TMP/$1-$2.log" >&2; exit 1; }
}

# by_object FILE: "total pml p2p ucx mpi libc" instructions
by_object() {
    callgrind_annotate --auto=no --threshold=100 "$1" 2>/dev/null | awk '
        / PROGRAM TOTALS/ { t = $1; gsub(",", "", t) }
        /\[.*\]$/ { x = $1; gsub(",", "", x)
            if ($0 ~ /mca_pml_ib2|mca_pml_ucx/) pml += x
            else if ($0 ~ /libib2_p2p|libib2_rcache/) p2p += x
            else if ($0 ~ /libuc[pts]|libucm/) ucx += x
            else if ($0 ~ /libmpi|libopen-pal|libopen-rte/) mpi += x
            else if ($0 ~ /libc\.so/) libc += x }
        END { print t + 0, pml + 0, p2p + 0, ucx + 0, mpi + 0, libc + 0 }'
}

echo "instructions per ${SIZE}-byte message to itself" \
     "(${PRE:+MPI_Irecv first, }callgrind, ($N2 - $N1) messages)"
printf '%-8s %9s %9s %9s %9s %9s %9s\n' pml total pml p2p ucx \
    mpi+opal libc
for pml in ib2 ucx; do
    count $pml $N1
    count $pml $N2
    read -r -a a <<<"$(by_object "$TMP/$pml-$N1.out")"
    read -r -a b <<<"$(by_object "$TMP/$pml-$N2.out")"
    printf '%-8s' "$pml"
    for k in 0 1 2 3 4 5; do
        awk -v x="${a[$k]}" -v y="${b[$k]}" -v n=$((N2 - N1)) \
            'BEGIN { printf " %9.1f", (y - x) / n }'
    done
    echo
done
