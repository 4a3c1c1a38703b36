/*
 * The raw peer (raw_peer.h): PMIx and UCP by hand, p2p_wire.h on the wire.
 */
#include "p2p_util.h"
#include "raw_peer.h"

#include <pmix.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

namespace p2ptest {

namespace {

pmix_proc_t raw_proc;

void die(const char *what)
{
    fprintf(stderr, "[raw rank] %s\n", what);
    fflush(stderr);
    _exit(3);
}

void send_cb(void *req, ucs_status_t status, void *user_data)
{
    *(ucs_status_t*)user_data = status;
}

}

p2p_wire_match_t RawMsg::match() const
{
    p2p_wire_match_t m;
    memset(&m, 0, sizeof(m));
    memcpy(&m, hdr.data(), std::min(hdr.size(), sizeof(m)));
    return m;
}

/* What p2p publishes about itself on this host (p2p_liveness.c): pid, the
 * process's start time (field 22 of /proc/self/stat), the PID namespace,
 * "hostname/boot-id" -- so that a p2p peer takes this process as local,
 * watches it, and reads its rendezvous with process_vm_readv. */
void RawPeer::local_record(p2p_wire_addr_t *wa)
{
    char               buf[1024] = "", boot[40] = "", *p;
    unsigned long long start = 0;
    struct stat        st;
    FILE               *f;
    int                i;

    if ((f = fopen("/proc/self/stat", "r")) != nullptr) {
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    p = strrchr(buf, ')');
    for (i = 0; (p != nullptr) && (i < 20); ++i) {
        p = strchr(p + 1, ' ');
    }
    if ((p == nullptr) || (sscanf(p, " %llu", &start) != 1)) {
        start = 0;
    }
    if ((f = fopen("/proc/sys/kernel/random/boot_id", "r")) != nullptr) {
        if (fgets(boot, sizeof(boot), f) == nullptr) {
            boot[0] = '\0';
        }
        boot[strcspn(boot, "\n")] = '\0';
        fclose(f);
    }
    wa->start_time = start;
    wa->pidns      = (stat("/proc/self/ns/pid", &st) == 0) ?
                     (uint64_t)st.st_ino : 0;
    memset(wa->host, 0, sizeof(wa->host));
    gethostname(wa->host, sizeof(wa->host) / 2);
    wa->host[sizeof(wa->host) / 2 - 1] = '\0';
    snprintf(wa->host + strlen(wa->host), sizeof(wa->host) - strlen(wa->host),
             "/%s", boot);
}

/* The pid and start time of another child of our parent (the other rank
 * mpirun started on this host, with -np 2), in place of ours. */
bool RawPeer::sibling_record(p2p_wire_addr_t *wa)
{
    DIR           *d = opendir("/proc");
    struct dirent *e;
    bool          found = false;

    while ((d != nullptr) && !found && ((e = readdir(d)) != nullptr)) {
        int                pid = atoi(e->d_name), ppid, i;
        char               path[64], buf[1024] = "", st, *p;
        unsigned long long start;
        FILE               *f;

        if ((pid <= 0) || (pid == getpid())) {
            continue;
        }
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        if ((f = fopen(path, "r")) == nullptr) {
            continue;
        }
        buf[fread(buf, 1, sizeof(buf) - 1, f)] = '\0';
        fclose(f);
        p = strrchr(buf, ')');
        if ((p == nullptr) || (sscanf(p + 1, " %c %d", &st, &ppid) != 2) ||
            (ppid != getppid())) {
            continue;
        }
        for (i = 0; (p != nullptr) && (i < 20); ++i) {
            p = strchr(p + 1, ' ');
        }
        if ((p != nullptr) && (sscanf(p, " %llu", &start) == 1)) {
            wa->pid        = (uint32_t)pid;
            wa->start_time = start;
            found          = true;
        }
    }
    if (d != nullptr) {
        closedir(d);
    }
    return found;
}

bool RawPeer::init()
{
    pmix_value_t  *val = nullptr;
    pmix_proc_t   wild;
    pmix_status_t rc = PMIx_Init(&raw_proc, NULL, 0);

    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "raw peer: PMIx_Init: %s (run under mpirun)\n",
                PMIx_Error_string(rc));
        return false;
    }
    rank = (int)raw_proc.rank;
    PMIX_PROC_CONSTRUCT(&wild);
    PMIX_LOAD_PROCID(&wild, raw_proc.nspace, PMIX_RANK_WILDCARD);
    if ((PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val) != PMIX_SUCCESS) ||
        (val == nullptr)) {
        return false;
    }
    size = (val->type == PMIX_UINT32) ? (int)val->data.uint32 :
           val->data.integer;
    PMIX_VALUE_RELEASE(val);

    /* the transport plugin p2p loads itself (rc_ib2) */
    const char *ib2 = getenv("P2P_UCT_IB2");
    if ((ib2 != nullptr) && (*ib2 != '\0') && (strcmp(ib2, "none") != 0) &&
        (dlopen(ib2, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE) == nullptr)) {
        fprintf(stderr, "raw peer: %s: %s\n", ib2, dlerror());
        return false;
    }
    /* the transports p2p offers: shared memory with peer error handling,
     * configured as p2p configures it (UCX 1.13 aborts when the two ends
     * of a connection pick different lanes) */
    ucp_config_t *config;
    const char   *tls = getenv("UCX_TLS");
    bool         mm   = (tls == nullptr) || (*tls == '\0') || (*tls == '^');
    for (const char *n : { "shm", "sm", "posix", "sysv", "mm", "all" }) {
        mm = mm || (strstr(tls, n) != nullptr);
    }
    bool user_set = false;
    for (char **e = environ; *e != nullptr; ++e) {
        const char *eq = strchr(*e, '=');
        size_t     n   = eq ? (size_t)(eq - *e) : strlen(*e);
        user_set = user_set ||
                   ((strncmp(*e, "UCX_", 4) == 0) && (n >= 14) &&
                    (strncmp(*e + n - 14, "ERROR_HANDLING", 14) == 0));
    }
    if (ucp_config_read(NULL, NULL, &config) != UCS_OK) {
        return false;
    }
    if (mm && !user_set &&
        (ucp_config_modify(config, "MM_ERROR_HANDLING", "y") != UCS_OK)) {
        ucp_config_release(config);
        return false;
    }
    ucp_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_AM | UCP_FEATURE_RMA;
    ucs_status_t status = ucp_init(&params, config, &ucp_);
    ucp_config_release(config);
    if (status != UCS_OK) {
        return false;
    }
    ucp_worker_params_t wparams;
    memset(&wparams, 0, sizeof(wparams));
    if (ucp_worker_create(ucp_, &wparams, &worker_) != UCS_OK) {
        return false;
    }
    ucp_am_handler_param_t hp;
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                    UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id         = P2P_WIRE_AM_ID_DEFAULT;
    hp.cb         = am_cb;
    hp.arg        = this;
    hp.flags      = UCP_AM_FLAG_WHOLE_MSG;
    if (ucp_worker_set_am_recv_handler(worker_, &hp) != UCS_OK) {
        return false;
    }

    /* publish: p2p_wire_addr_t, then the worker address (P2PTEST_RAW_LOCAL:
     * saying where it runs, so that peers on this host take it as local) */
    ucp_address_t *addr;
    size_t        addr_len;
    if (ucp_worker_get_address(worker_, &addr, &addr_len) != UCS_OK) {
        return false;
    }
    std::vector<char> blob(sizeof(p2p_wire_addr_t) + addr_len, 0);
    p2p_wire_addr_t  *wa = (p2p_wire_addr_t*)blob.data();
    wa->magic   = P2P_WIRE_ADDR_MAGIC;
    wa->version = P2P_WIRE_VERSION;
    wa->pid     = (uint32_t)getpid();
    wa->pidns   = 0;
    snprintf(wa->host, sizeof(wa->host), "raw-peer-not-watched");
    const char *local = getenv("P2PTEST_RAW_LOCAL");
    if (local != nullptr) {
        local_record(wa);
        if ((strcmp(local, "sibling") == 0) && !sibling_record(wa)) {
            fprintf(stderr, "raw peer: P2PTEST_RAW_LOCAL=sibling: no other "
                    "process of our parent found\n");
            return false;
        }
    }
    memcpy(blob.data() + sizeof(*wa), addr, addr_len);
    /* P2PTEST_RAW_RECORD: publish the record of another p2p instead --
     * "v2": the layout of wire versions 1 and 2 (no version field),
     * "v4": this layout saying version 4 (its ABORT had 16 bytes),
     * "v99": this layout saying version 99 */
    const char *other = getenv("P2PTEST_RAW_RECORD");
    if ((other != nullptr) && (strcmp(other, "v99") == 0)) {
        wa->version = 99;
    } else if ((other != nullptr) && (strcmp(other, "v4") == 0)) {
        wa->version = 4;
    } else if ((other != nullptr) && (strcmp(other, "v2") == 0)) {
        struct __attribute__((packed)) {
            uint32_t magic, pid;
            uint64_t start_time, pidns;
            char     host[128];
        } v2 = {};
        v2.magic = P2P_WIRE_ADDR_MAGIC_V2;
        v2.pid   = (uint32_t)getpid();
        snprintf(v2.host, sizeof(v2.host), "raw-peer-not-watched");
        blob.assign(sizeof(v2) + addr_len, 0);
        memcpy(blob.data(), &v2, sizeof(v2));
        memcpy(blob.data() + sizeof(v2), addr, addr_len);
    }
    ucp_worker_release_address(worker_, addr);
    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type          = PMIX_BYTE_OBJECT;
    value.data.bo.bytes = blob.data();
    value.data.bo.size  = blob.size();
    if ((PMIx_Put(PMIX_GLOBAL, P2P_WIRE_PMIX_KEY, &value) != PMIX_SUCCESS) ||
        (PMIx_Commit() != PMIX_SUCCESS)) {
        return false;
    }
    pmix_info_t info;
    bool        collect = true;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    rc = PMIx_Fence(NULL, 0, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) {
        return false;
    }
    eps_.assign(size, nullptr);
    send_seq_.assign(size, 0);
    tokens_.assign(size, 0);
    /* connect to everyone now, so every arrival names its endpoint */
    for (int r = 0; r < size; ++r) {
        if (r != rank) {
            ep(r);
        }
    }
    return true;
}

