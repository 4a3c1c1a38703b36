#!/usr/bin/env bash
#
# Runs CMD with settings that differ between the server and the client of
# a pair started by test/gtest/softverbs/sv_pair.sh (which appends
# "localhost" to the client's command line):
#
#   side_env.sh "VAR=VALUE ..." "VAR=VALUE ..." CMD [ARGS...]
#                server's        client's
#
# e.g. each side on another port or subnet (UCX_NET_DEVICES), or with its
# own reference device for UCP's distance (UCX_SELECT_DISTANCE_MD).
#
set -u
server=$1 client=$2
shift 2
if [ "${!#}" = localhost ]; then
    # shellcheck disable=SC2086
    exec env $client "$@"
fi
# shellcheck disable=SC2086
exec env $server "$@"
