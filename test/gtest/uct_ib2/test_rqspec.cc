/*
 * The receive queue specification (UCX_IB2_RECEIVE_QUEUES): the openib
 * syntax, its documented defaults, and an error for every malformed input
 * that names the queue, the token and the rule it breaks.
 */
#include "ib2_rqspec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

struct Parsed {
    int             rc;
    ib2_rq_config_t cfg;
    std::string     err;
};

Parsed parse(const std::string &spec)
{
    Parsed p;
    char err[512];

    memset(&p.cfg, 0xa5, sizeof(p.cfg));
    err[0] = '\0';
    p.rc   = ib2_rq_parse(spec.c_str(), &p.cfg, err, sizeof(err));
    p.err  = err;
    return p;
}

std::string format(const ib2_rq_config_t &cfg)
{
    char buf[1024];

    ib2_rq_format(&cfg, buf, sizeof(buf));
    return buf;
}

void expect_p(const ib2_rq_spec_t &q, unsigned size, unsigned num,
              unsigned low_wm, unsigned window, unsigned reserved)
{
    EXPECT_EQ(q.type, IB2_RQ_PER_PEER);
    EXPECT_EQ(q.size, size);
    EXPECT_EQ(q.num, num);
    EXPECT_EQ(q.low_wm, low_wm);
    EXPECT_EQ(q.window, window);
    EXPECT_EQ(q.reserved, reserved);
}

void expect_s(const ib2_rq_spec_t &q, unsigned size, unsigned num,
              unsigned low_wm, unsigned max_pending)
{
    EXPECT_EQ(q.type, IB2_RQ_SHARED);
    EXPECT_EQ(q.size, size);
    EXPECT_EQ(q.num, num);
    EXPECT_EQ(q.low_wm, low_wm);
    EXPECT_EQ(q.max_pending, max_pending);
}

/* The error names every given fragment. */
void expect_error(const std::string &spec,
                  const std::vector<std::string> &fragments)
{
    Parsed p = parse(spec);

    EXPECT_EQ(p.rc, -1) << "accepted: " << spec;
    EXPECT_EQ(p.cfg.count, 0u) << spec;
    EXPECT_FALSE(p.err.empty()) << spec;
    for (const std::string &f : fragments) {
        EXPECT_NE(p.err.find(f), std::string::npos)
            << "spec \"" << spec << "\": error \"" << p.err
            << "\" does not mention \"" << f << "\"";
    }
}

} // namespace

/* ---- valid specifications and their defaults ---------------------------- */

TEST(RqParse, PerPeerAllExplicit)
{
    Parsed p = parse("P,128,256,192,128,5");

    ASSERT_EQ(p.rc, 0) << p.err;
    ASSERT_EQ(p.cfg.count, 1u);
    expect_p(p.cfg.q[0], 128, 256, 192, 128, 5);
    EXPECT_EQ(p.cfg.q[0].max_pending, 0u);
}

TEST(RqParse, PerPeerDefaults)
{
    /* low_watermark = num/2, window = low_watermark/2,
     * reserved = (2*num-1)/window */
    Parsed p = parse("P,128,256");

    ASSERT_EQ(p.rc, 0) << p.err;
    ASSERT_EQ(p.cfg.count, 1u);
    expect_p(p.cfg.q[0], 128, 256, 128, 64, 511 / 64);

    /* the seed's example: 16 buffers, watermark 4 -> window 2,
     * reserved (32-1)/2 = 15 */
    p = parse("P,128,16,4");
    ASSERT_EQ(p.rc, 0) << p.err;
    expect_p(p.cfg.q[0], 128, 16, 4, 2, 15);

    /* explicit window, default reserved */
    p = parse("P,128,256,192,128");
    ASSERT_EQ(p.rc, 0) << p.err;
    expect_p(p.cfg.q[0], 128, 256, 192, 128, 511 / 128);

    p = parse("P,4096,100,10,7");
    ASSERT_EQ(p.rc, 0) << p.err;
    expect_p(p.cfg.q[0], 4096, 100, 10, 7, 199 / 7);
}

