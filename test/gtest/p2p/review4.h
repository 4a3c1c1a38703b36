/*
 * What the files of test_p2p_review4 share: the raw peer's notice, and
 * the raw modes each file adds (test_review4.cc has main).
 */
#ifndef P2P_REVIEW4_H
#define P2P_REVIEW4_H

#include "raw_peer.h"

#include <cstdint>

/* An ABORT to dest: creation `creation` on the parent (cid, cepoch) failed
 * here; `mark` is this peer's next sequence number to dest there */
void raw_abort(p2ptest::RawPeer &raw, int dest, uint32_t cid,
               uint32_t cepoch, uint32_t creation, uint32_t mark);

/* test_review4_next.cc */
int raw_next(p2ptest::RawPeer &raw);

/* test_review4_epoch.cc */
int raw_epoch(p2ptest::RawPeer &raw);

/* test_review4_inter.cc */
int raw_inter(p2ptest::RawPeer &raw);

#endif