ucp_ep_h RawPeer::ep(int r)
{
    if (eps_[r] != nullptr) {
        return eps_[r];
    }
    pmix_proc_t  proc;
    pmix_value_t *val = nullptr;
    PMIX_PROC_CONSTRUCT(&proc);
    PMIX_LOAD_PROCID(&proc, raw_proc.nspace, r);
    if ((PMIx_Get(&proc, P2P_WIRE_PMIX_KEY, NULL, 0, &val) != PMIX_SUCCESS) ||
        (val == nullptr) || (val->type != PMIX_BYTE_OBJECT)) {
        die("no p2p address of a peer in PMIx");
    }
    ucp_ep_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.address    = (const ucp_address_t*)(val->data.bo.bytes +
                                               sizeof(p2p_wire_addr_t));
    params.err_mode   = UCP_ERR_HANDLING_MODE_PEER;
    if (ucp_ep_create(worker_, &params, &eps_[r]) != UCS_OK) {
        die("ucp_ep_create to a p2p peer failed");
    }
    PMIX_VALUE_RELEASE(val);
    return eps_[r];
}

void RawPeer::progress()
{
    ucp_worker_progress(worker_);
}

ucs_status_t RawPeer::am_cb(void *arg, const void *header,
                            size_t header_length, void *data, size_t length,
                            const ucp_am_recv_param_t *param)
{
    RawPeer *self = (RawPeer*)arg;
    RawMsg  m;

    m.from = -1;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
        for (int r = 0; r < self->size; ++r) {
            if (self->eps_[r] == param->reply_ep) {
                m.from = r;
            }
        }
    }
    if ((header_length == sizeof(p2p_wire_token_t)) &&
        (((const uint8_t*)header)[0] == P2P_WIRE_TOKEN) && (m.from >= 0)) {
        p2p_wire_token_t t;
        memcpy(&t, header, sizeof(t));
        self->tokens_[m.from] = t.token;
        return UCS_OK;
    }
    if ((header_length != 0) &&
        ((((const uint8_t*)header)[0] == P2P_WIRE_RING) ||
         (((const uint8_t*)header)[0] == P2P_WIRE_CREDIT)) &&
        !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        /* an eager ring offered: not used (p2p_wire.h lets a sender
         * ignore it), so no credit for it either */
        return UCS_OK;
    }
    if ((header_length == 0) && (length >= sizeof(p2p_wire_match_t)) &&
        !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) &&
        (((const uint8_t*)data)[0] == P2P_WIRE_EAGER)) {
        /* a small EAGER message: its header starts the data (p2p_wire.h) */
        header        = data;
        header_length = sizeof(p2p_wire_match_t);
        data          = (uint8_t*)data + header_length;
        length       -= header_length;
    }
    m.hdr.assign((const uint8_t*)header,
                 (const uint8_t*)header + header_length);
    m.length = length;
    m.desc   = nullptr;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        m.desc = data;
        self->inbox_.push_back(std::move(m));
        return UCS_INPROGRESS;
    }
    m.data.assign((const uint8_t*)data, (const uint8_t*)data + length);
    self->inbox_.push_back(std::move(m));
    return UCS_OK;
}

