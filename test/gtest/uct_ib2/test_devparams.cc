/*
 * The device parameter file: sections matched by vendor and part id lists,
 * the first match wins, comments, and errors that name file and line.
 */
#include "ib2_devparams.h"
#include "ib2_rqspec.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

namespace {

class DevParams : public ::testing::Test {
protected:
    std::string path_;

    void TearDown() override
    {
        if (!path_.empty()) {
            unlink(path_.c_str());
        }
    }

    /* Writes text to a fresh temporary file. */
    const std::string &ini(const std::string &text)
    {
        char tmpl[] = "/tmp/ib2-devparams-XXXXXX";
        int fd      = mkstemp(tmpl);

        if (!path_.empty()) {
            unlink(path_.c_str());
        }
        EXPECT_GE(fd, 0);
        EXPECT_EQ(write(fd, text.data(), text.size()), (ssize_t)text.size());
        close(fd);
        path_ = tmpl;
        return path_;
    }

    int lookup(uint32_t vendor, uint32_t part, ib2_devparams_t *dp,
               std::string *err = nullptr)
    {
        char buf[512];
        int rc;

        buf[0] = '\0';
        rc = ib2_devparams_lookup(path_.c_str(), vendor, part, dp, buf,
                                  sizeof(buf));
        if (err != nullptr) {
            *err = buf;
        }
        return rc;
    }

    /* The lookup fails with an error naming path:line and each fragment. */
    void expect_error(const std::string &text, unsigned line,
                      const std::vector<std::string> &fragments,
                      uint32_t vendor = 0x02c9, uint32_t part = 4123)
    {
        ib2_devparams_t dp;
        std::string err;

        ini(text);
        EXPECT_EQ(lookup(vendor, part, &dp, &err), -1) << text;
        std::string where = path_ + ":" + std::to_string(line) + ":";
        EXPECT_NE(err.find(where), std::string::npos)
            << "error \"" << err << "\" does not say " << where;
        for (const std::string &f : fragments) {
            EXPECT_NE(err.find(f), std::string::npos)
                << "error \"" << err << "\" does not mention \"" << f << "\"";
        }
    }
};

const char *kTwoFamilies =
    "# adapters\n"
    "[Vendor A family 1]\n"
    "vendor_id = 0x02c9,0x119f\n"
    "vendor_part_id = 4115,4123,4124\n"
    "mtu = 4096\n"
    "max_inline_data = 256\n"
    "receive_queues = P,128,256,192,128:S,65536,256,192,32\n"
    "\n"
    "[Vendor A family 2]\n"
    "vendor_id = 0x02c9\n"
    "vendor_part_id = 4099,4100\n"
    "mtu = 2048\n"
    "max_inline_data = 128\n"
    "receive_queues = P,128,256,192,128:S,8256,1024,1008,64\n"
    "\n"
    "[Vendor B]\n"
    "vendor_id = 5157\n"
    "vendor_part_id = 0x5401\n"
    "mtu = 1024\n"
    "receive_queues = P,128,64:P,8256,64,32,16\n";

} // namespace

TEST_F(DevParams, MatchByVendorAndPartLists)
{
    ib2_devparams_t dp;

    ini(kTwoFamilies);
    /* every combination of the lists */
    for (uint32_t vendor : {0x02c9u, 0x119fu}) {
        for (uint32_t part : {4115u, 4123u, 4124u}) {
            ASSERT_EQ(lookup(vendor, part, &dp), 0);
            EXPECT_STREQ(dp.section, "Vendor A family 1");
            EXPECT_EQ(dp.mtu, 4096u);
            EXPECT_EQ(dp.max_inline, 256);
            EXPECT_STREQ(dp.receive_queues,
                         "P,128,256,192,128:S,65536,256,192,32");
        }
    }

    ASSERT_EQ(lookup(0x02c9, 4100, &dp), 0);
    EXPECT_STREQ(dp.section, "Vendor A family 2");
    EXPECT_EQ(dp.mtu, 2048u);
    EXPECT_EQ(dp.max_inline, 128);
    EXPECT_STREQ(dp.receive_queues, "P,128,256,192,128:S,8256,1024,1008,64");

    /* decimal vendor 5157 = 0x1425, hex part 0x5401 = 21505 */
    ASSERT_EQ(lookup(0x1425, 21505, &dp), 0);
    EXPECT_STREQ(dp.section, "Vendor B");
    EXPECT_EQ(dp.mtu, 1024u);
    EXPECT_EQ(dp.max_inline, -1) << "not given in the section";
    EXPECT_STREQ(dp.receive_queues, "P,128,64:P,8256,64,32,16");
}

