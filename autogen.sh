#!/bin/sh
# Regenerates the build system (configure, Makefile.in) from configure.ac and
# the Makefile.am files. Run once after a fresh clone; contrib/setup.sh does.
set -e
cd "$(dirname "$0")"
mkdir -p config/m4 config/aux
autoreconf --install --force -Wall,no-portability
