#!/usr/bin/env bash
# Instructions and allocations p2p spends per message: callgrind counts
# p2p_cost's loops (messages to self: no timing, no polling, the same path
# every time). Two runs of different lengths per loop; their difference
# divided by the difference in messages leaves out start-up, warm-up and
# finalize. Each count is split by where the instructions run: p2p's
# library, UCX (libucp, libuct, libucs and transport modules), the C
# library (memcpy, mostly) and the program itself. The "tag" lines are
# the reference: the expected and stream loops on UCP's own tag API, same
# worker and endpoint (p2p_cost -u). The "carry" lines are UCP alone
# moving p2p's header and data to a receiver that matches them itself, by
# active message, tag message or put (p2p_cost -c, p2p_cost_carry.c). The
# allocations are p2p_cost's own count, without valgrind.
#
#   contrib/bench/p2p/p2p_cost_callgrind.sh BUILD_DIR [SIZE [P2P_COST_OPTIONS]]
# (e.g. SIZE 8 and -t: the cost of P2P_INIT_F_THREAD_MULTIPLE)
set -euo pipefail

build=${1:?usage: $0 BUILD_DIR [SIZE]}
size=${2:-8}
shift $(( $# < 2 ? $# : 2 ))
extra=("$@")
bin=$build/contrib/bench/p2p/p2p_cost
[ -x "$bin" ] || { echo "$bin not built" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 1; }
n1=2000
n2=12000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Self instructions per object of a callgrind output file: "p2p N",
# "ucx N", "libc N", "prog N", "other N". Cost lines following a calls=
# line are the call's inclusive cost and are skipped.
by_object() {
    awk '
    function name(s,   id, rest) {
        if (match(s, /^\([0-9]+\)/)) {
            id = substr(s, 2, RLENGTH - 2); rest = substr(s, RLENGTH + 2)
            if (rest != "") { ob_names[id] = rest }
            return ob_names[id]
        }
        return s
    }
    function group(o) {
        if (o ~ /libib2_p2p/) return "p2p"
        if (o ~ /lib(ucp|uct|ucs|ucm)|ucx\/|libuct_/) return "ucx"
        if (o ~ /\/libc[.-]|ld-linux/) return "libc"
        if (o ~ /p2p_cost$/) return "prog"
        return "other"
    }
    /^ob=/  { cur = group(name(substr($0, 4))); next }
    /^cob=/ { name(substr($0, 5)); next }
    /^calls=/ { skip = 1; next }
    /^[0-9+*-]/ { if (skip) { skip = 0; next } if (NF >= 2) sum[cur] += $2; next }
    END { for (g in sum) print g, sum[g] }' "$1"
}

collected() {   # collected LOOP N: per-object instructions inside LOOP
    local out=$tmp/cg.$1.$2
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect="$1" \
        --callgrind-out-file="$out" "$bin" -n "$2" -s "$size" -u -c \
        ${extra[@]+"${extra[@]}"} >/dev/null 2>&1
    by_object "$out"
}

echo "$size-byte messages to self ${extra[*]:-}; callgrind instructions per message:"
printf "  %-14s %8s %8s %8s %8s %8s\n" "" total p2p UCX libc program
for loop in p2p_cost_expected p2p_cost_unexp p2p_cost_stream \
        p2p_cost_ucp_tag p2p_cost_ucp_tag_stream p2p_cost_carry_am \
        p2p_cost_carry_drain p2p_cost_carry_bounce p2p_cost_carry_put \
        p2p_cost_carry_putflag; do
    collected $loop $n1 > "$tmp/a"
    collected $loop $n2 > "$tmp/b"
    label=${loop#p2p_cost_}
    label=${label/ucp_tag_stream/tag stream}
    label=${label/ucp_tag/tag expected}
    label=${label/carry_/carry }
    awk -v l="$label" -v d=$((n2 - n1)) '
        FNR == NR { a[$1] = $2; next }
        { b[$1] = $2 }
        END {
            n = split("p2p ucx libc prog other", g, " ")
            for (i = 1; i <= n; ++i) { v[g[i]] = (b[g[i]] - a[g[i]]) / d; t += v[g[i]] }
            printf "  %-14s %8.1f %8.1f %8.1f %8.1f %8.1f\n", l, t, v["p2p"],
                   v["ucx"], v["libc"], v["prog"] + v["other"]
        }' "$tmp/a" "$tmp/b"
done
"$bin" -n 100000 -s "$size" -u -c ${extra[@]+"${extra[@]}"}
