#!/usr/bin/env bash
# The product's main job, run by `contrib/setup.sh main` after the build.
# Today: the registration-cache benchmark against UCX's own ucs_rcache.
# Usage: contrib/main-job.sh BUILD_DIR
set -euo pipefail
BUILD=${1:?usage: main-job.sh BUILD_DIR}
exec "$BUILD/contrib/bench/rcache/ib2_rcache_bench"