ucs_status_t RawPeer::send_raw(int dest, const void *hdr, size_t hdr_len,
                               const void *data, size_t len, bool reply,
                               uint32_t flags)
{
    ucs_status_t        status = UCS_INPROGRESS;
    ucp_request_param_t param;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                         UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.flags        = flags | (reply ? UCP_AM_SEND_FLAG_REPLY : 0);
    param.cb.send      = send_cb;
    param.user_data    = &status;
    ucs_status_ptr_t sp = ucp_am_send_nbx(ep(dest), P2P_WIRE_AM_ID_DEFAULT,
                                          hdr, hdr_len, data, len, &param);
    if (!UCS_PTR_IS_PTR(sp)) {
        return UCS_PTR_STATUS(sp);
    }
    double deadline = now() + 60;
    while (status == UCS_INPROGRESS) {
        progress();
        if (now() > deadline) {
            die("a send did not complete in 60 s");
        }
    }
    ucp_request_free(sp);
    return status;
}

ucs_status_t RawPeer::send_am(int dest, unsigned am_id, const void *data,
                              size_t len)
{
    ucs_status_t        status = UCS_INPROGRESS;
    ucp_request_param_t param;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                         UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.flags        = UCP_AM_SEND_FLAG_EAGER;
    param.cb.send      = send_cb;
    param.user_data    = &status;
    ucs_status_ptr_t sp = ucp_am_send_nbx(ep(dest), am_id, nullptr, 0, data,
                                          len, &param);
    if (!UCS_PTR_IS_PTR(sp)) {
        return UCS_PTR_STATUS(sp);
    }
    double deadline = now() + 60;
    while (status == UCS_INPROGRESS) {
        progress();
        if (now() > deadline) {
            die("a send did not complete in 60 s");
        }
    }
    ucp_request_free(sp);
    return status;
}

