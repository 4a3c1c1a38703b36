/* The numbers and pieces of SOFTVERBS_FAULTS (sv_fault_parse.c): whole
 * numbers are decimal digits, range-checked; an empty piece is an error
 * naming where it is; an error message is never cut short. */
#include "sv_test.h"
#include "softverbs.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

using namespace sv;

namespace {

/* The error for spec, or "(accepted)"; no rule stays set either way
 * (an accepted send_wc rule would fail every later test's requests). */
std::string fault_err(const std::string &spec)
{
    char err[4096] = "";
    int rc = softverbs_faults(spec.c_str(), err, sizeof(err));

    softverbs_faults(nullptr, nullptr, 0);
    return (rc == EINVAL) ? err : (rc == 0) ? "(accepted)" : "(refused "
           "with " + std::to_string(rc) + ")";
}

struct Case {
    const char *spec, *says;
};

void expect_errors(const Case *cases, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        std::string e = fault_err(cases[i].spec);
        EXPECT_NE(e.find(cases[i].says), std::string::npos)
            << cases[i].spec << " gave: " << e;
    }
}

/* The (1-based) registrations of n that fail under rules. */
std::vector<int> failing_regs(Dev &d, const char *rules, int n)
{
    std::vector<int> failed;
    std::vector<char> mem(4096);

    EXPECT_EQ(softverbs_faults(rules, nullptr, 0), 0) << rules;
    for (int i = 1; i <= n; ++i) {
        ibv_mr *mr = ibv_reg_mr(d.pd, mem.data(), mem.size(), 0);
        if (mr == nullptr) {
            failed.push_back(i);
        } else {
            ibv_dereg_mr(mr);
        }
    }
    softverbs_faults(nullptr, nullptr, 0);
    return failed;
}

} // namespace

/* No sign (strtoull wraps -1 to 2^64-1: a rule that never fires), no
 * base prefix, no suffix on counts; above 2^64, or a size whose suffix
 * overflows, is too large. */
TEST(FaultNumbers, NotDecimalOrOutOfRangeIsRefused)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    const Case cases[] = {
        { "reg_mr/after=-1", "after=-1: give a whole number of at least 0 "
                             "in decimal digits" },
        { "post_send/count=-1", "count=-1: give a whole number of at "
                                "least 1" },
        { "post_send/every=-5", "every=-5: give a whole number" },
        { "reg_mr/after=+3", "after=+3: give a whole number" },
        { "reg_mr/after=0x10", "after=0x10: give a whole number" },
        { "reg_mr/after=3k", "after=3k: give a whole number" },
        { "reg_mr/after= 3", "after= 3: give a whole number" },
        { "seed=-2", "seed=-2: give a whole number" },
        { "reg_mr/after=18446744073709551616", "after=18446744073709551616 "
                                               "is too large" },
        { "reg_mr/min=99999999999g", "min=99999999999g is too large" },
        { "reg_mr/min=16777216t", "min=16777216t is too large" },
        { "reg_mr/min=-1k", "min=-1k: give a whole number of at least 1" },
        { "reg_mr/min=1kk", "min=1kk: give a whole number" },
        { "delay/time=-5ms", "time=-5ms: give a whole number with a unit, "
                             "ns, us, ms or s, in decimal digits" },
        { "delay/time=0x5ms", "time=0x5ms: give a whole number" },
        { "delay/time=99999999999999999999s", "is too long" },
        { "send_wc/qp=-1", "qp=-1: give 'any', an ordinal '#N', or a "
                           "number from 1 to 0xffffffff" },
        { "send_wc/qp=0x100000000", "qp=0x100000000: give 'any'" },
        { "send_wc/mr=0x", "mr=0x: give 'any'" },
        { "send_wc/qp=#-1", "qp=#-1: an ordinal is #1" },
        { "send_wc/qp=#0x2", "qp=#0x2: an ordinal is #1" },
        { "post_send/prob=0x1p-1", "prob=0x1p-1: give a probability" },
        { "post_send/prob=nan", "prob=nan: give a probability" },
        { "post_send/prob= 0.5", "prob= 0.5: give a probability" },
    };
    expect_errors(cases, sizeof(cases) / sizeof(cases[0]));
    const char *good[] = {
        "reg_mr/min=1k", "reg_mr/min=17592186044415k",
        "seed=18446744073709551615", "send_wc/mr=0x1a2b/qp=4660",
        "send_wc/qp=#4294967295", "delay/time=4611686018427387903ns",
        "post_send/prob=1e-3", "post_send/after=0/every=1/count=1",
    };
    for (const char *g : good) {
        EXPECT_EQ(fault_err(g), "(accepted)") << g;
    }
}

