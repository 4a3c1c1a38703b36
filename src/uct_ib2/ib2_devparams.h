/*
 * Device parameter file: per-vendor defaults in the spirit of the openib
 * BTL's mca-btl-openib-device-params.ini. Sections name a device family and
 * list the vendor and part ids they match; keys give defaults that the
 * UCX_IB2_* variables override.
 *
 *   [Mellanox ConnectX-6]
 *   vendor_id = 0x02c9,0x119f
 *   vendor_part_id = 4123,4124
 *   mtu = 4096
 *   max_inline_data = 256
 *   receive_queues = P,128,256,192,128:S,8256,1024,1008,64
 *   zcopy_gather_ns = 1000
 *
 * No UCX dependency, so that it can be tested alone.
 */
#ifndef IB2_DEVPARAMS_H
#define IB2_DEVPARAMS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ib2_devparams {
    char     section[128];       /* "" when no section matched */
    unsigned mtu;                /* 0: not given */
    int      max_inline;         /* -1: not given */
    char     receive_queues[512];/* "": not given */
    int      zcopy_gather_ns;    /* -1: not given; what the device spends
                                    on each gather entry in registered user
                                    memory (its address translation) */
} ib2_devparams_t;

#ifndef IB2_DATADIR
#define IB2_DATADIR "/usr/share/ib2"
#endif

/* The installed file: UCX_IB2_DEVICE_PARAMS's default */
#define IB2_DEFAULT_DEVICE_PARAMS IB2_DATADIR "/ib2-device-params.ini"

/* Largest zcopy_gather_ns taken (a millisecond per entry: a device slower
 * than that is not one to zero-copy from at all) */
#define IB2_DEVPARAMS_GATHER_NS_MAX 1000000

/*
 * Look up the device in the file. Returns 0 (params filled; section is ""
 * if nothing matched), or -1 with a message in err naming the file, line and
 * problem (unreadable file, syntax error, bad value).
 */
int ib2_devparams_lookup(const char *path, uint32_t vendor_id,
                         uint32_t vendor_part_id, ib2_devparams_t *params,
                         char *err, size_t max);

/*
 * The parameters UCX_IB2_DEVICE_PARAMS's value gives the device: none for
 * "", none either where the default file is not installed (a build tree);
 * any other file must be readable. Returns 0 (params filled, every value
 * "not given" without a file or section), or -1 as ib2_devparams_lookup.
 */
int ib2_devparams_load(const char *path, uint32_t vendor_id,
                       uint32_t vendor_part_id, ib2_devparams_t *params,
                       char *err, size_t max);

#ifdef __cplusplus
}
#endif

#endif
