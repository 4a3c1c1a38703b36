/*
 * The verbs QPs this process has alive, in the order they were made, as
 * seen by wrappers of ibv_create_qp and ibv_destroy_qp in this test binary
 * (ib2_qp_log.cc): the plugin's and UCX's calls bind to the executable's
 * definitions, which pass them on to softverbs. Tests use it to aim fault
 * rules at a transport's QP, or to read a connection's address vector
 * back with ibv_query_qp.
 */
#ifndef IB2_QP_LOG_H
#define IB2_QP_LOG_H

#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

namespace ib2t {

struct LoggedQp {
    struct ibv_qp  *qp;
    uint32_t       qpn;
    enum ibv_qp_type type;
    struct ibv_cq  *send_cq, *recv_cq;
};

/* Alive QPs, oldest first. */
std::vector<LoggedQp> qps_alive();
/* The alive QP with this number, or nullptr. */
struct ibv_qp *qp_by_num(uint32_t qpn);

} // namespace ib2t

#endif