TEST_F(DevParams, NoMatch)
{
    ib2_devparams_t dp;

    ini(kTwoFamilies);
    /* right vendor, wrong part; right part, wrong vendor; neither */
    for (auto ids : {std::make_pair(0x02c9u, 4101u),
                     std::make_pair(0x119fu, 4099u),
                     std::make_pair(0x8086u, 4123u),
                     std::make_pair(0xffffffu, 0u)}) {
        memset(&dp, 0x5a, sizeof(dp));
        ASSERT_EQ(lookup(ids.first, ids.second, &dp), 0);
        EXPECT_STREQ(dp.section, "") << ids.first << "/" << ids.second;
        EXPECT_EQ(dp.mtu, 0u);
        EXPECT_EQ(dp.max_inline, -1);
        EXPECT_STREQ(dp.receive_queues, "");
    }
}

TEST_F(DevParams, FirstMatchWins)
{
    ib2_devparams_t dp;

    ini("[first]\n"
        "vendor_id = 0x15b3\n"
        "vendor_part_id = 4123\n"
        "mtu = 512\n"
        "receive_queues = S,1024,64\n"
        "[second]\n"
        "vendor_id = 0x15b3\n"
        "vendor_part_id = 1,4123\n"
        "mtu = 4096\n"
        "max_inline_data = 64\n"
        "receive_queues = S,2048,64\n");
    ASSERT_EQ(lookup(0x15b3, 4123, &dp), 0);
    EXPECT_STREQ(dp.section, "first");
    EXPECT_EQ(dp.mtu, 512u);
    EXPECT_EQ(dp.max_inline, -1) << "the second section's value leaked";
    EXPECT_STREQ(dp.receive_queues, "S,1024,64");

    ASSERT_EQ(lookup(0x15b3, 1, &dp), 0);
    EXPECT_STREQ(dp.section, "second");
    EXPECT_EQ(dp.mtu, 4096u);
    EXPECT_EQ(dp.max_inline, 64);
}

TEST_F(DevParams, ValuesDoNotLeakFromEarlierSections)
{
    ib2_devparams_t dp;

    ini("[other]\n"
        "vendor_id = 1\n"
        "vendor_part_id = 1\n"
        "mtu = 1024\n"
        "max_inline_data = 32\n"
        "receive_queues = S,1024,64\n"
        "[mine]\n"
        "vendor_part_id = 7\n"
        "vendor_id = 2\n");
    ASSERT_EQ(lookup(2, 7, &dp), 0);
    EXPECT_STREQ(dp.section, "mine");
    EXPECT_EQ(dp.mtu, 0u);
    EXPECT_EQ(dp.max_inline, -1);
    EXPECT_STREQ(dp.receive_queues, "");
}

TEST_F(DevParams, BothIdListsRequired)
{
    ib2_devparams_t dp;

    /* a section without a part list matches no device */
    ini("[vendor only]\n"
        "vendor_id = 0x02c9\n"
        "mtu = 1024\n"
        "[part only]\n"
        "vendor_part_id = 4123\n"
        "mtu = 2048\n");
    ASSERT_EQ(lookup(0x02c9, 4123, &dp), 0);
    EXPECT_STREQ(dp.section, "");
    EXPECT_EQ(dp.mtu, 0u);
}

TEST_F(DevParams, CommentsBlanksAndSpaces)
{
    ib2_devparams_t dp;

    ini("# a comment\n"
        "; another comment\n"
        "\n"
        "   \t\n"
        "  [  spaced name  ]  \n"
        "  # indented comment\n"
        "\tvendor_id=0x02c9 , 0x119f \n"
        "vendor_part_id   =   4123\n"
        "; mtu = 256\n"
        "mtu = 2048   \n"
        "use_eager_rdma = 1\n"
        "max_inline_data = 0\n"
        "receive_queues =   P,128,64:S,4096,128  \n");
    ASSERT_EQ(lookup(0x119f, 4123, &dp), 0);
    EXPECT_STREQ(dp.section, "spaced name");
    EXPECT_EQ(dp.mtu, 2048u);
    EXPECT_EQ(dp.max_inline, 0);
    EXPECT_STREQ(dp.receive_queues, "P,128,64:S,4096,128");
}

TEST_F(DevParams, EveryMtu)
{
    ib2_devparams_t dp;

    for (unsigned mtu : {256u, 512u, 1024u, 2048u, 4096u}) {
        ini("[x]\nvendor_id = 1\nvendor_part_id = 2\nmtu = " +
            std::to_string(mtu) + "\n");
        ASSERT_EQ(lookup(1, 2, &dp), 0) << mtu;
        EXPECT_EQ(dp.mtu, mtu);
    }
}

