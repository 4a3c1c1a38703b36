#!/bin/sh
# Starts rank 1 of an mpirun job in a new PID namespace (with its own
# /proc), as a container would be, and every other rank as it is:
#   mpirun -np 2 in_new_pidns.sh PROGRAM [ARGS...]
# Needs unshare(1) and the right to create namespaces (root).
#
# The program runs as an ordinary process of the namespace, not as its
# init (pid 1): init is immune to signals it has no handler for, even a
# SIGKILL it raises itself, so a rank that kills itself would live on.
# The shell stays pid 1 (the command after the program keeps it from
# exec'ing it) and passes on the program's exit status.
if [ "${OMPI_COMM_WORLD_RANK:-}" = 1 ]; then
    exec unshare --pid --fork --mount-proc sh -c '"$@"; exit $?' sh "$@"
fi
exec "$@"
