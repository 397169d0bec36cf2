/*
 * kvswap: moves KV-cache blocks between a layer-major cache in host memory and
 * block-major staging slots. The Go side (swap.go) validates every index and
 * size before calling in; this code trusts its arguments and never allocates
 * anything that outlives a call.
 */
#ifndef KVMESH_KVSWAP_H
#define KVMESH_KVSWAP_H

#include <stdint.h>

/* One region of the cache: block b occupies [b*chunk, (b+1)*chunk) of base and
 * [slot_off, slot_off+chunk) of a staging slot. */
typedef struct {
	uint8_t *base;
	uint64_t chunk;
	uint64_t slot_off;
} kvs_region;

/* One batch: entry i pairs cache block blocks[i] with staging slot slots[i]. */
typedef struct {
	const kvs_region *regions;
	int64_t nregions;
	uint8_t *staging;
	uint64_t slot_bytes;
	const int64_t *blocks;
	const int64_t *slots;
	int64_t n;
	int32_t threads;       /* worker threads including the caller, >= 1, capped at KVS_MAX_THREADS */
	int32_t nontemporal;   /* write the destination with streaming stores */
	int32_t slots_contiguous; /* slots[i] == slots[0] + i for every i */
} kvs_batch;

#define KVS_MAX_THREADS 16

enum { KVS_GATHER = 0, KVS_SCATTER = 1 };

/* kvs_run copies every entry of b in direction dir (cache -> staging for
 * KVS_GATHER, staging -> cache for KVS_SCATTER). It returns the number of
 * worker threads that actually ran (a failed pthread_create shrinks the pool;
 * the work is still done). */
int kvs_run(const kvs_batch *b, int dir);

#endif
