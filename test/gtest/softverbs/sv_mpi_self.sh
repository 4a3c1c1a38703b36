#!/usr/bin/env bash
#
# Runs sv_mpi_self (mpi4py's testManyISendAndRecv reduced to C) with two
# ranks under Open MPI's pml ucx on the softverbs device, with UCX's
# transports limited to TL (and ud_verbs for wire-up), and checks from
# UCX's log that the ranks' endpoints, the one to itself included, use TL.
#
#   sv_mpi_self.sh BUILD_DIR TL [VAR=VALUE ...] -- [sv_mpi_self options]
#
#   TL          rc_verbs, or rc_ib2 (then libuct_ib2 is preloaded too)
#   VAR=VALUE   more environment for the ranks (e.g. UCX_RC_TX_POLL_ALWAYS=y)
#
# Variables of the caller (UCX_*, OMPI_*, SOFTVERBS_*) are cleared. The exit
# status is sv_mpi_self's, or 1 if the endpoints used another transport,
# 2 for bad arguments.
set -uo pipefail

die() { echo "sv_mpi_self.sh: $*" >&2; exit 2; }

[ $# -ge 3 ] ||
    die "usage: sv_mpi_self.sh BUILD_DIR TL [VAR=VALUE ...] -- [options]"
build=$(cd "$1" 2>/dev/null && pwd) || die "no build directory $1"
tl=$2
shift 2
env_args=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    [[ $1 == [A-Z]*=* ]] || die "\"$1\" is not VAR=VALUE"
    env_args+=(-x "$1")
    shift
done
[ "${1:-}" = -- ] || die "give -- before sv_mpi_self's options"
shift

prog=$build/test/gtest/softverbs/sv_mpi_self
sv_run=$build/contrib/softverbs/softverbs-run
ib2_lib=$build/src/uct_ib2/.libs/libuct_ib2.so
for f in "$prog" "$sv_run"; do
    [ -x "$f" ] || die "$f is not built (contrib/setup.sh build)"
done
for v in $(compgen -e | grep '^UCX_\|^OMPI_\|^SOFTVERBS_'); do unset "$v"; done

preload=$("$sv_run" --print-env | sed -n 's/^LD_PRELOAD=//p')
preload=${preload// /:}
case $tl in
rc_verbs) ;;
rc_ib2)
    [ -f "$ib2_lib" ] || die "$ib2_lib is not built (contrib/setup.sh build)"
    preload="$preload:$ib2_lib" ;;
*) die "TL \"$tl\": give rc_verbs or rc_ib2" ;;
esac

shm=sv-mpi-self-$$
out=$(mktemp)
trap 'rm -rf "$out" "/dev/shm/$shm" "/dev/shm/$shm".* "/dev/shm/$shm"-*' EXIT

timeout 240 "$sv_run" --shm "$shm" mpirun --allow-run-as-root \
    --bind-to none -np 2 --mca pml ucx --mca pml_ucx_tls any \
    --mca pml_ucx_devices any --mca btl self \
    -x LD_PRELOAD="$preload" -x UCX_TLS="$tl,ud_verbs:aux" \
    -x UCX_LOG_LEVEL=info "${env_args[@]}" "$prog" "$@" >"$out" 2>&1
rc=$?
cat "$out"
# UCP names each endpoint configuration's lanes at info level
lanes=$(grep -o 'ep_cfg\[[0-9]*\]: .*' "$out" | sort -u)
if [ -z "$lanes" ] || grep -v "^ep_cfg\[[0-9]*\]: tag($tl/" <<<"$lanes" |
        grep -q .; then
    echo "sv_mpi_self.sh: the endpoints did not use $tl alone:" \
         "${lanes:-(no lanes printed)}" >&2
    exit 1
fi
exit $rc