TEST_F(DevParams, MissingFile)
{
    ib2_devparams_t dp;
    char err[512];

    EXPECT_EQ(ib2_devparams_lookup("/nonexistent/ib2/params.ini", 1, 2, &dp,
                                   err, sizeof(err)), -1);
    EXPECT_NE(std::string(err).find("/nonexistent/ib2/params.ini"),
              std::string::npos) << err;
    EXPECT_NE(std::string(err).find("No such file or directory"),
              std::string::npos) << err;
}

TEST_F(DevParams, DirectoryIsAnError)
{
    /* a directory named as the file is not read as an empty file */
    ib2_devparams_t dp;
    char err[512];

    err[0] = '\0';
    EXPECT_EQ(ib2_devparams_lookup("/tmp", 1, 2, &dp, err, sizeof(err)), -1);
    EXPECT_NE(std::string(err).find("/tmp"), std::string::npos) << err;
}

TEST_F(DevParams, SectionHeaderSyntax)
{
    expect_error("[ok]\nvendor_id = 1\n[broken\n", 3,
                 {"section header is \"[name]\""});
    expect_error("# c\n[ok] trailing\n", 2, {"section header"});
}

TEST_F(DevParams, KeyOutsideSection)
{
    expect_error("# nothing yet\nmtu = 4096\n", 2,
                 {"expected \"key = value\" inside a [section]",
                  "mtu = 4096"});
}

TEST_F(DevParams, LineWithoutEquals)
{
    expect_error("[x]\nvendor_id = 0x02c9\nvendor_part_id 4123\n", 3,
                 {"expected \"key = value\"", "vendor_part_id 4123"});
}

TEST_F(DevParams, BadIdList)
{
    expect_error("[x]\nvendor_id = 0x02c9,zz\n", 2,
                 {"vendor_id", "\"0x02c9,zz\"", "not a list of numbers"});
    expect_error("[x]\nvendor_id = 0x02c9\n\nvendor_part_id = 4123;4124\n",
                 4, {"vendor_part_id", "not a list of numbers"});
    expect_error("[x]\nvendor_id = 1,,2\n", 2, {"not a list of numbers"});
    expect_error("[x]\nvendor_id = 99999999999\n", 2,
                 {"not a list of numbers"});
}

TEST_F(DevParams, BadMtu)
{
    expect_error("[x]\nvendor_id = 0x02c9\nvendor_part_id = 4123\n"
                 "mtu = 1000\n", 4,
                 {"mtu \"1000\"", "must be 256, 512, 1024, 2048 or 4096"});
    expect_error("[x]\nmtu = big\n", 2, {"mtu \"big\"", "must be 256"});
    expect_error("[x]\nmtu =\n", 2, {"mtu", "must be 256"});
    expect_error("[x]\nmtu = 8192\n", 2, {"mtu \"8192\""});
}

TEST_F(DevParams, BadMtuTrailingGarbage)
{
    /* a value that only starts like a valid one is still bad */
    expect_error("[x]\nmtu = 4096x\n", 2, {"mtu \"4096x\"", "must be 256"});
    expect_error("[x]\nmtu = 2048 bytes\n", 2, {"mtu \"2048 bytes\""});
}

TEST_F(DevParams, BadMaxInline)
{
    expect_error("[x]\nmax_inline_data = -1\n", 2,
                 {"max_inline_data \"-1\"", "from 0 to 65536"});
    expect_error("[x]\nmax_inline_data = 65537\n", 2,
                 {"max_inline_data \"65537\""});
    expect_error("[x]\nmax_inline_data = 12k\n", 2,
                 {"max_inline_data \"12k\""});
    expect_error("[x]\nmax_inline_data =\n", 2, {"max_inline_data"});
}

TEST_F(DevParams, ErrorBeforeTheMatchIsReported)
{
    /* a broken section ahead of the matching one is not skipped silently */
    expect_error("[broken]\nvendor_id = 1\nvendor_part_id = 2\nmtu = 3\n"
                 "[good]\nvendor_id = 0x02c9\nvendor_part_id = 4123\n",
                 4, {"mtu \"3\""});
}

