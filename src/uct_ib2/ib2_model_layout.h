/*
 * The structure sizes of this build for the memory model (filled by
 * ib2_model_layout.c, which is compiled against UCX's internal headers;
 * the model itself does not depend on UCX).
 */
#ifndef IB2_MODEL_LAYOUT_H
#define IB2_MODEL_LAYOUT_H

#include "ib2_model.h"

#ifdef __cplusplus
extern "C" {
#endif

void ib2_model_layout_get(ib2_model_layout_t *layout);

#ifdef __cplusplus
}
#endif

#endif
