#!/usr/bin/env bash
#
# Checks what one of Open MPI's example programs printed (standard output
# and error of the whole job, on stdin) against what its source says it
# prints when every message arrived right:
#
#   test/mpi/ompi-examples-check.sh PROGRAM NP < output
#
# PROGRAM is hello_c, connectivity_c, or one of the rings (ring_c,
# ring_cxx, ring_mpifh, ring_usempi, ring_usempif08). Spaces are
# collapsed first: the Fortran rings print ranks with "i2" ("Process  0").
# Exits 0 if everything expected is there, else 1 naming what is not.
set -u
prog=${1:?usage: ompi-examples-check.sh PROGRAM NP < output}
np=${2:?usage: ompi-examples-check.sh PROGRAM NP < output}
case $np in
    ''|*[!0-9]*|0) echo "NP '$np' is not a positive number" >&2; exit 2 ;;
esac
out=$(sed -E 's/[[:space:]]+/ /g; s/^ //; s/ $//')
bad=0

# expect_once REGEX WHAT: exactly one line matches
expect_once() {
    local n
    n=$(printf '%s\n' "$out" | grep -cE "$1")
    if [ "$n" -ne 1 ]; then
        echo "expected $2 once, found it $n times" >&2
        bad=1
    fi
}

case $prog in
    hello_c)
        for ((r = 0; r < np; ++r)); do
            expect_once "^Hello, world, I am $r of $np, \(" \
                "rank $r's 'Hello, world, I am $r of $np'"
        done
        # and no other rank's, or another size's
        n=$(printf '%s\n' "$out" | grep -c "^Hello, world, I am ")
        if [ "$n" -ne "$np" ]; then
            echo "expected $np hello lines, found $n" >&2
            bad=1
        fi
        ;;
    connectivity_c)
        expect_once "^Connectivity test on $np processes PASSED\.$" \
            "'Connectivity test on $np processes PASSED.'"
        ;;
    ring_c|ring_cxx|ring_mpifh|ring_usempi|ring_usempif08)
        # rank 0 starts 10 around the ring (tag 201) and decrements it
        # each time it comes back, down to 0; then every rank exits
        expect_once "^Process 0 sending 10 to 1,? tag 201 \( ?$np processes in ring\)$" \
            "rank 0's 'Process 0 sending 10 to 1, tag 201 ($np processes in ring)'"
        expect_once "^Process 0 sent to 1$" "'Process 0 sent to 1'"
        got=$(printf '%s\n' "$out" |
              sed -nE 's/^Process 0 decremented value: ([0-9]+)$/\1/p' |
              tr '\n' ' ')
        if [ "$got" != "9 8 7 6 5 4 3 2 1 0 " ]; then
            echo "expected rank 0 to decrement to 9 8 7 6 5 4 3 2 1 0," \
                 "it printed: ${got:-nothing}" >&2
            bad=1
        fi
        for ((r = 0; r < np; ++r)); do
            expect_once "^Process $r exiting$" "'Process $r exiting'"
        done
        ;;
    *)
        echo "unknown program '$prog': use hello_c, connectivity_c or a" \
             "ring (ring_c, ring_cxx, ring_mpifh, ring_usempi," \
             "ring_usempif08)" >&2
        exit 2
        ;;
esac
# and nobody complained, though the job exited 0 (a PML's or Open MPI's
# error line)
errs=$(printf '%s\n' "$out" | grep -iE '(^|[^a-z])error([^a-z]|$)' | head -3)
if [ -n "$errs" ]; then
    echo "an error was printed: $errs" >&2
    bad=1
fi
exit $bad
