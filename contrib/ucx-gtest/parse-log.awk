# Reads the output of one run of UCX's gtest binary and prints one line per
# test that finished, and one for a test that started but did not finish:
#   STATUS <TAB> FULL-NAME <TAB> REASON
# STATUS is PASS, SKIP (the test skipped itself; REASON is its message),
# FAIL (REASON: the first failure the log shows) or RUNNING (the process
# ended inside this test: crash, abort or hang; REASON: what it printed).
# Used by run-class.sh.

function squeeze(s) {
    gsub(/[ \t]+/, " ", s)
    sub(/^ /, "", s)
    sub(/ $/, "", s)
    return s
}

function base(path) {
    sub(/.*\//, "", path)
    return path
}

function reason(   r) {
    if (failure != "") {
        r = failure
        if (warn != "")
            r = r " " warn
    } else if (ucx_err != "") {
        r = ucx_err
    } else if (crash != "") {
        r = crash
    } else {
        r = "no failure message in the log"
    }
    r = squeeze(r)
    if (length(r) > 300)
        r = substr(r, 1, 297) "..."
    return r
}

function run_reason(   r) {
    if (crash != "") {
        r = squeeze(crash)
        if (frames != "")
            r = r "; at " frames
        if (length(r) > 300)
            r = substr(r, 1, 297) "..."
        return r
    }
    return reason()
}

function start(name) {
    cur = name
    failure = ""; capture = 0; warn = ""; ucx_err = ""; crash = ""
    skip = ""; skipped = 0; watchdog = 0; inbt = 0; frames = ""; nframes = 0
}

/^\[ RUN      \] / {
    start($4)
    next
}

cur == "" { next }

/^\[       OK \] / && $4 == cur {
    if (skipped)
        printf "SKIP\t%s\t%s\n", cur, (skip == "" ? "skipped by the test" : skip)
    else
        printf "PASS\t%s\t\n", cur
    cur = ""
    next
}

/^\[  FAILED  \] / {
    name = $4
    sub(/,$/, "", name)
    if (name == cur) {
        printf "FAIL\t%s\t%s\n", cur, reason()
        cur = ""
        next
    }
}

# UCX's backtrace on a fatal signal: " N  /path/lib.so(symbol+0x..) [0x..]".
# The first frames outside UCS's error handling, libc and the signal
# trampoline say where the process was.
/^==== backtrace/ {
    inbt = 1
    next
}
inbt && /^=+$/ {
    inbt = 0
    next
}
inbt {
    if ($0 !~ /^ *[0-9]+ /) { inbt = 0; next }
    fr = $0
    sub(/^ *[0-9]+ +/, "", fr)
    sub(/ *\[0x[0-9a-f]*\] *$/, "", fr)
    lib = fr; sub(/\(.*/, "", lib); lib = base(lib)
    sym = fr; if (!sub(/^[^(]*\(/, "", sym)) sym = ""; sub(/\+0x[0-9a-f]*\)$/, "", sym); sub(/\)$/, "", sym)
    if (lib ~ /^(libucs\.so|libc\.so|libpthread)/ || sym == "" ||
        sym ~ /^(ucs_|__|raise|abort|pthread_kill|gsignal)/)
        next
    if (nframes < 3) {
        frames = frames (nframes ? " < " : "") sym " (" lib ")"
        nframes++
    }
    next
}

/abort testing/ {
    # the watchdog's own failure: "... - abort testing"
    watchdog = 1
    crash = "watchdog: the test made no progress within its time limit"
    next
}

# A gtest assertion: "<file>:<line>: Failure" and its message lines.
/: Failure$/ && failure == "" {
    failure = base($1) " "
    capture = 5
    next
}
capture > 0 {
    if ($0 ~ /^\[/ || $0 ~ /^$/) {
        capture = 0
    } else {
        failure = failure " " $0
        capture--
        next
    }
}

# UCS_TEST_SKIP_R: "[     SKIP ] (reason)", then the test ends "OK".
/^\[ *SKIP \] / {
    skipped = 1
    skip = $0
    sub(/^\[ *SKIP \] */, "", skip)
    sub(/^\(/, "", skip)
    sub(/\)$/, "", skip)
    next
}

# The warnings and errors that failed a test, printed after the test as
# "[     INFO ] < message >".
/^\[ *INFO \] < / && warn == "" {
    warn = $0
    sub(/^\[ *INFO \] /, "", warn)
    next
}

# UCX's own log lines: "[time] [host:pid:thread] file.c:123 UCX ERROR ..."
/ UCX  (ERROR|FATAL) / && ucx_err == "" {
    ucx_err = $0
    sub(/^\[[^]]*\] *\[[^]]*\] */, "", ucx_err)
    next
}

(/Caught signal/ || /Assertion .* failed/ || /terminate called/ ||
 /^Aborted/ || /Segmentation fault/) && crash == "" {
    crash = $0
    # UCX's message may follow an unfinished gtest INFO line
    if (!sub(/.*Caught signal/, "Caught signal", crash))
        sub(/^\[[^]]*\] *\[[^]]*\] */, "", crash)
    next
}

END {
    if (cur != "")
        printf "RUNNING\t%s\t%s\n", cur, run_reason()
}
