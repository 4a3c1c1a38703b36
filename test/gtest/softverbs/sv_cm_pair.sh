#!/usr/bin/env bash
#
# Runs an rdmacm server/client pair on softverbs and succeeds only if both
# exit 0 (and, with --expect, the client's output matches a pattern).
#
#   sv_cm_pair.sh [--expect RE] [--server-stays RE] --port N \
#                 RUNNER [ARGS...] -- SERVER-CMD... -- CLIENT-CMD...
#
# The client starts once the server listens: its rdmacm listener on port N
# (a socket of the server's processes in the kernel's list, see
# contrib/softverbs/sv_cm_wire.h) exists. rdmacm ports belong to the
# softverbs segment, so give each pair a segment of its own (--shm in
# RUNNER) and fixed ports never meet another run's.
#
# --server-stays RE: the server does not exit by itself (UCX's example
# server); it is stopped once the client is done, and its output must
# match RE.
#
# --again-if RE: a client output matching RE is a race of the program
# pair itself, not a failure; the pair runs again (up to 6 times: on a
# loaded machine the race was lost 3 times in a row).
# perftest -R listens twice on its port (a control connection, then the
# test's), and its client may connect the second time before the server
# listens again: "REJECTED; error: 8" (nobody listens; -111 on iWARP), as
# on hardware. perftest 4.5-0.17's client then crashes in its own retry
# (a fault upstream fixed later), so the pair runs again.
#
set -u
expect=
stays=
again=
port=
while :; do
    case "${1:-}" in
    --expect)       expect=$2; shift 2 ;;
    --server-stays) stays=$2; shift 2 ;;
    --again-if)     again=$2; shift 2 ;;
    --port)         port=$2; shift 2 ;;
    *)              break ;;
    esac
done
runner=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do runner+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
server=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do server+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
client=("$@")
if [ -z "$port" ] || [ ${#runner[@]} -eq 0 ] || [ ${#server[@]} -eq 0 ] ||
        [ ${#client[@]} -eq 0 ]; then
    echo "usage: sv_cm_pair.sh [--expect RE] [--server-stays RE] --port N" \
         "RUNNER... -- SERVER... -- CLIENT..." >&2
    exit 2
fi
limit=${SV_PAIR_TIMEOUT:-60}
srv_out=$(mktemp)
cli_out=$(mktemp)
trap 'rm -f "$srv_out" "$cli_out"' EXIT

# The server's processes: its pid and their descendants.
tree() {
    ps -e -o pid= -o ppid= | awk -v root="$1" '
        { parent[$1] = $2 }
        END {
            for (p in parent) {
                for (q = p; q != "" && q != 0 && q != 1; q = parent[q]) {
                    if (q == root) { print p; break }
                }
            }
        }'
}

# Does one of the server's sockets listen as the rdmacm listener of port?
listening() {
    local inodes p
    inodes=" $(for p in $(tree "$1"); do
                   ls -l "/proc/$p/fd" 2>/dev/null
               done | sed -n 's/.*socket:\[\([0-9]*\)\].*/\1/p' | tr '\n' ' ') "
    awk -v port="$port" -v inodes="$inodes" '
        $4 == "00010000" && $NF ~ ("^@svcm-[0-9]+-[0-9a-f]+-[0-9a-f]+-" \
                                   port "-") &&
        index(inodes, " " $7 " ") { found = 1 }
        END { exit !found }' /proc/net/unix
}

for try in 1 2 3 4 5 6; do
    timeout -k 5 "$limit" "${runner[@]}" "${server[@]}" >"$srv_out" 2>&1 &
    spid=$!
    for _ in $(seq 1 400); do
        listening "$spid" && break
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.05
    done
    if listening "$spid"; then
        timeout -k 5 "$limit" "${runner[@]}" "${client[@]}" >"$cli_out" 2>&1
        crc=$?
    else
        echo "--- the server did not listen on rdmacm port $port"
        crc=1
    fi
    alive=0
    if kill -0 "$spid" 2>/dev/null; then
        alive=1
    fi
    if [ -n "$stays" ] || [ $crc -ne 0 ]; then
        kill "$spid" 2>/dev/null
    fi
    wait "$spid"
    src=$?
    if [ -n "$stays" ]; then
        # it had to be running still, and to have done its part
        src=1
        if [ $alive = 1 ] && grep -qE "$stays" "$srv_out"; then
            src=0
        fi
    fi
    if [ -n "$again" ] && [ $try -lt 6 ] && [ $crc -ne 0 ] &&
            grep -qE "$again" "$cli_out"; then
        echo "--- the pair raced ($again), again:"
        cat "$cli_out"
        continue
    fi
    break
done
echo "--- server: ${runner[*]} ${server[*]} (exit $src)"
cat "$srv_out"
echo "--- client: ${runner[*]} ${client[*]} (exit $crc)"
cat "$cli_out"
[ $src -eq 0 ] && [ $crc -eq 0 ] || exit 1
if [ -n "$expect" ] && ! grep -qE "$expect" "$cli_out"; then
    echo "--- client output does not match: $expect"
    exit 1
fi
exit 0