ucs_status_t RawPeer::flush(int dest)
{
    ucp_request_param_t param;

    param.op_attr_mask = 0;
    ucs_status_ptr_t sp = ucp_ep_flush_nbx(ep(dest), &param);
    if (!UCS_PTR_IS_PTR(sp)) {
        return UCS_PTR_STATUS(sp);
    }
    ucs_status_t status;
    double       deadline = now() + 60;
    while ((status = ucp_request_check_status(sp)) == UCS_INPROGRESS) {
        progress();
        if (now() > deadline) {
            die("a flush did not complete in 60 s");
        }
    }
    ucp_request_free(sp);
    return status;
}

bool RawPeer::map(void *buf, size_t len, std::vector<uint8_t> *rkey)
{
    ucp_mem_map_params_t mp;
    void                 *packed;
    size_t               packed_len;

    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                    UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address    = buf;
    mp.length     = len;
    if ((memh_ != nullptr) || (ucp_mem_map(ucp_, &mp, &memh_) != UCS_OK)) {
        return false;
    }
    if (ucp_rkey_pack(ucp_, memh_, &packed, &packed_len) != UCS_OK) {
        unmap();
        return false;
    }
    rkey->assign((uint8_t*)packed, (uint8_t*)packed + packed_len);
    ucp_rkey_buffer_release(packed);
    return true;
}

void RawPeer::unmap()
{
    if (memh_ != nullptr) {
        ucp_mem_unmap(ucp_, memh_);
        memh_ = nullptr;
    }
}

