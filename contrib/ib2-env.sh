#!/bin/sh
#
# Makes UCX 1.13 .. 1.21 load the ib2 transport (libuct_ib2.so), which
# these versions only do when the library is preloaded. (UCX >= 1.22 finds
# libuct_ib2.so.0 in a UCX_PLUGIN_PATH directory instead.)
#
#   contrib/ib2-env.sh [--lib PATH] COMMAND [ARGS...]   run COMMAND with it
#   . contrib/ib2-env.sh [--lib PATH]                    in this shell
#
#   contrib/ib2-env.sh --print-defaults   the UCX settings it adds, one a line
#
# The library is PATH, else $IB2_LIB, else the build tree next to this
# script (build/src/uct_ib2/.libs), else the installed one.
#
# It also sets UCP's rendezvous thresholds to 32k unless the caller has set
# them. UCP sends a blocking standard send (Open MPI's pml ucx MPI_Send,
# through ucp_tag_send_nbr) as an eager copy up to UCX_RNDV_SEND_NBR_THRESH,
# 256 KiB by default whatever the transport reports, and a nonblocking one
# (MPI_Isend) in eager zero-copy fragments up to UCX_RNDV_THRESH, which UCP
# computes from the number of processes per node (89 KiB with 2); from
# 32 KiB a rendezvous (one RDMA READ) is faster on RDMA devices: 64 KiB
# ping-pong 0.92x of ob1 with the openib BTL instead of 3.3x with MPI_Send,
# and about 1.0x instead of 3.6-4.4x with MPI_Isend, over rc_verbs as over
# rc_ib2 (docs/uct_ib2.md, "MPI ping-pong"). It changes only these
# thresholds, for every UCX transport of the process.
#
# Sourced, it sees the caller's positional parameters: a script that
# sources it should do so with none (`set --` first), or they are taken as
# the options and COMMAND above.
#
ib2_nbr_thresh=32k
ib2_lib=${IB2_LIB:-}
while [ $# -gt 0 ]; do
    case $1 in
    --print-defaults)
        echo "UCX_RNDV_SEND_NBR_THRESH=$ib2_nbr_thresh"
        echo "UCX_RNDV_THRESH=$ib2_nbr_thresh"
        return 0 2>/dev/null || exit 0 ;;
    --lib)
        if [ $# -lt 2 ]; then
            echo "ib2-env.sh: --lib needs a path" >&2
            return 2 2>/dev/null || exit 2
        fi
        ib2_lib=$2
        shift 2 ;;
    *)
        break ;;
    esac
done
if [ -z "$ib2_lib" ]; then
    ib2_here=$(cd "$(dirname "$0")" 2>/dev/null && pwd)
    for ib2_try in "$ib2_here/../build/src/uct_ib2/.libs/libuct_ib2.so" \
                   "$ib2_here/../lib/libuct_ib2.so" \
                   /usr/local/lib/libuct_ib2.so /usr/lib/libuct_ib2.so; do
        if [ -f "$ib2_try" ]; then
            ib2_lib=$ib2_try
            break
        fi
    done
fi
if [ -z "$ib2_lib" ] || [ ! -f "$ib2_lib" ]; then
    echo "ib2-env.sh: libuct_ib2.so not found${ib2_lib:+ at $ib2_lib}: build" \
         "it (contrib/setup.sh build) or give --lib PATH" >&2
    return 1 2>/dev/null || exit 1
fi
LD_PRELOAD="$ib2_lib${LD_PRELOAD:+ $LD_PRELOAD}"
export LD_PRELOAD
UCX_RNDV_SEND_NBR_THRESH=${UCX_RNDV_SEND_NBR_THRESH:-$ib2_nbr_thresh}
export UCX_RNDV_SEND_NBR_THRESH
UCX_RNDV_THRESH=${UCX_RNDV_THRESH:-$ib2_nbr_thresh}
export UCX_RNDV_THRESH
if [ $# -gt 0 ]; then
    exec "$@"
fi
