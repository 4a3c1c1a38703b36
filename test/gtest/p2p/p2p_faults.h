/*
 * Helpers of the device fault tests of p2p over rc_ib2 (test_faults.cc):
 * softverbs' run-time fault rules, aimed at this process's RC QPs (rc_ib2's)
 * and their send CQ, which wrappers of ibv_create_qp and ibv_destroy_qp
 * in p2p_faults.cc see; bounded waits and numbered buffers.
 */
#ifndef P2P_FAULTS_H
#define P2P_FAULTS_H

#include <p2p.h>

#include <cstdint>
#include <string>
#include <vector>

namespace p2pf {

/* Sets this process's rules (nullptr: none); 0, or -1 with a message. */
int set_faults(const char *spec);
/* The fault rule's number for the send CQ of this process's first RC QP,
 * 0 if there is none. */
uint32_t rc_send_cq();
/* One rule per RC QP of this process: "KIND/qp=N" + rest, joined by ';'. */
std::string on_rc_qps(const char *kind, const char *rest);
/* Faults softverbs injected in this process so far. */
uint64_t faults_injected();
/* Test all until done or `limit` seconds; the seconds it took, or -1. */
double wait_all(std::vector<p2p_request_t*> &reqs,
                std::vector<p2p_status_t> &st, double limit, int *ret);
/* Message i's bytes, and whether b holds them. */
void fill(std::vector<uint8_t> &b, int i);
bool check(const std::vector<uint8_t> &b, int i);

} // namespace p2pf

#endif
