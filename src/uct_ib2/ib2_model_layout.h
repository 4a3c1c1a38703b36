/*
 * The structure sizes of this build and the huge page setting of this
 * machine for the memory model (ib2_model_layout.c, which is compiled
 * against UCX's internal headers; the model itself does not depend on
 * UCX).
 */
#ifndef IB2_MODEL_LAYOUT_H
#define IB2_MODEL_LAYOUT_H

#include "ib2_model.h"

#ifdef __cplusplus
extern "C" {
#endif

void ib2_model_layout_get(ib2_model_layout_t *layout);

/* Whether this machine's transparent huge pages are on as UCX reads the
 * setting (it decides how UCT allocates pool chunks): 1 or 0. */
int ib2_model_thp_enabled(void);

#ifdef __cplusplus
}
#endif

#endif