/* A leading 0 is decimal, not octal: after=010 passes ten operations. */
TEST(FaultNumbers, LeadingZeroIsDecimal)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(failing_regs(d, "reg_mr/after=010/count=1", 12),
              std::vector<int>{ 11 });
    EXPECT_EQ(failing_regs(d, "reg_mr/after=007/every=002/count=2", 12),
              (std::vector<int>{ 8, 10 }));
}

/* Empty pieces are not skipped: '//', a '/' at the end, '+' without an
 * op on one side. */
TEST(FaultNumbers, EmptyPiecesAreRefused)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    const Case cases[] = {
        { "post_send//after=1", "a KEY=VALUE is missing between two '/'" },
        { "post_send/after=1/", "a KEY=VALUE is missing after the last "
                                "'/'" },
        { "post_send/", "a KEY=VALUE is missing after the last '/'" },
        { "send_wc/op=send+", "op=send+: an op is missing after the last "
                              "'+'" },
        { "send_wc/op=send++write", "op=send++write: an op is missing "
                                    "between two '+'" },
        { "send_wc/op=+send", "op=+send: an op is missing before a '+'" },
    };
    expect_errors(cases, sizeof(cases) / sizeof(cases[0]));
    EXPECT_EQ(fault_err("send_wc/op=send+write+read+atomic"), "(accepted)");
}

/* A long value is quoted whole and the advice after it is kept, from
 * softverbs_faults and on stderr from the environment. */
TEST(FaultNumbers, LongMessagesAreWhole)
{
    Dev d;
    ASSERT_TRUE(d.ok());
    std::string v(300, '1'), x(300, 'x');
    std::string e = fault_err("reg_mr/min=" + v);
    EXPECT_NE(e.find("min=" + v + " is too large: give a whole number of "
                     "at least 1 and below 2^64 bytes"), std::string::npos)
        << e;
    e = fault_err("reg_mr/min=" + x);
    EXPECT_NE(e.find("a size may end in k, m, g or t)"), std::string::npos)
        << e;
    e = fault_err("send_wc/status=" + x);
    EXPECT_NE(e.find("loc_len, loc_qp_op or general"), std::string::npos)
        << e;

    std::string log = "/tmp/sv-fault-msg-" + std::to_string(getpid());
    std::string env = "SOFTVERBS_FAULTS=reg_mr/min=" + x;
    int rc = run_child_env({ env }, [&log] {
        int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        SV_CHILD_CHECK(fd >= 0 && dup2(fd, 2) == 2, 10);
        int n = -1;
        SV_CHILD_CHECK(ibv_get_device_list(&n) == nullptr, 11);
        return 0;
    });
    EXPECT_EQ(rc, 0);
    FILE *f = fopen(log.c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string out;
    char buf[1024];
    size_t k;
    while ((k = fread(buf, 1, sizeof(buf), f)) > 0) {
        out.append(buf, k);
    }
    fclose(f);
    unlink(log.c_str());
    EXPECT_NE(out.find("min=" + x + ": give a whole number of at least 1 "
                       "in decimal digits (no sign, no base prefix; a size "
                       "may end in k, m, g or t)\n"), std::string::npos)
        << out;
}
