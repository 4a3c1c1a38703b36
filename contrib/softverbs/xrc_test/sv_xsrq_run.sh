#!/usr/bin/env bash
#
# Runs rdma-core's ibv_xsrq_pingpong, unmodified, as it is meant to be run:
# one server serving N clients (-c N) and N client processes, all sharing
# the XRC domain of the tool's file. Succeeds only if every process exits 0
# and prints "success".
#
#   sv_xsrq_run.sh N RUNNER [RUNNER-ARGS...] -- [TOOL-ARGS...]
#
# Every process is bounded by a timeout (SV_XSRQ_TIMEOUT, 60 s); the wait
# for the server to listen too. The port is one nobody listens on.
#
set -u
n=${1:?usage: sv_xsrq_run.sh N RUNNER... -- [ARGS...]}
shift
runner=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    runner+=("$1")
    shift
done
if [ "${1:-}" != -- ]; then
    echo "usage: sv_xsrq_run.sh N RUNNER... -- [ARGS...]" >&2
    exit 2
fi
shift
limit=${SV_XSRQ_TIMEOUT:-60}
tmp=$(mktemp -d)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

listening() {   # listening PORT: is some socket listening on it?
    local _ a st
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        while read -r _ a _ st _; do
            [ "$st" = 0A ] && [ $((16#${a##*:})) -eq "$1" ] && echo yes
        done | grep -q yes
}

port=
for _ in $(seq 1 100); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    listening "$p" || { port=$p; break; }
done
[ -n "$port" ] || { echo "no free port found"; exit 1; }

timeout --kill-after=5 "$limit" "${runner[@]}" ibv_xsrq_pingpong -c "$n" \
    -p "$port" "$@" >"$tmp/server" 2>&1 &
srv=$!
pids+=("$srv")
end=$((SECONDS + limit))
until listening "$port"; do
    if ! kill -0 "$srv" 2>/dev/null || [ $SECONDS -ge $end ]; then
        echo "the server did not start listening on port $port:"
        cat "$tmp/server"
        exit 1
    fi
    sleep 0.1
done

cli=()
for i in $(seq 1 "$n"); do
    timeout --kill-after=5 "$limit" "${runner[@]}" ibv_xsrq_pingpong \
        -p "$port" "$@" 127.0.0.1 >"$tmp/client$i" 2>&1 &
    cli+=($!)
    pids+=($!)
done

rc=0
for i in $(seq 1 "$n"); do
    wait "${cli[$((i - 1))]}" || rc=1
done
wait "$srv" || rc=1
pids=()
for f in server $(seq -f 'client%g' 1 "$n"); do
    echo "== $f"
    cat "$tmp/$f"
    grep -qx success "$tmp/$f" || rc=1
done
exit $rc
