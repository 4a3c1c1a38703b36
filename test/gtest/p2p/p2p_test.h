/*
 * Harness of the end-to-end p2p tests. The same binary runs in every rank
 * of an mpirun job (or alone, as a singleton). One context for the whole
 * run; every test gets a fresh duplicate of the world communicator, so a
 * test that fails cannot leave messages that later tests match.
 *
 * Only rank 0 prints googletest's report; at the end of every test each
 * rank tells rank 0 whether it failed, and rank 0 fails the test for it
 * (the failing rank prints its own assertion messages, prefixed by rank).
 * Every wait in a test is bounded: a wait that runs out prints what it was
 * waiting for and ends the process, so mpirun never hangs.
 */
#ifndef P2P_TEST_H
#define P2P_TEST_H

#include <gtest/gtest.h>

#include <p2p.h>

#include "p2p_util.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace p2ptest {

extern p2p_context_t *ctx;
extern p2p_comm_t    *world;
extern p2p_comm_t    *ctrl;      /* the harness's own communicator */
extern int           wrank, wsize;
/* the process environment as it was before p2p_init */
extern std::vector<std::string> env_before_init;

/* seconds any single wait may take before the process gives up */
double wait_limit();

/* Wait for all requests; on timeout print `what` and exit(3). Returns
 * p2p_waitall's result. */
int wait_all(std::vector<p2p_request_t*> &reqs,
             std::vector<p2p_status_t> *statuses, const char *what);
int wait_one(p2p_request_t **req, p2p_status_t *status, const char *what);
/* For a test that calls p2p's blocking calls (which wait without end):
 * if it is still alive after wait_limit() seconds, the process prints
 * `what` and exits(3). */
class Watchdog {
public:
    explicit Watchdog(const char *what);
    ~Watchdog();

private:
    struct State;
    State *st_;
};

/* Barrier on comm, bounded like the waits. */
void barrier(p2p_comm_t *comm);
/* The same between two ranks (or a rank and itself): afterwards every
 * message the peer sent before is here. */
void pair_sync(p2p_comm_t *comm, int peer);

/* Deterministic content: byte i of message (seed) */
static inline uint8_t pattern(uint64_t seed, size_t i)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + (i >> 3);
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return (uint8_t)(x >> (8 * (i & 7)));
}

void fill(void *buf, size_t len, uint64_t seed);
/* index of the first byte that differs from the pattern, or -1 */
long check(const void *buf, size_t len, uint64_t seed);

p2p_stats_t stats();

/* Whether UCP emulates RMA between the ranks (only TCP allowed: UCX 1.13's
 * tcp has no RMA lane). p2p then sends rendezvous sizes by UCP's own
 * rendezvous and registers nothing itself. */
bool rma_emulated();

class P2P : public ::testing::Test {
protected:
    p2p_comm_t *comm = nullptr;
    int        rank  = 0;
    int        size  = 1;

    void SetUp() override;
    void TearDown() override;
    /* the pair this test uses: ranks 0 and 1 (or 0 with itself alone) */
    int  peer() const { return (size == 1) ? 0 : (rank ^ 1); }
    bool in_pair() const { return rank < 2; }
};

}

#endif
