# Registration cache: unit, memory-event and stress tests, and a short run of
# the benchmark (it must complete; its numbers are recorded in docs/).
# sanitizer: yes
ib2_gtest reg_cache "$BUILD/test/gtest/reg_cache/test_rcache"
if [ -z "${IB2_PREFIX:-}" ]; then
    ib2_check reg_cache/benchmark-runs \
        "$BUILD/contrib/bench/rcache/ib2_rcache_bench" -r 1 -m 100000
fi
