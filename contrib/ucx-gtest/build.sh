#!/usr/bin/env bash
#
# Builds UCX's own googletest binary (test/gtest/gtest, with UCX's uct
# tests) from the UCX source package in _deps, with rc_ib2 added to the IB
# transport list of the uct tests (uct_test-rc_ib2.patch), and keeps the
# result in a cache.
#
#   contrib/ucx-gtest/build.sh          build unless cached; print the dir
#   contrib/ucx-gtest/build.sh --dir    print the cache dir, build nothing
#
# The cache directory is
#   ${IB2_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ib2}/ucx-<ver>-gtest-<hash>
# where <hash> covers the patch and UCXG_RECIPE below: a clone with the
# same patch and recipe number reuses an existing build, a change to either
# builds anew. Inside:
#   ucx/            patched copy of the source, configured and built in place
#                   (the binary has build-tree paths compiled in, so the
#                   tree is never moved after configure)
#   ucx/test/gtest/gtest   the test binary
#   build.log       everything the build printed
#   steps/          one stamp per finished step (copy, patch, autogen,
#                   configure)
#   ok              written last: the build is complete
# A directory without "ok" is a build that was interrupted or failed: the
# next run goes on from the last finished step (make itself resumes, after
# the files the interrupted make was writing are removed: see make-started).
# Two runs at once are serialised by a lock file.
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
PATCH=$HERE/uct_test-rc_ib2.patch
# The build recipe's number: raise it with any change below that changes
# what is built (configure arguments, make targets, flags, object list), so
# that caches of the old recipe are not taken for the new one. Changes that
# do not (messages, resuming) keep the number and the cached builds.
UCXG_RECIPE=2
JOBS=$(nproc 2>/dev/null || echo 2)

log() { printf '[ucx-gtest] %s\n' "$*" >&2; }
die() { printf '[ucx-gtest] error: %s\n' "$*" >&2; exit 1; }

command -v ucx_info >/dev/null 2>&1 ||
    die "ucx_info not found: install ucx-utils (contrib/setup.sh build does)"

# The version of the installed UCX decides the source tree: the plugin and
# the test binary must agree with the libraries they run against.
ucx_version=$(ucx_info -v | sed -n 's/^# Version \([0-9.]*\).*/\1/p')
[ -n "$ucx_version" ] || die "cannot read the UCX version from 'ucx_info -v'"
SRC=$TOP/_deps/ucx-$ucx_version
hash=$({ echo "recipe $UCXG_RECIPE"; cat "$PATCH"; } | sha256sum | cut -c1-12)
CACHE_ROOT=${IB2_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ib2}
OUT=$CACHE_ROOT/ucx-$ucx_version-gtest-$hash

if [ "${1:-}" = --dir ]; then
    echo "$OUT"
    exit 0