TEST(RqParse, PerPeerDefaultsAtLeastOne)
{
    /* one buffer: watermark 0, window and reserved at least 1 */
    Parsed p = parse("P,64,1");

    ASSERT_EQ(p.rc, 0) << p.err;
    expect_p(p.cfg.q[0], 64, 1, 0, 1, 1);

    p = parse("P,64,3");
    ASSERT_EQ(p.rc, 0) << p.err;
    expect_p(p.cfg.q[0], 64, 3, 1, 1, 5);

    p = parse("P,64,4,2,2");
    ASSERT_EQ(p.rc, 0) << p.err;
    expect_p(p.cfg.q[0], 64, 4, 2, 2, 7 / 2);

    /* explicit watermark 0 */
    p = parse("P,64,8,0");
    ASSERT_EQ(p.rc, 0) << p.err;
    expect_p(p.cfg.q[0], 64, 8, 0, 1, 15);
}

TEST(RqParse, SharedAllExplicit)
{
    Parsed p = parse("S,1024,256,128,32");

    ASSERT_EQ(p.rc, 0) << p.err;
    ASSERT_EQ(p.cfg.count, 1u);
    expect_s(p.cfg.q[0], 1024, 256, 128, 32);
    EXPECT_EQ(p.cfg.q[0].window, 0u);
    EXPECT_EQ(p.cfg.q[0].reserved, 0u);
}

TEST(RqParse, SharedDefaults)
{
    /* low_watermark = num/2, max_pending_sends = low_watermark/4 */
    Parsed p = parse("S,1024,256");

    ASSERT_EQ(p.rc, 0) << p.err;
    expect_s(p.cfg.q[0], 1024, 256, 128, 32);

    p = parse("S,1024,256,100");
    ASSERT_EQ(p.rc, 0) << p.err;
    expect_s(p.cfg.q[0], 1024, 256, 100, 25);

    /* at least one send may be pending */
    p = parse("S,1024,4");
    ASSERT_EQ(p.rc, 0) << p.err;
    expect_s(p.cfg.q[0], 1024, 4, 2, 1);

    p = parse("S,1024,1");
    ASSERT_EQ(p.rc, 0) << p.err;
    expect_s(p.cfg.q[0], 1024, 1, 0, 1);
}

TEST(RqParse, Mixed)
{
    Parsed p = parse("P,128,256,192,128:S,2048,1024,1008,64:"
                     "S,8256,1024,1008,64:S,65536,256,192,32");

    ASSERT_EQ(p.rc, 0) << p.err;
    ASSERT_EQ(p.cfg.count, 4u);
    expect_p(p.cfg.q[0], 128, 256, 192, 128, 3);
    expect_s(p.cfg.q[1], 2048, 1024, 1008, 64);
    expect_s(p.cfg.q[2], 8256, 1024, 1008, 64);
    expect_s(p.cfg.q[3], 65536, 256, 192, 32);

    p = parse("S,256,64:P,4096,32");
    ASSERT_EQ(p.rc, 0) << p.err;
    ASSERT_EQ(p.cfg.count, 2u);
    expect_s(p.cfg.q[0], 256, 64, 32, 8);
    expect_p(p.cfg.q[1], 4096, 32, 16, 8, 63 / 8);
}

TEST(RqParse, Limits)
{
    /* the smallest and largest buffers and the most buffers */
    Parsed p = parse("P,32,1:S,16777216,65536,0,65536");

    ASSERT_EQ(p.rc, 0) << p.err;
    ASSERT_EQ(p.cfg.count, 2u);
    EXPECT_EQ(p.cfg.q[0].size, (unsigned)IB2_RQ_MIN_SIZE);
    EXPECT_EQ(p.cfg.q[1].size, IB2_RQ_MAX_SIZE);
    EXPECT_EQ(p.cfg.q[1].num, (unsigned)IB2_RQ_MAX_NUM);
    EXPECT_EQ(p.cfg.q[1].max_pending, (unsigned)IB2_RQ_MAX_NUM);

    /* window = num, reserved at its maximum */
    p = parse("P,128,16,8,16,65536");
    ASSERT_EQ(p.rc, 0) << p.err;
    expect_p(p.cfg.q[0], 128, 16, 8, 16, 65536);

    /* the watermark just below num */
    p = parse("S,128,16,15,16");
    ASSERT_EQ(p.rc, 0) << p.err;
    expect_s(p.cfg.q[0], 128, 16, 15, 16);
}

