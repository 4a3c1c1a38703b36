/*
 * p2p_cost's loops, shared by its files (p2p_cost.c: p2p's loops and the
 * tag API's; p2p_cost_carry.c: UCP alone carrying p2p's bytes).
 */
#ifndef IB2_P2P_COST_H
#define IB2_P2P_COST_H

#include <p2p_ucp.h>

#include <stddef.h>

/* messages in flight in a stream loop, as p2p_bench's rate test */
#define COST_WINDOW 32

void p2p_cost_carry_init(p2p_comm_t *comm, size_t len);
void p2p_cost_carry_cleanup(p2p_comm_t *comm);
void p2p_cost_carry_am(p2p_comm_t *comm, size_t len, int n);
void p2p_cost_carry_drain(p2p_comm_t *comm, size_t len, int n);
void p2p_cost_carry_bounce(p2p_comm_t *comm, size_t len, int n);
void p2p_cost_carry_put(p2p_comm_t *comm, size_t len, int n);
void p2p_cost_carry_putflag(p2p_comm_t *comm, size_t len, int n);

#endif