void RawPeer::send_nb(int dest, const void *hdr, size_t hdr_len,
                      const void *data, size_t len, uint32_t flags,
                      Pending *p)
{
    ucp_request_param_t param;

    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                         UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
    param.flags        = flags;
    param.cb.send      = send_cb;
    param.user_data    = &p->status;
    p->sp = ucp_am_send_nbx(ep(dest), P2P_WIRE_AM_ID_DEFAULT, hdr, hdr_len,
                            data, len, &param);
    if (!UCS_PTR_IS_PTR(p->sp)) {
        p->status = UCS_PTR_STATUS(p->sp);
        p->sp     = nullptr;
    }
}

ucs_status_t RawPeer::finish(Pending *p)
{
    double deadline = now() + 60;
    while (p->status == UCS_INPROGRESS) {
        progress();
        if (now() > deadline) {
            die("a send did not complete in 60 s");
        }
    }
    if (p->sp != nullptr) {
        ucp_request_free(p->sp);
        p->sp = nullptr;
    }
    return p->status;
}

p2p_wire_match_t RawPeer::match_hdr(unsigned type, int32_t src, int32_t tag,
                                    uint32_t seq)
{
    /* little-endian fields: this test runs on little-endian hosts */
    p2p_wire_match_t m;
    m.type    = (uint8_t)type;
    m.version = P2P_WIRE_VERSION;
    m.cepoch  = 0;
    m.cid     = 0;
    m.token   = 0;
    m.src     = src;
    m.tag     = tag;
    m.seq     = seq;
    return m;
}

void RawPeer::eager(int dest, int32_t tag, const void *data, size_t len)
{
    p2p_wire_match_t m = match_hdr(P2P_WIRE_EAGER, rank, tag,
                                   send_seq_[dest]++);
    m.token = tokens_[dest];
    if (send_raw(dest, &m, sizeof(m), data, len, m.token == 0) != UCS_OK) {
        die("a correct eager message could not be sent");
    }
}

RawMsg RawPeer::wait(const std::function<bool(const RawMsg&)> &pred,
                     const char *what, double timeout)
{
    double deadline = now() + timeout;
    for (;;) {
        for (auto it = inbox_.begin(); it != inbox_.end(); ++it) {
            if (pred(*it)) {
                RawMsg m = std::move(*it);
                inbox_.erase(it);
                return m;
            }
        }
        progress();
        if (now() > deadline) {
            fprintf(stderr, "[raw rank %d] TIMEOUT waiting for %s\n", rank,
                    what);
            die("giving up");
        }
    }
}

RawMsg RawPeer::wait_tag(int from, int32_t tag, const char *what)
{
    return wait([=](const RawMsg &m) {
        if ((m.from != from) || (m.hdr.size() < sizeof(p2p_wire_match_t)) ||
            (m.type() < P2P_WIRE_EAGER) || (m.type() > P2P_WIRE_RTS)) {
            return false;
        }
        return m.match().tag == tag;
    }, what);
}

void RawPeer::barrier()
{
    /* dissemination, as p2p_barrier: round k talks to rank +- k */
    uint8_t failed = 0;
    for (int k = 1; k < size; k <<= 1) {
        eager((rank + k) % size, P2P_WIRE_TAG_BARRIER, &failed, 1);
        wait_tag((rank - k + size) % size, P2P_WIRE_TAG_BARRIER,
                 "a barrier message");
    }
}

void RawPeer::finalize()
{
    for (RawMsg &m : inbox_) {
        if (m.desc != nullptr) {
            ucp_am_data_release(worker_, m.desc);
        }
    }
    inbox_.clear();
    for (ucp_ep_h e : eps_) {
        if (e == nullptr) {
            continue;
        }
        ucp_request_param_t param;
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags        = UCP_EP_CLOSE_FLAG_FORCE;
        ucs_status_ptr_t sp = ucp_ep_close_nbx(e, &param);
        if (UCS_PTR_IS_PTR(sp)) {
            double deadline = now() + 10;
            while ((ucp_request_check_status(sp) == UCS_INPROGRESS) &&
                   (now() < deadline)) {
                progress();
            }
            ucp_request_free(sp);
        }
    }
    ucp_worker_destroy(worker_);
    unmap();
    ucp_cleanup(ucp_);
    PMIx_Finalize(NULL, 0);
}

}