TEST(RqParse, EightQueues)
{
    std::string spec;

    for (unsigned i = 0; i < IB2_MAX_QUEUES; ++i) {
        spec += (i ? ":" : "");
        spec += (i % 2 ? "S," : "P,") + std::to_string(64u << i) + ",16";
    }
    Parsed p = parse(spec);
    ASSERT_EQ(p.rc, 0) << p.err;
    ASSERT_EQ(p.cfg.count, (unsigned)IB2_MAX_QUEUES);
    for (unsigned i = 0; i < IB2_MAX_QUEUES; ++i) {
        EXPECT_EQ(p.cfg.q[i].size, 64u << i);
        EXPECT_EQ(p.cfg.q[i].type, i % 2 ? IB2_RQ_SHARED : IB2_RQ_PER_PEER);
    }
}

/* ---- malformed specifications ---------------------------------------------- */

TEST(RqParse, NotANumber)
{
    expect_error("P,12x,256", {"queue 1", "\"P,12x,256\"", "size",
                               "\"12x\"", "not a non-negative number"});
    expect_error("P,128,abc", {"queue 1", "number of buffers", "\"abc\"",
                               "not a non-negative number"});
    expect_error("P,128,256,-1", {"low watermark", "\"-1\"",
                                  "not a non-negative number"});
    expect_error("P,128,256,128,x", {"window", "\"x\"",
                                     "not a non-negative number"});
    expect_error("P,128,256,128,64,1.5", {"reserved", "\"1.5\"",
                                          "not a non-negative number"});
    expect_error("S,1024,256,128,many", {"max pending sends", "\"many\"",
                                         "not a non-negative number"});
    /* empty fields, spaces, signs and hex are not numbers here */
    expect_error("P,,256", {"queue 1", "size", "\"\"",
                            "not a non-negative number"});
    expect_error("P,128,", {"number of buffers", "\"\"",
                            "not a non-negative number"});
    expect_error("P,128, 256", {"number of buffers", "\" 256\"",
                                "not a non-negative number"});
    expect_error("P,+128,256", {"size", "\"+128\"",
                                "not a non-negative number"});
    expect_error("S,0x400,256", {"size", "\"0x400\"",
                                 "not a non-negative number"});
    /* in a later queue: that queue is named */
    expect_error("P,128,256:S,8k,64", {"queue 2", "\"S,8k,64\"", "size",
                                       "\"8k\"",
                                       "not a non-negative number"});
}

TEST(RqParse, NumberTooLarge)
{
    expect_error("P,99999999999999999999,4", {"queue 1", "size",
                                              "\"99999999999999999999\"",
                                              "too large"});
    expect_error("S,128,4294967296", {"number of buffers", "\"4294967296\"",
                                      "too large"});
}

TEST(RqParse, TooFewFields)
{
    expect_error("P", {"queue 1", "\"P\"", "P queue takes 2 to 5 numbers",
                       "not 0"});
    expect_error("P,128", {"queue 1", "\"P,128\"",
                           "P queue takes 2 to 5 numbers",
                           "P,<size>,<num>", "not 1"});
    expect_error("S,128", {"\"S,128\"", "S queue takes 2 to 4 numbers",
                           "S,<size>,<num>", "not 1"});
    expect_error("P,128,16:S", {"queue 2", "S queue takes 2 to 4 numbers",
                                "not 0"});
}

