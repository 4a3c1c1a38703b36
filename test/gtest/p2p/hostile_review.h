/*
 * What the tests of test_p2p_hostile_review share (hostile_review.cc has
 * main): rank 1 is a raw UCP process speaking p2p_wire.h by hand
 * (raw_peer.h), rank 0 the p2p process it talks to, rank 2 (with -np 3)
 * an honest p2p rank. The tests are split by concern:
 *
 *   test_review_wire.cc      what a message or record must be to be taken
 *   test_review_answers.cc   FIN and ACK: their statuses, refused answers
 *   test_review_early.cc     early messages and the limit: who is charged,
 *                            who is cut off
 *   test_review_held.cc      held messages' tables and charges
 *   test_review_teardown.cc  arrivals, connects and dead peers while a
 *                            context is finalized
 *
 * Runs (test/suites/40-p2p.sh):
 *   P2P_UNEXPECTED_LIMIT=64k mpirun -np 3 ...
 *       --gtest_filter=P2PReview.*:-*HeldTables*:*Record*:*Headerless*:
 *       *Eviction*:*ChargeMoves*
 *       (tests run in the order of the files in Makefile.am, so
 *       FloodingRankIsCutOffHonestRankGetsThrough, which leaves rank 1 cut
 *       off, is the last of this run)
 *   P2P_UNEXPECTED_LIMIT=64k mpirun -np 3 ... --gtest_filter=*Eviction*
 *   P2P_UNEXPECTED_LIMIT=64k mpirun -np 2 ... --gtest_filter=*ChargeMoves*
 *   mpirun -np 2 ... --gtest_filter=*Headerless* (the first drop of the
 *       process: only the first is said)
 *   mpirun -np 2 ... --gtest_filter=*HeldTables*
 *   P2PTEST_RAW_RECORD=v2 (v4, v99) mpirun -np 2 ... --gtest_filter=*Record*
 *   each P2PTeardown test alone, -np 2 (test_review_teardown.cc says how)
 */
#ifndef P2P_HOSTILE_REVIEW_H
#define P2P_HOSTILE_REVIEW_H

#include "p2p_util.h"
#include "raw_peer.h"

#include <p2p.h>
#include <p2p_wire.h>

#include <cstdint>
#include <functional>
#include <string>

namespace hrev {

inline p2p_context_t     *ctx;
inline p2p_comm_t        *world;
inline p2ptest::RawPeer  raw;
inline int               rank, size;

/* rank 1 was cut off: no closing barrier with it */
inline bool cut_off;
/* rank 1's record was refused: rank 0 cannot reach it at finalize */
inline bool refused;
/* a test finalized rank 0's context itself (ctx is NULL then), or did
 * rank 1's part of the closing barrier: main does neither again */
inline bool finalized, raw_closed;

enum {
    TAG_GO = 1000,              /* + phase: rank 0 lets rank 1 go on */
    TAG_MARK = 2000,            /* + phase: rank 1's phase is done */
    TAG_NEG = 1, TAG_ACK = 2, TAG_FIN = 3, TAG_EARLY = 4, TAG_TABLE = 5,
    TAG_ANSWER = 6, TAG_FLOOD = 7, TAG_HDRLESS = 8, TAG_MOVE = 9,
    TAG_CLOSE = 10, TAG_MAPPED = 11,
    TAG_SYNC = 100, TAG_RNDV = 101, TAG_CHAIN = 102, TAG_HONEST = 103,
    TAG_HONEST_GO = 104, TAG_HONEST_DONE = 105
};

p2p_stats_t stats();

/* rank 0: let rank 1 run a phase, and wait for its marker (everything it
 * sent before has been judged then: one sender's messages are handled in
 * order) */
void run_phase(int phase);

/* rank 1 */
void phase_start(int phase);
void phase_end(int phase);

/* a correct header of rank 1 on the world communicator, with its token */
p2p_wire_match_t hdr(unsigned type, int32_t tag, uint32_t seq);

/* rank 1: a FIN or ACK to rank 0 */
void ctl(unsigned type, uint64_t sreq, int32_t status);

/* the request id an EAGER_SYNC, MID or RTS carries */
uint64_t sreq_of(const p2ptest::RawMsg &m);

/* the first exchange, once per process: rank 1 gets rank 0's token */
void hello();

/* rank 0: what p2p writes to stderr while `body` runs, written out again
 * after it */
std::string capture_stderr(const std::function<void()> &body);

}

#endif
