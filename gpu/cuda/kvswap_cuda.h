/*
 * kvswap_cuda: the C interface of kvswap.cu, the device half of the
 * layout-swap core. Plain C so cgo needs no CUDA header. Every function
 * returns 0 or a cudaError_t (kvc_error_string names it). The Go side
 * (cuda_enabled.go) checks block ids, slots and sizes before calling in.
 */
#ifndef KVMESH_KVSWAP_CUDA_H
#define KVMESH_KVSWAP_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvc_cache kvc_cache;
typedef struct kvc_staging kvc_staging;

/* The shape every region shares: region r holds `blocks` chunks of chunk[r]
 * bytes; block b's chunk lands at slot_off[r] of a slot_bytes slot. */
typedef struct {
	int64_t nregions;
	const uint64_t *chunk;
	const uint64_t *slot_off;
	int64_t blocks;
	uint64_t slot_bytes;
} kvc_shape;

const char *kvc_error_string(int err);

/* kvc_device_count reports the CUDA devices; no driver is an error. */
int kvc_device_count(int *count);

/* kvc_cache_open_ipc opens nhandles distinct IPC handles (64 bytes each) of
 * another process's allocations on device; region r lives at
 * handle_index[r]'s allocation + offset[r]. A region that does not fit inside
 * its allocation is refused (bad_region gets its index). */
int kvc_cache_open_ipc(int device, const kvc_shape *shape, const uint8_t *handles, int64_t nhandles,
		       const int64_t *handle_index, const uint64_t *offset, int64_t *bad_region,
		       kvc_cache **out);

/* kvc_cache_alloc allocates a cache of the shape on device (tests, benchmarks). */
int kvc_cache_alloc(int device, const kvc_shape *shape, kvc_cache **out);

/* kvc_cache_close closes or frees what the cache opened or allocated. */
int kvc_cache_close(kvc_cache *c);

/* kvc_staging_new allocates `slots` pinned host slots (returned in *host),
 * device scratch for `scratch_slots` slots, a stream and an event. */
int kvc_staging_new(kvc_cache *c, int64_t slots, int64_t scratch_slots, kvc_staging **out, uint8_t **host);

/* kvc_staging_free frees everything kvc_staging_new allocated. */
int kvc_staging_free(kvc_staging *s);

/* kvc_gather copies cache block blocks[i] into host slot slots[i] (device to
 * host); kvc_scatter the reverse. Both return when the copy is complete. */
int kvc_gather(kvc_cache *c, kvc_staging *s, const int64_t *blocks, const int64_t *slots, int64_t n);
int kvc_scatter(kvc_cache *c, kvc_staging *s, const int64_t *blocks, const int64_t *slots, int64_t n);

/* kvc_cache_fill writes a byte pattern into every region (benchmark set-up). */
int kvc_cache_fill(kvc_cache *c, int value);

/* kvc_bench_memcpy times one contiguous cudaMemcpyAsync of bytes between the
 * pinned buffer and device scratch (to_host: device to host), in ms. */
int kvc_bench_memcpy(kvc_staging *s, int to_host, uint64_t bytes, float *ms);

#ifdef __cplusplus
}
#endif

#endif
