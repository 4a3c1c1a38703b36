#!/bin/sh
# Starts rank 1 of an mpirun job in a new PID namespace (with its own
# /proc), as a container would be, and every other rank as it is:
#   mpirun -np 2 in_new_pidns.sh PROGRAM [ARGS...]
# Needs unshare(1) and the right to create namespaces (root).
if [ "${OMPI_COMM_WORLD_RANK:-}" = 1 ]; then
    exec unshare --pid --fork --mount-proc "$@"
fi
exec "$@"