TEST(RqParse, TooManyFields)
{
    expect_error("P,128,256,128,64,4,1", {"queue 1",
                                          "\"P,128,256,128,64,4,1\"",
                                          "P queue takes 2 to 5 numbers",
                                          "[,<low_watermark>[,<window>"
                                          "[,<reserved>]]]", "not 6"});
    expect_error("S,1024,256,128,32,1", {"\"S,1024,256,128,32,1\"",
                                         "S queue takes 2 to 4 numbers",
                                         "[,<low_watermark>"
                                         "[,<max_pending_sends>]]",
                                         "not 5"});
    expect_error("P,64,16:X,1024,256,128,32,1",
                 {"queue 2", "X queue takes 2 to 4 numbers", "not 5"});
}

TEST(RqParse, TooManyFieldsCountIsExact)
{
    /* the message states how many numbers were given, however many */
    expect_error("P,1,2,3,4,5,6,7", {"P queue takes 2 to 5 numbers",
                                     "not 7"});
    expect_error("S,128,16,8,4,1,1,1,1,1", {"S queue takes 2 to 4 numbers",
                                            "not 9"});
}

TEST(RqParse, UnknownType)
{
    expect_error("Q,128,256", {"queue 1", "type \"Q\"",
                               "not P (per-peer), S (shared) or X (XRC)"});
    expect_error("p,128,256", {"type \"p\"", "not P (per-peer)"});
    expect_error("PP,128,256", {"type \"PP\""});
    expect_error("128,256", {"type \"128\""});
    expect_error("P,128,16:SRQ,1024,64", {"queue 2", "type \"SRQ\""});
}

TEST(RqParse, XrcAllOrNone)
{
    /* X queues alone are taken, with S queue defaults */
    Parsed p = parse("X,256,1024:X,8256,512,256,32");
    ASSERT_EQ(p.err, "");
    ASSERT_EQ(p.cfg.count, 2u);
    EXPECT_EQ(p.cfg.q[0].type, IB2_RQ_XRC);
    EXPECT_EQ(p.cfg.q[0].low_wm, 512u);
    EXPECT_EQ(p.cfg.q[0].max_pending, 128u);
    EXPECT_EQ(p.cfg.q[1].max_pending, 32u);
    /* mixed with P or S queues: refused, naming the queue */
    expect_error("P,128,256:X,4096,256,128,32",
                 {"queue 2 is an X (XRC) queue but queue 1 is not",
                  "every queue is X or none"});
    expect_error("X,128,256:S,1024,64:X,65536,16",
                 {"queue 2 is not an X (XRC) queue but queue 1 is"});
}

TEST(RqParse, XrcSyntaxCheckedFirst)
{
    /* a malformed X queue gets the syntax error, not the mixing one */
    expect_error("X,4096,oops", {"queue 1", "number of buffers", "\"oops\"",
                                 "not a non-negative number"});
    expect_error("X,4096,256,300", {"low watermark 300", "less than"});
}

TEST(RqParse, LowWatermarkNotBelowNum)
{
    expect_error("S,1024,256,300", {"queue 1", "\"S,1024,256,300\"",
                                    "low watermark 300",
                                    "must be less than the number of "
                                    "buffers 256"});
    expect_error("P,128,16,16", {"low watermark 16",
                                 "must be less than the number of "
                                 "buffers 16"});
    expect_error("P,128,16,4:S,1024,8,8", {"queue 2", "low watermark 8",
                                           "less than the number of "
                                           "buffers 8"});
}

TEST(RqParse, WindowOutOfRange)
{
    expect_error("P,128,16,4,0", {"queue 1", "window 0",
                                  "must be between 1 and the number of "
                                  "buffers 16"});
    expect_error("P,128,16,4,17", {"window 17",
                                   "between 1 and the number of buffers "
                                   "16"});
}

TEST(RqParse, ReservedOutOfRange)
{
    expect_error("P,128,16,4,2,0", {"queue 1", "reserved 0",
                                    "must be between 1 and 65536"});
    expect_error("P,128,16,4,2,65537", {"reserved 65537",
                                        "between 1 and 65536"});
}

