#!/usr/bin/env bash
#
# Turns the results of UCX's uct tests (the MODE/CLASS.res files that
# run-class.sh writes) into markdown: totals per transport and mode, one
# row per class, then every failure and every skip with its reason.
#
#   contrib/ucx-gtest/table.sh OUTDIR > table.md
#
set -euo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/modes.sh"
out=${1:?usage: table.sh OUTDIR (the -o directory of run-class.sh)}
[ -d "$out" ] || { echo "table.sh: $out is not a directory" >&2; exit 2; }

modes=()
titles=()
for m in $UCXG_MODES; do
    if compgen -G "$out/$m/*.res" >/dev/null; then
        modes+=("$m")
        titles+=("$(ucxg_mode_title "$m")")
    fi
done
[ ${#modes[@]} -gt 0 ] || { echo "table.sh: no results in $out" >&2; exit 2; }

files=()
for m in "${modes[@]}"; do
    files+=("$out/$m"/*.res)
done

awk -F'\t' -v modes="${modes[*]}" -v titles="$(IFS='|'; echo "${titles[*]}")" '
function cls(t) { sub(/\..*/, "", t); return t }
function md(s) { gsub(/\|/, "\\|", s); return s }
BEGIN {
    nm = split(modes, mode, " ")
    split(titles, title, "|")
}
FNR == 1 {
    m = FILENAME; sub(/\/[^\/]*$/, "", m); sub(/.*\//, "", m)
}
NF >= 2 {
    st = $1; t = $2; why = $3; c = cls(t)
    n[m, st]++; n[m, "all"]++
    cn[c, m, st]++; cn[c, m, "all"]++
    if (!(c in seen)) { seen[c] = 1; classes[++nc] = c }
    if (st == "FAIL" || st == "SKIP" || st == "LISTED" || st == "XFAIL" ||
        st == "XPASS") {
        key = st SUBSEP t SUBSEP why
        if (!(key in where)) { order[++nk] = key; where[key] = m }
        else where[key] = where[key] ", " m
    }
}
function row(label, a, b, c2, d, e,   i, s, v) {
    s = "| " label
    for (i = 1; i <= nm; i++) {
        v = n[mode[i], a] + n[mode[i], b] + n[mode[i], c2] + n[mode[i], d] + n[mode[i], e]
        s = s " | " v
    }
    print s " |"
}
function header(first,   i, s) {
    s = "| " first
    for (i = 1; i <= nm; i++) s = s " | " title[i]
    print s " |"
    s = "| ---"
    for (i = 1; i <= nm; i++) s = s " | ---:"
    print s " |"
}
function listing(st, heading,   k, a, any) {
    any = 0
    for (k = 1; k <= nk; k++) {
        split(order[k], a, SUBSEP)
        if (a[1] != st) continue
        if (!any) {
            print ""; print heading; print ""
            print "| test | where | reason |"; print "| --- | --- | --- |"
            any = 1
        }
        printf "| `%s` | %s | %s |\n", a[2], where[order[k]], md(a[3])
    }
}
END {
    header("")
    row("tests listed by gtest", "all")
    row("run", "PASS", "FAIL", "XFAIL", "XPASS")
    row("passed", "PASS", "XPASS")
    row("failed", "FAIL")
    row("expected failures (rc_verbs.xfail)", "XFAIL")
    row("skipped by the test itself", "SKIP")
    row("skipped by a skip list", "LISTED")
    print ""
    print "Per class: passed/run, then +N skipped (by the test or by"
    print "a skip list), xN expected failures; a bold cell has failures."
    print ""
    header("class")
    for (k = 1; k <= nc; k++) {
        c = classes[k]; s = "| `" c "`"
        for (i = 1; i <= nm; i++) {
            mm = mode[i]
            if (cn[c, mm, "all"] == 0) { s = s " | -"; continue }
            run = cn[c, mm, "PASS"] + cn[c, mm, "FAIL"] + cn[c, mm, "XFAIL"] + cn[c, mm, "XPASS"]
            v = (cn[c, mm, "PASS"] + cn[c, mm, "XPASS"]) "/" run
            sk = cn[c, mm, "SKIP"] + cn[c, mm, "LISTED"]
            if (sk) v = v " +" sk
            if (cn[c, mm, "XFAIL"]) v = v " x" cn[c, mm, "XFAIL"]
            if (cn[c, mm, "FAIL"]) v = "**" v "**"
            s = s " | " v
        }
        print s " |"
    }
    listing("FAIL", "Failures:")
    listing("XFAIL", "Expected failures of rc_verbs on softverbs (rc_verbs.xfail):")
    listing("XPASS", "Listed in rc_verbs.xfail but passed:")
    listing("LISTED", "Not run on rc_ib2 (rc_ib2.skip, rc_ib2-MODE.skip):")
    listing("SKIP", "Skipped by the test itself:")
}' "${files[@]}"
