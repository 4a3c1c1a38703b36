/*
 * ib2_info (see ib2_info.c): the model's forms and their output.
 */
#ifndef IB2_INFO_H
#define IB2_INFO_H

#include "ib2_model.h"

#include <stdint.h>

#define IB2I_DEFAULT_RQ  "P,128,256,192,128:S,8256,1024,1008,64"
#define IB2I_MIB         (1024.0 * 1024.0)
#define IB2I_MAX_FORMS   4

typedef struct {
    char            label[16];
    char            spec[1024];     /* canonical */
    ib2_rq_config_t rq;
    ib2_model_result_t res;
} ib2i_form_t;

typedef struct {
    const char        *rq;
    const char        *forms;       /* letters: G(iven), P, S, X */
    const char        *params_file;
    long               vendor, part;
    int                kv;
    uint64_t           budget;      /* bytes per process */
    unsigned long      sweep_from, sweep_to;
    ib2_model_conf_t   conf;
    ib2_model_dev_t    dev;
    ib2_model_layout_t layout;
} ib2i_opts_t;

/* The forms --forms asks for, of the spec rq. */
int ib2i_forms(const ib2i_opts_t *o, const char *rq, ib2i_form_t *f,
               unsigned *count);
int ib2i_compute(const ib2i_opts_t *o, const ib2_model_conf_t *conf,
                 ib2i_form_t *f, unsigned count);
void ib2i_table(const ib2i_opts_t *o, const ib2i_form_t *f, unsigned count);
void ib2i_kv(const ib2i_opts_t *o, const ib2i_form_t *f, unsigned count);
int ib2i_sweep(const ib2i_opts_t *o, ib2i_form_t *f, unsigned count);

#endif