elif [ $# -gt 0 ]; then
    die "unknown argument '$1': use no argument (build) or --dir"
fi

if [ -f "$OUT/ok" ]; then
    log "cached: $OUT"
    echo "$OUT"
    exit 0
fi

[ -f "$SRC/test/gtest/uct/uct_test.h" ] ||
    die "UCX $ucx_version source not found in $SRC: run contrib/setup.sh build first"

mkdir -p "$CACHE_ROOT"
exec 9>"$OUT.lock"
flock 9
if [ -f "$OUT/ok" ]; then   # built by the run we waited for
    log "cached: $OUT"
    echo "$OUT"
    exit 0
fi

mkdir -p "$OUT/steps"
BLOG=$OUT/build.log
step() {   # step DESCRIPTION COMMAND...: run, log, stop with the log's tail
    local what=$1
    shift
    log "$what"
    echo "=== $what: $*" >>"$BLOG"
    "$@" >>"$BLOG" 2>&1 || {
        tail -n 40 "$BLOG" >&2
        die "$what failed (full log: $BLOG)"
    }
}
once() {   # once NAME DESCRIPTION COMMAND...: step, unless done before
    local name=$1
    shift
    if [ -f "$OUT/steps/$name" ]; then
        log "$1: done before"
        return
    fi
    step "$@"
    touch "$OUT/steps/$name"
}

# The installed libraries' own configure arguments, so that the copy builds
# the same code; the words carry no quoting, "${prefix}" stays literal for
# configure to expand.
configured=$(ucx_info -v | sed -n 's/^# Configured with: //p')
[ -n "$configured" ] || die "no 'Configured with' line in 'ucx_info -v'"
read -r -a conf_args <<<"$configured"
conf_args+=(--enable-gtest --without-java --without-go)

if [ ! -f "$OUT/steps/copy" ]; then
    rm -rf "$OUT/ucx"
fi
once copy "copy $SRC" cp -a "$SRC/." "$OUT/ucx"
if ! grep -q '^    rc_ib2, ' "$OUT/ucx/test/gtest/uct/uct_test.h"; then
    step "patch: rc_ib2 in the IB transport list" \
        patch -p1 -N -d "$OUT/ucx" -i "$PATCH"
    grep -q '^    rc_ib2, ' "$OUT/ucx/test/gtest/uct/uct_test.h" ||
        die "the patch did not add rc_ib2 to test/gtest/uct/uct_test.h"
fi
cd "$OUT/ucx"
once autogen "autogen" ./autogen.sh
once configure "configure ${conf_args[*]}" ./configure "${conf_args[@]}"
# A make killed outright (the machine stopped, SIGKILL) has no time to
# delete the file it was writing: an empty or truncated object, newer than
# its sources, that the next make takes as built (an empty test_rc.o made
# the link fail). Of the files written since the interrupted make step
# started (make-started is touched before each step), those that are empty
# or that nm cannot read are removed and built again; the rest are kept, so
# that a build interrupted again and again still gets on.
if [ -f "$OUT/steps/make-started" ]; then
    log "an earlier build stopped while making: removing what it left broken"
    find "$OUT/ucx" -newer "$OUT/steps/make-started" -type f \
        \( -name '*.o' -o -name '*.lo' -o -name '*.a' -o -name '*.so' \
           -o -name '*.so.*' -o -path '*/test/gtest/gtest' \) -print |
    while read -r f; do
        if [ ! -s "$f" ] ||
           { [ "${f%.lo}" = "$f" ] && ! nm "$f" >/dev/null 2>&1; }; then
            rm -f "$f"
        fi
    done
fi
make_step() {   # make_step DESCRIPTION MAKE-ARGS...: a step that runs make
    touch "$OUT/steps/make-started"
    step "$@"
}
# Only what the test binary links; the top-level make would also build the
# examples and stop on gcc 12 warnings inside test/gtest.
for d in src/ucm src/ucs src/uct src/ucp src/tools/perf; do
    make_step "make $d" make -C "$d" -j"$JOBS"
done
make_step "make googletest" make -C test/gtest/common/googletest -j"$JOBS"
# The binary is linked from the common and uct parts of UCX's test sources
# only: the ucs, ucm and ucp tests are not needed here, take more than half
# of the compile time, and their parameter lists (UCP contexts) would be
# built at every start of the binary. The object list is automake's own,
# read from the generated Makefile and filtered.
printf 'ucxg-print-objects:\n\t@echo $(am_gtest_OBJECTS)\n' >"$OUT/objects.mk"
objects=$(make -s --no-print-directory -C test/gtest -f Makefile \
          -f "$OUT/objects.mk" ucxg-print-objects | tr ' ' '\n' |
          grep -E '^(common|uct)/' | tr '\n' ' ') ||
    die "cannot read the object list from test/gtest/Makefile"
[ -n "$objects" ] || die "no common/ or uct/ objects in test/gtest/Makefile"
# UCX builds its tests with -Werror, and gcc 12 warns in several of them.
# (UCX's own flags already carry -O3; a lower -O given here would come last
# and break its always_inline functions that the tests call through
# pointers.)
make_step "make gtest (common and uct tests)" make -C test/gtest -j"$JOBS" gtest \
    CXXFLAGS=-Wno-error am_gtest_OBJECTS="$objects"
[ -x test/gtest/gtest ] || die "make finished but test/gtest/gtest is missing"
date -u +%FT%TZ >"$OUT/ok"
log "built: $OUT"
echo "$OUT"
