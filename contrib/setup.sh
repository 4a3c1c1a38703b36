#!/usr/bin/env bash
#
# Sets up a Debian 12 machine for ib2 and builds it; then runs what is asked.
#
#   contrib/setup.sh main    set up, build, run the product's main job
#   contrib/setup.sh test    set up, build (plus sanitizer builds), run all tests
#   contrib/setup.sh build   set up and build only
#
# Idempotent: packages, the UCX source package, autogen, configure and make
# are each skipped when already up to date, so a second run is fast.
#
set -euo pipefail

TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${IB2_BUILD_DIR:-$TOP/build}
ASAN_BUILD=${IB2_ASAN_BUILD_DIR:-$TOP/build-asan}
TSAN_BUILD=${IB2_TSAN_BUILD_DIR:-$TOP/build-tsan}
DEPS=$TOP/_deps
JOBS=$(nproc 2>/dev/null || echo 2)
what=${1:-build}

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

case $what in
    main|test|build) ;;
    *) die "unknown action '$what': use one of main, test, build" ;;
esac

# as_root, enable_deb_src
. "$TOP/contrib/deb-src.sh"

# Everything the product builds against, tests with or benchmarks against
# (gnuplot-nox draws the main job's plots; gfortran is the compiler
# Open MPI's mpifort runs, which libopenmpi-dev does not install, for
# Open MPI's Fortran examples in suite 46; python3-mpi4py brings mpi4py's
# programs that suite 46 runs through pml ib2).
PACKAGES=(
    build-essential autoconf automake libtool pkg-config dpkg-dev
    libucx-dev ucx-utils libucx0
    libibverbs-dev librdmacm-dev ibverbs-utils rdma-core perftest
    rdmacm-utils
    libhwloc-dev libpmix-dev
    openmpi-bin libopenmpi-dev
    gfortran python3-mpi4py
    libgtest-dev
    valgrind hyperfine gdb
    gnuplot-nox
)

install_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
                grep -q 'install ok installed'; then
            missing+=("$p")
        fi
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "packages: all present"
        return
    fi
    log "packages: installing ${missing[*]}"
    as_root apt-get update -q
    as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The transport needs UCX's internal headers of exactly the installed version.
fetch_ucx_source() {
    local deb_version upstream
    deb_version=$(dpkg-query -W -f='${Version}' libucx0)
    upstream=${deb_version%-*}
    upstream=${upstream#*:}
    UCX_SRC=$DEPS/ucx-$upstream
    if [ -f "$UCX_SRC/src/uct/base/uct_iface.h" ]; then
        log "ucx source: $UCX_SRC (present)"
        return
    fi
    enable_deb_src
    mkdir -p "$DEPS"
    log "ucx source: fetching ucx $deb_version"
    (cd "$DEPS" && apt-get source -q "ucx=$deb_version" >"$DEPS/apt-source.log" 2>&1) ||
        die "apt-get source ucx=$deb_version failed: is a deb-src entry for the suite of the installed UCX available?"
    [ -f "$UCX_SRC/src/uct/base/uct_iface.h" ] ||
        die "the UCX source package did not unpack to $UCX_SRC"
}

# Re-run autogen when any autotools input is newer than configure.
need_autogen() {
    [ -x "$TOP/configure" ] || return 0
    [ -n "$(find "$TOP" -path "$TOP/_deps" -prune -o -path "$TOP/build*" -prune \
            -o \( -name configure.ac -o -name Makefile.am \) \
            -newer "$TOP/configure" -print | head -n 1)" ]
}

configure_tree() {   # configure_tree DIR [configure args...]
    local dir=$1
    shift
    mkdir -p "$dir"
    if [ ! -f "$dir/Makefile" ] || [ "$TOP/configure" -nt "$dir/config.status" ]; then
        log "configure: $dir $*"
        (cd "$dir" && "$TOP/configure" --with-ucx-src="$UCX_SRC" "$@" \
            >configure.out 2>&1) || {
            tail -n 30 "$dir/configure.out"
            die "configure failed in $dir (full log: $dir/config.log)"
        }
    fi
}

build_tree() {   # build_tree DIR [configure args...]
    local dir=$1
    configure_tree "$@"
    log "make: $dir"
    make -C "$dir" -j"$JOBS" -s >"$dir/make.out" 2>&1 || {
        grep -E -B 2 -A 8 'error|Error' "$dir/make.out" | head -n 60
        die "build failed in $dir (full log: $dir/make.out)"
    }
}

install_packages
fetch_ucx_source
if need_autogen; then
    log "autogen"
    "$TOP/autogen.sh" >/dev/null 2>&1 || "$TOP/autogen.sh"
fi
build_tree "$BUILD"

# ThreadSanitizer: only what uses threads -- p2p and its thread test
# (P2P_INIT_F_THREAD_MULTIPLE) -- built with -fsanitize=thread; the suites
# say what runs in it ("# tsan: yes").
build_tsan_tree() {   # build_tsan_tree DIR
    local dir=$1 sub flags="-fsanitize=thread -fno-omit-frame-pointer"
    configure_tree "$dir"
    log "make (ThreadSanitizer, p2p only): $dir"
    for sub in src/reg_cache src/p2p; do
        make -C "$dir/$sub" -j"$JOBS" -s SAN_FLAGS="$flags" \
            >>"$dir/make.out" 2>&1 || die "build failed in $dir/$sub"
    done
    make -C "$dir/test/gtest/p2p" -j"$JOBS" -s SAN_FLAGS="$flags" \
        test_p2p_threads >>"$dir/make.out" 2>&1 ||
        die "build failed in $dir/test/gtest/p2p"
}

case $what in
    build)
        log "built in $BUILD"
        ;;
    main)
        exec "$TOP/contrib/main-job.sh" "$BUILD"
        ;;
    test)
        build_tree "$ASAN_BUILD" --enable-sanitizers
        build_tsan_tree "$TSAN_BUILD"
        # UCX's own uct tests (suite 36): built once, cached outside the
        # clone (docs/ucx-gtest.md); about 15 minutes the first time.
        "$TOP/contrib/ucx-gtest/build.sh" >/dev/null ||
            log "UCX's gtest did not build; suite 36-ucx-gtest reports it"
        # Open MPI's example programs (suite 46), cached the same way
        "$TOP/contrib/ompi-examples/fetch.sh" >/dev/null ||
            log "Open MPI's examples did not build; suite 46-pml reports it"
        exec "$TOP/test/run-tests.sh" "$BUILD" "$ASAN_BUILD" "$TSAN_BUILD"
        ;;
esac
