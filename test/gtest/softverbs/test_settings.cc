/* Settings that took garbage silently (docs/softverbs.md, "Using it"):
 * a boolean, SOFTVERBS_FORK, a subnet prefix and a repeated device
 * option are refused with a message naming the setting and what to give;
 * the documented spellings are taken. */
#include "sv_test.h"
#include "softverbs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

using namespace sv;

namespace {

/* ibv_get_device_list under env in a child: "" if it gave devices, else
 * what the child printed on stderr (or a note if it failed otherwise). */
std::string refusal(std::vector<std::string> env)
{
    std::string log = "/tmp/sv-settings-" + std::to_string(getpid());
    env.push_back("SOFTVERBS_SHM=" + seg_name("settings"));
    int rc = run_child_env(env, [&log] {
        int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        SV_CHILD_CHECK(fd >= 0 && dup2(fd, 2) == 2, 10);
        int n = -1;
        errno = 0;
        ibv_device **l = ibv_get_device_list(&n);
        if (l != nullptr) {
            ibv_free_device_list(l);
            return 0;
        }
        return (errno == EINVAL && n == 0) ? 20 : 21;
    });
    std::string out;
    FILE *f = fopen(log.c_str(), "r");
    if (f != nullptr) {
        char buf[1024];
        size_t k;
        while ((k = fread(buf, 1, sizeof(buf), f)) > 0) {
            out.append(buf, k);
        }
        fclose(f);
    }
    unlink(log.c_str());
    if (rc == 0) {
        return "";
    }
    return (rc == 20) ? out : "(child exit " + std::to_string(rc) + ") " +
                              out;
}

void expect_refused(const std::string &setting, const char *says)
{
    std::string out = refusal({ setting });
    EXPECT_NE(out.find(says), std::string::npos)
        << setting << " gave: '" << out << "'";
}

/* A stale access under SOFTVERBS_PIN_ABORT=v: 1 if the child aborted,
 * 0 if it went on, -1 otherwise. */
int aborts_with(const std::string &v)
{
    int rc = run_child_env({ "SOFTVERBS_PIN_ABORT=" + v }, [] {
        Pair t;
        SV_CHILD_CHECK(t.up(), 10);
        Buf s(t.d.pd, 4096);
        char *p = (char *)mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        SV_CHILD_CHECK(p != MAP_FAILED, 11);
        memset(p, 'o', 4096);
        ibv_mr *mr = ibv_reg_mr(t.d.pd, p, 4096, IBV_ACCESS_LOCAL_WRITE |
                                IBV_ACCESS_REMOTE_WRITE);
        SV_CHILD_CHECK(mr != nullptr, 12);
        SV_CHILD_CHECK(madvise(p, 4096, MADV_DONTNEED) == 0, 13);
        t.rdma(IBV_WR_RDMA_WRITE, s.p, 8, s.lkey(), (uintptr_t)p, mr->rkey);
        return 14;
    });
    return (rc == 128 + SIGABRT) ? 1 : (rc == 14) ? 0 : -1;
}

} // namespace

/* SOFTVERBS_PIN_ABORT: 1/yes/true/on (any case) abort at a stale access,
 * 0/no/false/off do not, anything else is refused (atoi took "yes" for
 * off: a test asking for an abort got none). */
TEST(Settings, PinAbortIsABoolean)
{
    for (const char *v : { "1", "yes", "true", "on", "YES", "True" }) {
        EXPECT_EQ(aborts_with(v), 1) << v;
    }
    for (const char *v : { "0", "no", "false", "off", "" }) {
        EXPECT_EQ(aborts_with(v), 0) << v;
    }
    expect_refused("SOFTVERBS_PIN_ABORT=maybe",
                   "SOFTVERBS_PIN_ABORT='maybe' is invalid: give 1, yes, "
                   "true or on to abort at a stale access, 0, no, false or "
                   "off not to");
    expect_refused("SOFTVERBS_PIN_ABORT=2", "SOFTVERBS_PIN_ABORT='2'");
}

TEST(Settings, ForkModeIsCopyOrUnset)
{
    expect_refused("SOFTVERBS_FORK=bogus",
                   "SOFTVERBS_FORK='bogus' is invalid: give copy (the "
                   "kernel copies pinned pages at fork), or leave it unset");
    expect_refused("SOFTVERBS_FORK=Copy", "SOFTVERBS_FORK='Copy'");
    EXPECT_EQ(refusal({ "SOFTVERBS_FORK=copy" }), "");
}

/* Four groups of 1 to 4 hex digits, nothing before, between or after. */
TEST(Settings, SubnetPrefixIsFourHexGroups)
{
    for (const char *v : { "fe80:0:0:0junk", "fe80:0:0:0:", " fe80:0:0:0",
                           "fe80:0:0:-1", "fe80:0x1:0:0", "fe80::0:0",
                           "fe80:0:0:10000", "fe80:0:0" }) {
        expect_refused(std::string("SOFTVERBS_SUBNET_PREFIX=") + v,
                       (std::string("SOFTVERBS_SUBNET_PREFIX='") + v +
                        "' is invalid: give four groups of 1 to 4 hex "
                        "digits, e.g. fe80:0:0:0").c_str());
    }
    EXPECT_EQ(refusal({ "SOFTVERBS_SUBNET_PREFIX=FE80:00:0:0001" }), "");
    expect_refused("SOFTVERBS_DEVICES=a0:ib:1/p1.subnet=fe80:0:0:1x",
                   "p1.subnet='fe80:0:0:1x' of 'a0' is not a subnet prefix");
}

/* A device option given twice is refused, as a repeated fault key is,
 * instead of the last one winning. */
TEST(Settings, RepeatedDeviceOptionIsRefused)
{
    expect_refused("SOFTVERBS_DEVICES=a0:ib:2/p1.subnet=fe80:0:0:1/"
                   "p1.subnet=fe80:0:0:2",
                   "SOFTVERBS_DEVICES: option 'p1.subnet' of 'a0' is given "
                   "twice: give it once");
    expect_refused("SOFTVERBS_DEVICES=a0:ib:1/numa=0/numa=1",
                   "option 'numa' of 'a0' is given twice");
    expect_refused("SOFTVERBS_DEVICES=a0:ib:1/pci=3b:00.0/pci=3c:00.0",
                   "option 'pci' of 'a0' is given twice");
    EXPECT_EQ(refusal({ "SOFTVERBS_DEVICES=a0:ib:2/p1.subnet=fe80:0:0:1/"
                        "p2.subnet=fe80:0:0:1" }), "");
}

/* An empty address in pN.ip (a '+' at an end, or two together) is
 * refused, not skipped. */
TEST(Settings, EmptyIpAddressIsRefused)
{
    for (const char *v : { "10.0.0.1+", "+10.0.0.1", "10.0.0.1++10.0.0.2" }) {
        expect_refused(std::string("SOFTVERBS_DEVICES=r0:eth:1/p1.ip=") + v,
                       (std::string("p1.ip='") + v + "' of 'r0' has an "
                        "empty address: join addresses with single '+'")
                       .c_str());
    }
    EXPECT_EQ(refusal({ "SOFTVERBS_DEVICES=r0:eth:1/p1.ip=10.0.0.1+"
                        "10.0.0.2" }), "");
}
