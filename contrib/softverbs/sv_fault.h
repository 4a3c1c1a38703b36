/*
 * Fault injection (sv_fault.c, sv_fault_parse.c): the rules, as parsed
 * from SOFTVERBS_FAULTS or softverbs_faults().
 */
#ifndef SV_FAULT_H
#define SV_FAULT_H

#include "sv_int.h"

#define SV_FAULT_RULES 16

/* what a rule's object filter names */
enum { SV_OBJ_ANY = 0, SV_OBJ_HANDLE = 1, SV_OBJ_ORDINAL = 2 };

struct sv_obj_filter {
    uint8_t  kind;
    uint32_t v;                 /* handle, or ordinal while unresolved */
};

enum { SV_OP_SEND = 1, SV_OP_WRITE = 2, SV_OP_READ = 4, SV_OP_ATOMIC = 8 };

struct sv_fault_rule {
    uint8_t              point;       /* SV_FP_* */
    struct sv_obj_filter obj;         /* qp, srq or cq */
    struct sv_obj_filter mr;
    uint32_t             ops;         /* SV_OP_* mask, 0: all */
    uint64_t             min_len;     /* reg_mr */
    uint64_t             after, every, count;
    double               prob;        /* 0: deterministic (every) */
    uint64_t             rng;
    uint64_t             delay_ns;
    int                  status;      /* send_wc */
    uint64_t             seen, fired; /* operations matched, faults */
};

/* Parse spec into at most SV_FAULT_RULES rules; 0, or -1 with err set. */
int  sv_fault_parse(const char *spec, struct sv_fault_rule *rules, int *n,
                    char *err, size_t errlen);
const char *sv_fault_point_name(int point);

#endif
