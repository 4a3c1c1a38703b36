#!/usr/bin/env bash
#
# Draws latency and bandwidth against message size, side by side in one
# PNG image, with gnuplot (Debian's gnuplot-nox): one line per column of
# the two tables, log scales on both axes.
#
#   contrib/bench/mpi/mpi_plot.sh [-t TITLE] OUT.png LATENCY BANDWIDTH
#
# LATENCY and BANDWIDTH are text tables: a header line "bytes NAME ...",
# then one line per message size, the size first, "-" where a column has
# no value. Latency is in microseconds, bandwidth in MB/s (10^6 bytes per
# second). A NAME of the form "WHAT/TRANSPORT" (e.g. "pml_ib2/rc_ib2")
# gets a colour per WHAT and a dash pattern and point shape per
# TRANSPORT, so that one stack over two transports is one colour.
#
set -euo pipefail

usage() { sed -n '/^#   contrib/p' "$0" | sed 's/^# *//'; }

TITLE=
while getopts "t:h" opt; do
    case $opt in
    t) TITLE=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 3 ] || { usage >&2; exit 2; }
OUT=$1 LAT=$2 BW=$3

command -v gnuplot >/dev/null || {
    echo "mpi_plot: gnuplot not found: install gnuplot-nox" \
         "(contrib/setup.sh does)" >&2; exit 1; }
for f in "$LAT" "$BW"; do
    [ -r "$f" ] || { echo "mpi_plot: cannot read table $f" >&2; exit 1; }
    read -r first _ <"$f" || true
    [ "$first" = bytes ] || {
        echo "mpi_plot: $f: the first line must be \"bytes NAME ...\"" >&2
        exit 1; }
    awk 'NR > 1 && ($1 !~ /^[0-9]+$/) { bad = 1 } END { exit bad }' "$f" || {
        echo "mpi_plot: $f: every line after the header must start with" \
             "a size in bytes" >&2; exit 1; }
done

# pngcairo draws smoother lines; the libgd png terminal is the fallback.
TERM_PNG="png size 1400,560 font ',11'"
if gnuplot -e 'set terminal pngcairo' 2>/dev/null; then
    TERM_PNG="pngcairo size 1400,560 font ',11'"
fi

# One "plot" clause per column: colour from the part before '/', dash and
# point from the part after it, both by order of first appearance (a
# table of one WHAT only gets a colour per transport).
plot_clause() {   # plot_clause TABLE
    awk -v file="$1" 'NR == 1 {
        for (i = 2; i <= NF; i++) {
            w = $i; sub(/\/.*/, "", w)
            if (!(w in whats)) { whats[w] = 1; nw++ }
        }
        for (i = 2; i <= NF; i++) {
            what = $i; tl = ""
            if (index($i, "/")) {
                what = substr($i, 1, index($i, "/") - 1)
                tl = substr($i, index($i, "/") + 1)
            }
            if (!(what in col)) col[what] = ++nc
            if (!(tl in dash)) dash[tl] = ++nd
            # "pml_ib2/rc_ib2" -> "pml ib2 / rc_ib2": transports keep
            # their names
            name = what; gsub(/_/, " ", name)
            if (tl != "") name = name " / " tl
            printf "%s\"%s\" using 1:%d title \"%s\" with linespoints " \
                   "linecolor %d dashtype %d pointtype %d linewidth 2",
                   (i > 2) ? ", " : "", file, i, name,
                   (nw > 1) ? col[what] : dash[tl],
                   dash[tl], 2 * dash[tl] + 3
        }
        exit }' "$1"
}

# x tics at every power of 8 from 8 bytes, labelled with units
xtics='("8" 8, "64" 64, "512" 512, "4K" 4096, "32K" 32768, "256K" 262144,'
xtics+=' "2M" 2097152, "16M" 16777216, "128M" 134217728)'

# room of half a power of two beyond the smallest and largest size
xrange=$(awk 'FNR > 1 { if (min == "" || $1 < min) min = $1
                       if ($1 > max) max = $1 }
              END { printf "[%g:%g]", min / 1.4, max * 1.4 }' "$LAT" "$BW")

gnuplot <<EOF
set terminal $TERM_PNG
set output "$OUT"
set termoption noenhanced
set datafile missing "-"
# latency and bandwidth both grow with size: the bottom right is free
set key bottom right opaque box
set grid
set logscale x 2
set logscale y 10
set xtics $xtics
set xrange $xrange
set xlabel "message size (bytes)"
set multiplot layout 1,2 title "$TITLE"
set title "latency (half a round trip)"
set ylabel "microseconds"
plot $(plot_clause "$LAT")
set title "streaming bandwidth"
set ylabel "MB/s"
plot $(plot_clause "$BW")
unset multiplot
EOF
[ -s "$OUT" ] || { echo "mpi_plot: gnuplot wrote no $OUT" >&2; exit 1; }
