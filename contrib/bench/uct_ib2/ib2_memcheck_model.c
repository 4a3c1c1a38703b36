/*
 * ib2_memcheck: the model's prediction for the job being measured, on
 * softverbs (its limits and ring layout), with this build's structure
 * sizes and this machine's transparent huge page setting (which decides
 * how UCT allocates pool chunks).
 */
#include "ib2_memcheck.h"
#include "ib2_model_layout.h"

int ib2mc_model(const char *rq, int nodes, int ppn, int intra,
                size_t headroom, ib2_model_result_t *res, char *err,
                size_t max)
{
    ib2_model_layout_t layout;
    ib2_model_conf_t conf;
    ib2_model_dev_t dev;
    ib2_rq_config_t config;

    if (ib2_model_parse(rq, &config, err, max) != 0 ||
        ib2_model_dev_preset("softverbs", &dev, err, max) != 0) {
        return -1;
    }
    ib2_model_layout_get(&layout);
    ib2_model_conf_default(&conf);
    conf.nodes       = (unsigned long)nodes;
    conf.ppn         = (unsigned long)ppn;
    conf.intra       = intra;
    conf.rx_headroom = headroom;
    conf.thp         = ib2_model_thp_enabled();
    return ib2_model_compute(&config, &conf, &dev, &layout, res, err, max);
}