TEST(RqParse, MaxPendingOutOfRange)
{
    expect_error("S,1024,64,32,0", {"queue 1", "max pending sends 0",
                                    "between 1 and the number of buffers "
                                    "64"});
    expect_error("S,1024,64,32,65", {"max pending sends 65",
                                     "between 1 and the number of buffers "
                                     "64"});
}

TEST(RqParse, SizeLimits)
{
    expect_error("P,31,16", {"queue 1", "size 31",
                             "must be between 32 and 16777216 bytes"});
    expect_error("S,16777217,16", {"size 16777217",
                                   "between 32 and 16777216 bytes"});
    expect_error("P,0,16", {"size 0", "between 32"});
    expect_error("P,128,16:S,20000000,4", {"queue 2", "size 20000000"});
}

TEST(RqParse, NumLimits)
{
    expect_error("P,128,0", {"queue 1", "number of buffers 0",
                             "must be between 1 and 65536"});
    expect_error("S,128,65537", {"number of buffers 65537",
                                 "between 1 and 65536"});
}

TEST(RqParse, SizesNotAscending)
{
    expect_error("P,8192,64:S,1024,256", {"queue 2", "\"S,1024,256\"",
                                          "size 1024",
                                          "larger than the size 8192",
                                          "ascending"});
    expect_error("P,128,64:P,128,64", {"queue 2", "size 128",
                                       "larger than the size 128",
                                       "ascending"});
    expect_error("P,128,64:S,1024,64:S,512,64", {"queue 3", "size 512",
                                                 "larger than the size "
                                                 "1024"});
}

TEST(RqParse, EmptyQueue)
{
    expect_error("", {"empty", "at least one queue"});
    expect_error("P,128,4::S,1024,8", {"queue 2", "empty queue"});
    expect_error(":P,128,4", {"queue 1", "empty queue"});
    expect_error("P,128,4:", {"queue 2", "empty queue"});
    expect_error(":", {"queue 1", "empty queue"});

    ib2_rq_config_t cfg;
    char err[256];
    EXPECT_EQ(ib2_rq_parse(nullptr, &cfg, err, sizeof(err)), -1);
    EXPECT_NE(std::string(err).find("empty"), std::string::npos) << err;
}

TEST(RqParse, MoreThanEightQueues)
{
    std::string spec;

    for (unsigned i = 0; i <= IB2_MAX_QUEUES; ++i) {
        spec += (i ? ":" : "");
        spec += "S," + std::to_string(64u << i) + ",16";
    }
    expect_error(spec, {"queue 9", "at most 8 queues"});
}

TEST(RqParse, ErrorMessageTruncatedSafely)
{
    /* a small error buffer gets a terminated prefix, never an overrun */
    ib2_rq_config_t cfg;
    char err[24];

    memset(err, 'z', sizeof(err));
    EXPECT_EQ(ib2_rq_parse("P,12x,256", &cfg, err, 16), -1);
    EXPECT_EQ(strlen(err), 15u);
    EXPECT_EQ(err[16], 'z');
}

/* ---- select and format ---------------------------------------------------- */

TEST(RqSelect, SmallestQueueThatFits)
{
    Parsed p = parse("P,128,16:S,2048,64:S,8256,64");

    ASSERT_EQ(p.rc, 0) << p.err;
    EXPECT_EQ(ib2_rq_select(&p.cfg, 0), 0);
    EXPECT_EQ(ib2_rq_select(&p.cfg, 1), 0);
    EXPECT_EQ(ib2_rq_select(&p.cfg, 127), 0);
    EXPECT_EQ(ib2_rq_select(&p.cfg, 128), 0);
    EXPECT_EQ(ib2_rq_select(&p.cfg, 129), 1);
    EXPECT_EQ(ib2_rq_select(&p.cfg, 2048), 1);
    EXPECT_EQ(ib2_rq_select(&p.cfg, 2049), 2);
    EXPECT_EQ(ib2_rq_select(&p.cfg, 8256), 2);
    EXPECT_EQ(ib2_rq_select(&p.cfg, 8257), -1);
    EXPECT_EQ(ib2_rq_select(&p.cfg, (size_t)1 << 40), -1);

    p = parse("S,64,16");
    ASSERT_EQ(p.rc, 0) << p.err;
    EXPECT_EQ(ib2_rq_select(&p.cfg, 64), 0);
    EXPECT_EQ(ib2_rq_select(&p.cfg, 65), -1);

    ib2_rq_config_t none;
    none.count = 0;
    EXPECT_EQ(ib2_rq_select(&none, 1), -1);
}

