/*
 * The P2P_* variables come from UCS's configuration parser: each one has a
 * type, a default and help text, and the whole set can be listed (the
 * p2p_info tool prints the same list).
 */
#include "p2p_test.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace p2ptest;

namespace {

std::string config_text(unsigned flags)
{
    char   *text = nullptr;
    size_t len   = 0;
    FILE   *f    = open_memstream(&text, &len);
    EXPECT_NE(nullptr, f);
    EXPECT_EQ(P2P_OK, p2p_config_print(f, flags)) << p2p_last_error(nullptr);
    fclose(f);
    std::string s(text, len);
    free(text);
    return s;
}

const char *p2p_vars[] = {
    "EAGER_LIMIT", "RNDV_THRESH", "LEAVE_PINNED", "REG_MAX_REGIONS",
    "REG_MAX_BYTES", "UNEXPECTED_LIMIT", "CMA", "PRINT_STATS", "ERROR_MODE",
    "KEEPALIVE_INTERVAL", "FINALIZE_TIMEOUT", "ANSWER_TIMEOUT", "UCT_IB2",
    "LOG_LEVEL", "AM_ID", "WAIT_SPIN", "RING"
};

}

/* Before, the variables were read by hand: no list, no help text. */
TEST_F(P2P, ConfigurationIsListed)
{
    std::string plain = config_text(0);
    std::string doc   = config_text(P2P_CONFIG_PRINT_DOC);
    for (const char *v : p2p_vars) {
        std::string line = std::string("\nP2P_") + v + "=";
        EXPECT_NE(std::string::npos, ("\n" + plain).find(line))
            << "P2P_" << v << " not listed:\n" << plain;
        EXPECT_NE(std::string::npos, ("\n" + doc).find(line))
            << "P2P_" << v << " not listed with -f";
    }
    /* a line per variable, nothing else, without the descriptions */
    size_t lines = 0;
    for (char c : plain) {
        lines += (c == '\n');
    }
    EXPECT_EQ(sizeof(p2p_vars) / sizeof(p2p_vars[0]), lines) << plain;
    /* with them: help text and syntax */
    EXPECT_NE(std::string::npos, doc.find("Largest message sent eagerly"));
    EXPECT_NE(std::string::npos, doc.find("syntax:"));
    EXPECT_NE(std::string::npos, doc.find("[none|peer]"));
    /* the value in effect: the environment's, or the default */
    const char *lvl = getenv("P2P_LOG_LEVEL");
    if (lvl == nullptr) {
        EXPECT_NE(std::string::npos, plain.find("P2P_LOG_LEVEL=warn\n"));
    }
    EXPECT_EQ(P2P_ERR_INVALID, p2p_config_print(nullptr, 0));
}
