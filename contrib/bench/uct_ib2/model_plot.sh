#!/usr/bin/env bash
# The memory model's plot in docs/uct_ib2.md: QPs and MiB per process from
# 64 to 131072 ranks at 64 processes per node, for Open MPI's openib default
# receive queues in P, S and X form and UCX rc_verbs' default receive queue,
# on a ConnectX adapter (ib2_info model --device connectx).
#
#   contrib/bench/uct_ib2/model_plot.sh BUILD_DIR [OUT.png]
#
# Needs gnuplot (Debian: gnuplot-nox). Default output: docs/uct_ib2_model.png
# of the source tree. The data tables are printed too.
set -eu
build=${1:?usage: model_plot.sh BUILD_DIR [OUT.png]}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
out=${2:-$top/docs/uct_ib2_model.png}
info=$build/src/uct_ib2/ib2_info
[ -x "$info" ] || { echo "model_plot.sh: $info not built" >&2; exit 1; }
command -v gnuplot >/dev/null ||
    { echo "model_plot.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2
      exit 1; }

# openib's compiled-in default (btl_openib_mca.c: a P queue for small
# messages, S queues of eager_limit/4 rounded to 2^n, eager_limit and
# max_send_size); UCX rc_verbs: one SRQ of RX_QUEUE_LEN 4096 segments of
# SEG_SIZE 8192 bytes, and its QPs' smaller send WQEs (TX_MIN_SGE 5,
# TX_MIN_INLINE 64: 48 + 80 bytes on mlx5, where rc_ib2 asks for the
# device's gather list and 256 bytes inline: 576).
openib=P,128,256,192,128:S,2048,1024,1008,64:S,12288,1024,1008,64:S,65536,1024,1008,64
rcverbs=S,8192,4096
ppn=64
budget=1024

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$info" model --sweep 64:131072 --ppn $ppn --rq "$openib" --forms GPSX \
    --budget $budget >"$tmp/openib.dat"
"$info" model --sweep 64:131072 --ppn $ppn --rq "$rcverbs" --forms S \
    --budget $budget --sq-wqe 128 >"$tmp/rcverbs.dat"
max_qp=$(sed -n 's/^# device .* max_qp \([0-9]*\).*/\1/p' "$tmp/openib.dat")
cat "$tmp/openib.dat" "$tmp/rcverbs.dat"
gnuplot -e "openib='$tmp/openib.dat'; rcverbs='$tmp/rcverbs.dat'; \
            out='$out'; qp_limit=$((max_qp / ppn)); budget=$budget; \
            ppn=$ppn" "$here/model_plot.gp"
echo "wrote $out"
