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

timeout -k 5 "$limit" "${runner[@]}" "$@" >"$srv_out" 2>&1 &
spid=$!
crc=1
for _ in $(seq 1 80); do
    timeout -k 5 "$limit" "${runner[@]}" "$@" localhost >"$cli_out" 2>&1
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
echo "--- server: ${runner[*]} $* (exit $src)"
cat "$srv_out"
echo "--- client (exit $crc)"
cat "$cli_out"
[ $src -eq 0 ] && [ $crc -eq 0 ] || exit 1
if [ -n "$expect" ] && ! grep -qE "$expect" "$cli_out"; then
    echo "--- client output does not match: $expect"
    exit 1
fi
exit 0
