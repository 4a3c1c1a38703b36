/*
 * Receive queue specification: the openib BTL's btl_openib_receive_queues
 * syntax and semantics (per-peer P queues with credits, shared S queues, X
 * queues on XRC: all queues X or none).
 *
 *   P,<size>,<num>[,<low_watermark>[,<window>[,<reserved>]]]
 *   S,<size>,<num>[,<low_watermark>[,<max_pending_sends>]]
 *   X,<size>,<num>[,<low_watermark>[,<max_pending_sends>]]
 *
 * Queues are separated by ':' and listed in strictly ascending size.
 * Defaults: low_watermark = num / 2; window = low_watermark / 2;
 * reserved = (2 * num - 1) / window; max_pending_sends = low_watermark / 4
 * (each at least 1).
 *
 * No UCX dependency, so that it can be tested alone.
 */
#ifndef IB2_RQSPEC_H
#define IB2_RQSPEC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IB2_MAX_QUEUES     8
#define IB2_RQ_MIN_SIZE    32          /* header and a little payload */
#define IB2_RQ_MAX_SIZE    (16u << 20)
#define IB2_RQ_MAX_NUM     65536

typedef enum {
    IB2_RQ_PER_PEER,   /* P */
    IB2_RQ_SHARED,     /* S */
    IB2_RQ_XRC         /* X: XRC SRQs; all queues X or none */
} ib2_rq_type_t;

typedef struct ib2_rq_spec {
    ib2_rq_type_t type;
    unsigned      size;         /* bytes per receive buffer */
    unsigned      num;          /* buffers posted (per peer for P) */
    unsigned      low_wm;       /* repost when this many are left */
    unsigned      window;       /* P: credits to gather before an explicit
                                   credit message */
    unsigned      reserved;     /* P: buffers for credit messages */
    unsigned      max_pending;  /* S, X: sends in flight per peer */
} ib2_rq_spec_t;

typedef struct ib2_rq_config {
    unsigned      count;
    ib2_rq_spec_t q[IB2_MAX_QUEUES];
} ib2_rq_config_t;

/*
 * Parse `spec`. Returns 0, or -1 with a message in err that quotes the
 * offending queue and token and the rule it breaks.
 */
int ib2_rq_parse(const char *spec, ib2_rq_config_t *config, char *err,
                 size_t max);

/* Writes the canonical form (every field explicit) into buf. */
void ib2_rq_format(const ib2_rq_config_t *config, char *buf, size_t max);

/* Index of the smallest queue whose buffers hold `bytes`, or -1. */
int ib2_rq_select(const ib2_rq_config_t *config, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
