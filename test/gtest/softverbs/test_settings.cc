/* Settings that took garbage silently (docs/softverbs.md, "Using it"):
 * booleans (SOFTVERBS_PIN_ABORT, SOFTVERBS_DEBUG, SOFTVERBS_CQE_INLINE),
 * SOFTVERBS_FORK, SOFTVERBS_MEMLOCK, a subnet prefix, a PCI address,
 * empty pieces of SOFTVERBS_DEVICES and a repeated device
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

/* ibv_get_device_list under env in a child: 0 if it gave devices, 20 if
 * it refused them (EINVAL), else another code; *err gets what the child
 * printed on stderr. */
int list_devices(std::vector<std::string> env, std::string *err)
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
    err->clear();
    FILE *f = fopen(log.c_str(), "r");
    if (f != nullptr) {
        char buf[1024];
        size_t k;
        while ((k = fread(buf, 1, sizeof(buf), f)) > 0) {
            err->append(buf, k);
        }
        fclose(f);
    }
    unlink(log.c_str());
    return rc;
}

/* "" if the device list came under env, else what the child printed on
 * stderr (or a note if it failed otherwise). */
std::string refusal(std::vector<std::string> env)
{
    std::string out;
    int rc = list_devices(std::move(env), &out);
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

/* SOFTVERBS_DEBUG is a boolean like SOFTVERBS_PIN_ABORT: atoi took "yes"
 * for off and "2junk" for on. The documented spellings trace (attaching
 * to the segment is traced) or do not; anything else is refused. */
TEST(Settings, DebugIsABoolean)
{
    const char *traced = "as process slot";
    std::string err;

    for (const char *v : { "1", "yes", "true", "on", "YES", "On" }) {
        EXPECT_EQ(list_devices({ std::string("SOFTVERBS_DEBUG=") + v }, &err),
                  0) << v << ": " << err;
        EXPECT_NE(err.find(traced), std::string::npos) << v << ": " << err;
    }
    for (const char *v : { "0", "no", "false", "off", "" }) {
        EXPECT_EQ(list_devices({ std::string("SOFTVERBS_DEBUG=") + v }, &err),
                  0) << v << ": " << err;
        EXPECT_EQ(err.find(traced), std::string::npos) << v << ": " << err;
    }
    expect_refused("SOFTVERBS_DEBUG=maybe",
                   "SOFTVERBS_DEBUG='maybe' is invalid: give 1, yes, true or "
                   "on to trace recoveries, limits hit and injected faults, "
                   "0, no, false or off not to");
    for (const char *v : { "2", "1junk", " 1", "-1", "01" }) {
        expect_refused(std::string("SOFTVERBS_DEBUG=") + v,
                       (std::string("SOFTVERBS_DEBUG='") + v + "'").c_str());
    }
}

namespace {

/* Under SOFTVERBS_MEMLOCK=v: 0 if 512 KiB registers and 2 MiB does not
 * (ENOMEM), 1 if both register, 2 if neither, else another code. */
int memlock_allows(const std::string &v)
{
    return run_child_env({ "SOFTVERBS_MEMLOCK=" + v }, [] {
        Dev d;
        SV_CHILD_CHECK(d.ok(), 10);
        std::vector<char> mem(2 << 20);
        ibv_mr *small = ibv_reg_mr(d.pd, mem.data(), 512 << 10, 0);
        SV_CHILD_CHECK(small != nullptr || errno == ENOMEM, 11);
        if (small != nullptr) {
            ibv_dereg_mr(small);
        }
        ibv_mr *big = ibv_reg_mr(d.pd, mem.data(), mem.size(), 0);
        SV_CHILD_CHECK(big != nullptr || errno == ENOMEM, 12);
        if (big != nullptr) {
            ibv_dereg_mr(big);
        }
        return (small != nullptr) ? (big != nullptr) : 2;
    });
}

} // namespace

/* SOFTVERBS_MEMLOCK is a size like the other settings: strtoull took
 * "64M" for 64 bytes, "abc" for 0 and "-1" for no limit, and nobody said
 * why every registration failed. */
TEST(Settings, MemlockIsASize)
{
    for (const char *v : { "1m", "1M", "1024k", "0x100000", "1048576" }) {
        EXPECT_EQ(memlock_allows(v), 0) << v;
    }
    EXPECT_EQ(memlock_allows("1g"), 1);
    EXPECT_EQ(memlock_allows("unlimited"), 1);
    EXPECT_EQ(memlock_allows("0"), 2);
    for (const char *v : { "abc", "-1", "1mb", " 1m", "+1m", "1m ",
                           "0x", "99999999999999999999", "16777216t",
                           "Unlimited" }) {
        expect_refused(std::string("SOFTVERBS_MEMLOCK=") + v,
                       (std::string("SOFTVERBS_MEMLOCK='") + v +
                        "' is invalid: give the bytes a process may "
                        "register (digits, or hex after 0x, with an "
                        "optional k, m, g or t), e.g. 64m, or unlimited")
                       .c_str());
    }
}

/* SOFTVERBS_CQE_INLINE is a boolean like SOFTVERBS_DEBUG: atoi took
 * "yes" for off and "2junk" for on. Unset or empty keeps the default,
 * on. */
TEST(Settings, CqeInlineIsABoolean)
{
    auto inline_on = [](const std::string &v) {
        return run_child_env({ "SOFTVERBS_CQE_INLINE=" + v }, [] {
            return 10 + softverbs_cqe_inline(0);
        });
    };
    for (const char *v : { "1", "yes", "true", "on", "YES", "" }) {
        EXPECT_EQ(inline_on(v), 11) << v;
    }
    for (const char *v : { "0", "no", "false", "off", "Off" }) {
        EXPECT_EQ(inline_on(v), 10) << v;
    }
    expect_refused("SOFTVERBS_CQE_INLINE=maybe",
                   "SOFTVERBS_CQE_INLINE='maybe' is invalid: give 1, yes, "
                   "true or on to deliver small receives in the completion, "
                   "0, no, false or off not to");
    for (const char *v : { "2junk", "2", " 1", "-1", "01" }) {
        expect_refused(std::string("SOFTVERBS_CQE_INLINE=") + v,
                       (std::string("SOFTVERBS_CQE_INLINE='") + v + "'")
                       .c_str());
    }
}

/* Empty pieces of SOFTVERBS_DEVICES were skipped (strtok), an empty type
 * or port count taken as the default: a typo changed the fabric without
 * a word. */
TEST(Settings, DevicesHaveNoEmptyPieces)
{
    for (const char *v : { "a0,,b0", ",a0", "a0,", "," }) {
        expect_refused(std::string("SOFTVERBS_DEVICES=") + v,
                       (std::string("SOFTVERBS_DEVICES='") + v + "' has an "
                        "empty device (two commas together, or one at an "
                        "end): separate devices with single commas")
                       .c_str());
    }
    expect_refused("SOFTVERBS_DEVICES=a0::2",
                   "SOFTVERBS_DEVICES: device 'a0' has an empty type: give "
                   "NAME[:TYPE[:PORTS]], e.g. a0:ib:1");
    expect_refused("SOFTVERBS_DEVICES=a0:ib:",
                   "SOFTVERBS_DEVICES: device 'a0' has an empty port count");
    for (const char *v : { "a0:ib:2/", "a0:ib:2//p2.subnet=fe80:0:0:1",
                           "a0:ib:1/numa=0/" }) {
        expect_refused(std::string("SOFTVERBS_DEVICES=") + v,
                       "SOFTVERBS_DEVICES: 'a0' has an empty option (two "
                       "'/' together, or one at the end): give /KEY=VALUE "
                       "for each");
    }
    expect_refused("SOFTVERBS_DEVICES=", "SOFTVERBS_DEVICES is empty");
    EXPECT_EQ(refusal({ "SOFTVERBS_DEVICES=a0,b0:ib,c0:ib:2/numa=1" }), "");
}

/* pci= is hex digits as lspci prints them: sscanf's %x took a sign,
 * spaces and 0x. */
TEST(Settings, PciAddressIsHexGroups)
{
    for (const char *v : { "0x0:0x3b:0x0.0x1", " 0:3b:00.0", "+0:3b:00.0",
                           "0:3b:00.0 ", "0:3b:-0.0", "00000:3b:00.0",
                           "0:3b:000.0", "0:3b:00.00", "3b:00", "3b.0",
                           "0:3b:20.0", "0:3b:00.8", "1:2:3:4.0",
                           "3b:00.0x" }) {
        expect_refused(std::string("SOFTVERBS_DEVICES=a0:ib:1/pci=") + v,
                       (std::string("SOFTVERBS_DEVICES: pci='") + v +
                        "' of 'a0' is not a PCI address").c_str());
    }
    for (const char *v : { "0000:3b:00.0", "3b:00.1", "ffff:FF:1f.7",
                           "0:0:0.0" }) {
        EXPECT_EQ(refusal({ std::string("SOFTVERBS_DEVICES=a0:ib:1/pci=") +
                            v }), "") << v;
    }
}
