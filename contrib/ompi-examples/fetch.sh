#!/usr/bin/env bash
#
# Open MPI's own example programs, from the Debian source package of the
# installed Open MPI, built with its compiler wrappers: suite 46 runs them
# under pml ib2 (docs/pml_ib2.md). Nothing of Open MPI goes into the tree.
#
#   contrib/ompi-examples/fetch.sh          fetch and build unless cached;
#                                           print the directory
#   contrib/ompi-examples/fetch.sh --dir    print the directory, do nothing
#
# The directory, outside the clone so that a fresh clone (CI) reuses it:
#   ${IB2_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ib2}/ompi-examples-<ver>
# <ver> is the source version of the installed openmpi-bin (4.1.4-3 for
# Debian 12's 4.1.4-3+b1). Inside:
#   examples/   the source package's examples directory, as unpacked
#   bin/        the programs built from it (see PROGRAMS)
#   build.log   what the compilers printed
#   ok          written last: everything available was built
# The source package is unpacked once, in a temporary directory that is
# removed afterwards; examples/ is kept, so a later run (gfortran
# installed since) only compiles. Two runs at once are serialised by a
# lock file.
#
set -euo pipefail

TOP=$(cd "$(dirname "$0")/../.." && pwd)

log() { printf '[ompi-examples] %s\n' "$*" >&2; }
die() { printf '[ompi-examples] error: %s\n' "$*" >&2; exit 1; }

# program, compiler wrapper, source file; the Fortran ones are built only
# where the wrapper's compiler (gfortran) is installed
PROGRAMS=(
    "hello_c mpicc hello_c.c"
    "ring_c mpicc ring_c.c"
    "connectivity_c mpicc connectivity_c.c"
    "ring_cxx mpicxx ring_cxx.cc"
    "ring_mpifh mpifort ring_mpifh.f"
    "ring_usempi mpifort ring_usempi.f90"
    "ring_usempif08 mpifort ring_usempif08.f90"
)

version=$(dpkg-query -W -f='${source:Version}' openmpi-bin 2>/dev/null) ||
    die "openmpi-bin is not installed: run contrib/setup.sh build first"
[ -n "$version" ] || die "cannot read the source version of openmpi-bin"
CACHE_ROOT=${IB2_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ib2}
OUT=$CACHE_ROOT/ompi-examples-$version

if [ "${1:-}" = --dir ]; then
    echo "$OUT"
    exit 0
elif [ $# -gt 0 ]; then
    die "unknown argument '$1': use no argument (fetch and build) or --dir"
fi

# The wrapper's compiler: mpifort runs gfortran, which Debian's
# libopenmpi-dev does not pull in (only gfortran-12).
have_compiler() {   # have_compiler WRAPPER
    local cc
    command -v "$1" >/dev/null 2>&1 || return 1
    cc=$("$1" --showme:command 2>/dev/null) || return 1
    command -v "$cc" >/dev/null 2>&1
}

# ok is valid while every program whose compiler is here is built
complete() {
    local p name wrapper
    [ -f "$OUT/ok" ] || return 1
    for p in "${PROGRAMS[@]}"; do
        read -r name wrapper _ <<<"$p"
        if have_compiler "$wrapper" && [ ! -x "$OUT/bin/$name" ]; then
            return 1
        fi
    done
}

if complete; then
    echo "$OUT"
    exit 0
fi

mkdir -p "$CACHE_ROOT"
exec 9>"$OUT.lock"
flock 9

if [ ! -f "$OUT/examples/hello_c.c" ]; then
    . "$TOP/contrib/deb-src.sh"
    command -v dpkg-source >/dev/null 2>&1 ||
        die "dpkg-source not found: install dpkg-dev (contrib/setup.sh does)"
    enable_deb_src >&2
    tmp=$(mktemp -d "$CACHE_ROOT/.ompi-src.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    log "fetching the openmpi $version source package"
    (cd "$tmp" && apt-get source -q "openmpi=$version") >"$tmp/apt.log" 2>&1 || {
        tail -n 20 "$tmp/apt.log" >&2
        die "apt-get source openmpi=$version failed (above): is a deb-src entry for the suite of the installed Open MPI available ('apt-cache showsrc openmpi')?"
    }
    src=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d -name 'openmpi-*' |
          head -n 1)
    [ -n "$src" ] && [ -f "$src/examples/hello_c.c" ] ||
        die "the openmpi source package unpacked without examples/hello_c.c (in $tmp)"
    rm -rf "$OUT"
    mkdir -p "$OUT"
    cp -a "$src/examples" "$OUT/examples.part"
    mv "$OUT/examples.part" "$OUT/examples"
    rm -rf "$tmp"
    trap - EXIT
fi

rm -f "$OUT/ok"
mkdir -p "$OUT/bin"
: >"$OUT/build.log"
for p in "${PROGRAMS[@]}"; do
    read -r name wrapper file <<<"$p"
    if ! have_compiler "$wrapper"; then
        log "$name: not built ($wrapper or its compiler is not installed)"
        continue
    fi
    [ -f "$OUT/examples/$file" ] ||
        die "$OUT/examples/$file is missing: remove $OUT and run again"
    [ -x "$OUT/bin/$name" ] && [ "$OUT/bin/$name" -nt "$OUT/examples/$file" ] &&
        continue
    echo "+ $wrapper -o bin/$name examples/$file" >>"$OUT/build.log"
    # Fortran modules land in the working directory: keep them in bin/
    (cd "$OUT/bin" && "$wrapper" -O2 -o "$name.part" "../examples/$file") \
        >>"$OUT/build.log" 2>&1 || {
        tail -n 20 "$OUT/build.log" >&2
        die "$name did not build with $wrapper (log: $OUT/build.log)"
    }
    mv "$OUT/bin/$name.part" "$OUT/bin/$name"
    log "built $name"
done
touch "$OUT/ok"
echo "$OUT"