TEST(RqFormat, CanonicalForm)
{
    Parsed p = parse("P,128,256:S,8256,1024");

    ASSERT_EQ(p.rc, 0) << p.err;
    EXPECT_EQ(format(p.cfg), "P,128,256,128,64,7:S,8256,1024,512,128");

    p = parse("P,128,256,192,128,5");
    ASSERT_EQ(p.rc, 0) << p.err;
    EXPECT_EQ(format(p.cfg), "P,128,256,192,128,5");
}

TEST(RqFormat, RoundTrip)
{
    const char *specs[] = {
        "P,128,256",
        "P,128,16,4",
        "S,1024,256,128,32",
        "P,128,256,192,128:S,2048,1024,1008,64:S,8256,1024,1008,64:"
        "S,65536,256,192,32",
        "S,256,1024,512,64:S,8256,512,256,32",
        "P,64,32,16,8:S,1024,256,128,16:S,8256,256,128,16",
        "P,32,1:S,16777216,65536,0,65536",
        "P,64,4,2,2",
        "P,64,8:S,128,8:P,256,8:S,512,8:P,1024,8:S,2048,8:P,4096,8:"
        "S,8192,8",
    };

    for (const char *spec : specs) {
        Parsed a = parse(spec);
        ASSERT_EQ(a.rc, 0) << spec << ": " << a.err;
        std::string canon = format(a.cfg);
        Parsed b = parse(canon);
        ASSERT_EQ(b.rc, 0) << canon << ": " << b.err;
        ASSERT_EQ(b.cfg.count, a.cfg.count) << spec;
        for (unsigned i = 0; i < a.cfg.count; ++i) {
            EXPECT_EQ(b.cfg.q[i].type, a.cfg.q[i].type) << spec;
            EXPECT_EQ(b.cfg.q[i].size, a.cfg.q[i].size) << spec;
            EXPECT_EQ(b.cfg.q[i].num, a.cfg.q[i].num) << spec;
            EXPECT_EQ(b.cfg.q[i].low_wm, a.cfg.q[i].low_wm) << spec;
            EXPECT_EQ(b.cfg.q[i].window, a.cfg.q[i].window) << spec;
            EXPECT_EQ(b.cfg.q[i].reserved, a.cfg.q[i].reserved) << spec;
            EXPECT_EQ(b.cfg.q[i].max_pending, a.cfg.q[i].max_pending)
                << spec;
        }
        /* canonical is a fixed point */
        EXPECT_EQ(format(b.cfg), canon) << spec;
    }
}

TEST(RqFormat, XrcQueue)
{
    /* format writes X queues (the parser would refuse this mix) */
    ib2_rq_config_t cfg;

    cfg.count          = 2;
    cfg.q[0]           = {IB2_RQ_PER_PEER, 128, 16, 8, 4, 7, 0};
    cfg.q[1]           = {IB2_RQ_XRC, 4096, 64, 32, 0, 0, 8};
    EXPECT_EQ(format(cfg), "P,128,16,8,4,7:X,4096,64,32,8");
}

TEST(RqFormat, SmallBufferTerminated)
{
    Parsed p = parse("P,128,256:S,8256,1024");
    char buf[16];

    ASSERT_EQ(p.rc, 0) << p.err;
    memset(buf, 'z', sizeof(buf));
    ib2_rq_format(&p.cfg, buf, 10);
    EXPECT_EQ(strlen(buf), 9u);
    EXPECT_EQ(std::string(buf), "P,128,256");
    EXPECT_EQ(buf[10], 'z');
}