TEST_F(DevParams, ShippedFile)
{
    /* The installed file: every section's receive_queues is a valid
     * specification, and a ConnectX-6 gets its section. */
    std::string shipped = IB2_TEST_SRCDIR "/src/uct_ib2/ib2-device-params.ini";
    struct Probe {
        uint32_t vendor, part;
    } probes[] = {{0x02c9, 4123}, {0x02c9, 4099}, {0x1425, 21505},
                  {0x1425, 0x4401}, {0x1425, 0x6401}, {0x8086, 0x37d2},
                  {0x8086, 0x1592}, {0x119f, 4129}};
    ib2_devparams_t dp;
    char err[512];

    for (const Probe &p : probes) {
        ASSERT_EQ(ib2_devparams_lookup(shipped.c_str(), p.vendor, p.part,
                                       &dp, err, sizeof(err)), 0) << err;
        EXPECT_STRNE(dp.section, "") << p.vendor << "/" << p.part;
        EXPECT_NE(dp.mtu, 0u);
        ib2_rq_config_t rq;
        EXPECT_EQ(ib2_rq_parse(dp.receive_queues, &rq, err, sizeof(err)), 0)
            << "[" << dp.section << "] " << dp.receive_queues << ": " << err;
    }
    ASSERT_EQ(ib2_devparams_lookup(shipped.c_str(), 0x02c9, 4123, &dp, err,
                                   sizeof(err)), 0) << err;
    EXPECT_NE(std::string(dp.section).find("ConnectX"), std::string::npos)
        << dp.section;
    /* softverbs' own ids: its gather cost, every other value left to the
     * built-in defaults */
    ASSERT_EQ(ib2_devparams_lookup(shipped.c_str(), 0xffffff, 0, &dp, err,
                                   sizeof(err)), 0) << err;
    EXPECT_STREQ(dp.section, "softverbs");
    EXPECT_EQ(dp.zcopy_gather_ns, 1000);
    EXPECT_EQ(dp.mtu, 0u);
    EXPECT_EQ(dp.max_inline, -1);
    EXPECT_STREQ(dp.receive_queues, "");
    /* an adapter's section says nothing of it */
    ASSERT_EQ(ib2_devparams_lookup(shipped.c_str(), 0x02c9, 4123, &dp, err,
                                   sizeof(err)), 0) << err;
    EXPECT_EQ(dp.zcopy_gather_ns, -1);
}

TEST_F(DevParams, ZcopyGatherNs)
{
    ib2_devparams_t dp;

    ini("[a]\nvendor_id = 1\nvendor_part_id = 1\nzcopy_gather_ns = 0\n"
        "[b]\nvendor_id = 1\nvendor_part_id = 2\n"
        "zcopy_gather_ns = 1000000\n"
        "[c]\nvendor_id = 1\nvendor_part_id = 3\nmtu = 1024\n"
        "[d]\nvendor_id = 1\nvendor_part_id = 4\nzcopy_gather_ns = 010\n");
    ASSERT_EQ(lookup(1, 1, &dp), 0);
    EXPECT_EQ(dp.zcopy_gather_ns, 0);
    ASSERT_EQ(lookup(1, 2, &dp), 0);
    EXPECT_EQ(dp.zcopy_gather_ns, 1000000);
    ASSERT_EQ(lookup(1, 3, &dp), 0);
    EXPECT_EQ(dp.zcopy_gather_ns, -1) << "not given, nor leaked from [b]";
    ASSERT_EQ(lookup(1, 4, &dp), 0);
    EXPECT_EQ(dp.zcopy_gather_ns, 10) << "decimal, not octal";
    ASSERT_EQ(lookup(9, 9, &dp), 0);
    EXPECT_EQ(dp.zcopy_gather_ns, -1) << "no section";

    expect_error("[x]\nzcopy_gather_ns = -1\n", 2,
                 {"zcopy_gather_ns \"-1\"", "from 0 to 1000000"});
    expect_error("[x]\nzcopy_gather_ns = 1000001\n", 2,
                 {"zcopy_gather_ns \"1000001\""});
    expect_error("[x]\nzcopy_gather_ns = 1us\n", 2,
                 {"zcopy_gather_ns \"1us\"", "nanoseconds"});
    expect_error("[x]\nzcopy_gather_ns =\n", 2, {"zcopy_gather_ns"});
    expect_error("[x]\nzcopy_gather_ns = 0x3e8\n", 2,
                 {"zcopy_gather_ns \"0x3e8\""});
}

TEST_F(DevParams, LoadWithoutAFile)
{
    ib2_devparams_t dp;
    char err[512];

    /* "": none, every value not given */
    memset(&dp, 0x5a, sizeof(dp));
    ASSERT_EQ(ib2_devparams_load("", 0xffffff, 0, &dp, err, sizeof(err)), 0);
    EXPECT_STREQ(dp.section, "");
    EXPECT_EQ(dp.zcopy_gather_ns, -1);
    EXPECT_EQ(dp.max_inline, -1);
    /* a file the user names must be there */
    EXPECT_EQ(ib2_devparams_load("/nonexistent/ib2.ini", 0xffffff, 0, &dp,
                                 err, sizeof(err)), -1);
    EXPECT_NE(strstr(err, "/nonexistent/ib2.ini"), nullptr) << err;
}
