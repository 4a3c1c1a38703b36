#!/usr/bin/env bash
#
# Runs a client/server tool pair on softverbs and succeeds only if both
# exit 0 (and, with --expect, the client's output matches a pattern).
#
#   sv_pair.sh [--expect REGEX] RUNNER [RUNNER-ARGS...] -- CMD [ARGS...]
#
# The server is "RUNNER... CMD ARGS", the client the same with "localhost"
# appended. The client is retried while the server is not listening yet;
# every process is bounded by a timeout, and the server is stopped if the
# client fails.
#
# A literal @PORT@ in the arguments becomes a TCP port picked here: one
# nobody listens on, at random, so that runs going on at the same time
# (other suites, other checkouts) do not meet on a port. If the server
# still finds it taken, the pair starts again on another one.
#
set -u
expect=
if [ "${1:-}" = --expect ]; then
    expect=$2
    shift 2
fi
runner=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    runner+=("$1")
    shift
done
[ "${1:-}" = -- ] || { echo "usage: sv_pair.sh [--expect RE] RUNNER... -- CMD..." >&2; exit 2; }
shift
limit=${SV_PAIR_TIMEOUT:-60}
srv_out=$(mktemp)
cli_out=$(mktemp)
trap 'rm -f "$srv_out" "$cli_out"' EXIT

# TCP ports someone listens on (state 0A in /proc/net/tcp*).
listening_ports() {
    local _ local_addr st
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        while read -r _ local_addr _ st _; do
            [ "$st" = 0A ] && echo $((16#${local_addr##*:}))
        done
}

pick_port() {
    local used p
    used=" $(listening_ports | tr '\n' ' ') "
    for _ in $(seq 1 100); do
        p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        case "$used" in *" $p "*) continue ;; esac
        echo $p
        return
    done
    echo $((20000 + RANDOM % 40000))
}

# One server/client run on port $1; sets src, crc.
run_pair() {
    local cmd=("${@:2}")
    cmd=("${cmd[@]//@PORT@/$1}")
    timeout -k 5 "$limit" "${runner[@]}" "${cmd[@]}" >"$srv_out" 2>&1 &
    spid=$!
    crc=1
    for _ in $(seq 1 80); do
        timeout -k 5 "$limit" "${runner[@]}" "${cmd[@]}" localhost \
            >"$cli_out" 2>&1
        crc=$?
        if [ $crc -eq 0 ] && ! grep -q 'connect() failed' "$cli_out"; then
            break
        fi
        if ! grep -qE "Couldn't connect|connect\(\) failed" "$cli_out" ||
                ! kill -0 $spid 2>/dev/null; then
            break
        fi
        crc=1
        sleep 0.25
    done
    if [ $crc -ne 0 ]; then
        kill $spid 2>/dev/null
    fi
    wait $spid
    src=$?
}

for try in 1 2 3 4 5; do
    port=$(pick_port)
    run_pair "$port" "$@"
    # the server could not listen on the port: taken since we looked
    if [ $src -ne 0 ] && [ $try -lt 5 ] &&
            grep -qiE "address already in use|couldn't listen|bind\(\) failed" \
                "$srv_out"; then
        echo "--- port $port is taken, again on another one"
        continue
    fi
    break
done
echo "--- server: ${runner[*]} ${*//@PORT@/$port} (exit $src)"
cat "$srv_out"
echo "--- client (exit $crc)"
cat "$cli_out"
[ $src -eq 0 ] && [ $crc -eq 0 ] || exit 1
if [ -n "$expect" ] && ! grep -qE "$expect" "$cli_out"; then
    echo "--- client output does not match: $expect"
    exit 1
fi
exit 0
