// kvswap.cu: gathers KV blocks out of a layer-major cache in device memory
// into block-major pinned host slots, and scatters them back.
//
// A batch is cut into pieces of at most scratch_slots entries. For a gather,
// one kernel launch packs a piece block-major into device scratch, then each
// run of consecutive host slots is one cudaMemcpyAsync (contiguous slots: one
// DMA per piece). A scatter does the DMAs first, then the kernel. Everything
// is queued on the staging's own stream in order, so scratch is reused only
// after the DMA that read it; the kernel moves device memory ~50x faster than
// PCIe, so not overlapping it with the DMAs costs a few percent at most.

#include "kvswap_cuda.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

struct kvc_cache {
	int device;
	int64_t nregions;
	int64_t blocks;
	uint64_t slot_bytes;
	uint64_t *chunk;      // host copies of the shape
	uint64_t *slot_off;
	uint8_t **base;       // host copy of the region base pointers
	uint8_t **d_base;     // device copies, read by the kernels
	uint64_t *d_chunk;
	uint64_t *d_slot_off;
	void **opened;        // IPC-opened allocations (closed) ...
	int64_t nopened;
	void *owned;          // ... or one allocation of our own (freed)
};

// A staging records its device and slot size rather than its cache, so it
// can be freed after the cache was.
struct kvc_staging {
	int device;
	uint64_t slot_bytes;
	int64_t slots, scratch_slots;
	uint8_t *host;        // pinned, slots * slot_bytes
	uint8_t *scratch;     // device, scratch_slots * slot_bytes
	int64_t ids_cap;      // max(slots, cache blocks): a valid batch has no more entries
	int64_t *d_ids;       // device copy of a batch's block ids
	int64_t *h_ids;       // pinned copy source for d_ids
	cudaStream_t stream;
	cudaEvent_t done;
};

extern "C" const char *kvc_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }

extern "C" int kvc_device_count(int *count)
{
	*count = 0;
	return cudaGetDeviceCount(count);
}

// copy_chunk copies len bytes with the whole CUDA block: 16-byte vectors when
// both ends are 16-byte aligned, then the bytes that are not a whole vector
// (or all bytes, unaligned) one by one, so no size loses its tail.
__device__ __forceinline__ void copy_chunk(uint8_t *dst, const uint8_t *src, uint64_t len)
{
	uint64_t done = 0;
	if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
		uint64_t vecs = len / 16;
		uint4 *d = reinterpret_cast<uint4 *>(dst);
		const uint4 *s = reinterpret_cast<const uint4 *>(src);
		for (uint64_t i = threadIdx.x; i < vecs; i += blockDim.x)
			d[i] = s[i];
		done = vecs * 16;
	}
	for (uint64_t i = done + threadIdx.x; i < len; i += blockDim.x)
		dst[i] = src[i];
}

// Grid: x = entry of the piece, y = region. Entry j of the piece sits in
// scratch slot j.
__global__ void gather_kernel(uint8_t *const *base, const uint64_t *chunk, const uint64_t *slot_off,
			      uint64_t slot_bytes, const int64_t *ids, uint8_t *scratch)
{
	int64_t j = blockIdx.x, r = blockIdx.y;
	copy_chunk(scratch + j * slot_bytes + slot_off[r], base[r] + ids[j] * chunk[r], chunk[r]);
}

__global__ void scatter_kernel(uint8_t *const *base, const uint64_t *chunk, const uint64_t *slot_off,
			       uint64_t slot_bytes, const int64_t *ids, const uint8_t *scratch)
{
	int64_t j = blockIdx.x, r = blockIdx.y;
	copy_chunk(base[r] + ids[j] * chunk[r], scratch + j * slot_bytes + slot_off[r], chunk[r]);
}

static void cache_free(kvc_cache *c)
{
	if (c == NULL)
		return;
	for (int64_t i = 0; i < c->nopened; i++)
		cudaIpcCloseMemHandle(c->opened[i]);
	cudaFree(c->owned);
	cudaFree(c->d_base);
	cudaFree(c->d_chunk);
	cudaFree(c->d_slot_off);
	free(c->opened);
	free(c->base);
	free(c->chunk);
	free(c->slot_off);
	free(c);
}

// cache_new copies the shape and allocates the host-side tables.
static kvc_cache *cache_new(int device, const kvc_shape *shape)
{
	kvc_cache *c = (kvc_cache *)calloc(1, sizeof *c);
	if (c == NULL)
		return NULL;
	c->device = device;
	c->nregions = shape->nregions;
	c->blocks = shape->blocks;
	c->slot_bytes = shape->slot_bytes;
	size_t n = (size_t)shape->nregions;
	c->chunk = (uint64_t *)malloc(n * sizeof(uint64_t));
	c->slot_off = (uint64_t *)malloc(n * sizeof(uint64_t));
	c->base = (uint8_t **)calloc(n, sizeof(uint8_t *));
	if (c->chunk == NULL || c->slot_off == NULL || c->base == NULL) {
		cache_free(c);
		return NULL;
	}
	memcpy(c->chunk, shape->chunk, n * sizeof(uint64_t));
	memcpy(c->slot_off, shape->slot_off, n * sizeof(uint64_t));
	return c;
}

// cache_upload puts the region table on the device for the kernels.
static int cache_upload(kvc_cache *c)
{
	size_t n = (size_t)c->nregions;
	cudaError_t err;
	if ((err = cudaMalloc(&c->d_base, n * sizeof(uint8_t *))) != cudaSuccess ||
	    (err = cudaMalloc(&c->d_chunk, n * sizeof(uint64_t))) != cudaSuccess ||
	    (err = cudaMalloc(&c->d_slot_off, n * sizeof(uint64_t))) != cudaSuccess ||
	    (err = cudaMemcpy(c->d_base, c->base, n * sizeof(uint8_t *), cudaMemcpyHostToDevice)) != cudaSuccess ||
	    (err = cudaMemcpy(c->d_chunk, c->chunk, n * sizeof(uint64_t), cudaMemcpyHostToDevice)) != cudaSuccess ||
	    (err = cudaMemcpy(c->d_slot_off, c->slot_off, n * sizeof(uint64_t), cudaMemcpyHostToDevice)) != cudaSuccess)
		return err;
	return cudaSuccess;
}

typedef CUresult (*mem_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);

extern "C" int kvc_cache_open_ipc(int device, const kvc_shape *shape, const uint8_t *handles, int64_t nhandles,
				  const int64_t *handle_index, const uint64_t *offset, int64_t *bad_region,
				  kvc_cache **out)
{
	*out = NULL;
	*bad_region = -1;
	cudaError_t err = cudaSetDevice(device);
	if (err != cudaSuccess)
		return err;
	// The driver's cuMemGetAddressRange tells how large each opened
	// allocation is, without linking libcuda directly.
	void *fn = NULL;
	if ((err = cudaGetDriverEntryPoint("cuMemGetAddressRange", &fn, cudaEnableDefault)) != cudaSuccess)
		return err;
	mem_range_fn mem_range = (mem_range_fn)fn;

	kvc_cache *c = cache_new(device, shape);
	if (c == NULL || (c->opened = (void **)calloc((size_t)nhandles, sizeof(void *))) == NULL) {
		cache_free(c);
		return cudaErrorMemoryAllocation;
	}
	for (int64_t h = 0; h < nhandles; h++) {
		cudaIpcMemHandle_t handle;
		memcpy(&handle, handles + h * sizeof handle, sizeof handle);
		if ((err = cudaIpcOpenMemHandle(&c->opened[h], handle, cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess) {
			cache_free(c);
			return err;
		}
		c->nopened++;
	}
	for (int64_t r = 0; r < c->nregions; r++) {
		uint8_t *alloc = (uint8_t *)c->opened[handle_index[r]];
		CUdeviceptr abase = 0;
		size_t asize = 0;
		if (mem_range(&abase, &asize, (CUdeviceptr)alloc) != CUDA_SUCCESS) {
			cache_free(c);
			return cudaErrorInvalidDevicePointer;
		}
		uint64_t need = (uint64_t)c->blocks * c->chunk[r];
		uint64_t avail = (uint64_t)(abase + asize - (CUdeviceptr)alloc);
		if (offset[r] > avail || need > avail - offset[r]) {
			*bad_region = r;
			cache_free(c);
			return cudaErrorInvalidValue;
		}
		c->base[r] = alloc + offset[r];
	}
	if ((err = (cudaError_t)cache_upload(c)) != cudaSuccess) {
		cache_free(c);
		return err;
	}
	*out = c;
	return cudaSuccess;
}

extern "C" int kvc_cache_alloc(int device, const kvc_shape *shape, kvc_cache **out)
{
	*out = NULL;
	cudaError_t err = cudaSetDevice(device);
	if (err != cudaSuccess)
		return err;
	kvc_cache *c = cache_new(device, shape);
	if (c == NULL)
		return cudaErrorMemoryAllocation;
	uint64_t total = 0;
	for (int64_t r = 0; r < c->nregions; r++)
		total += (uint64_t)c->blocks * c->chunk[r];
	if ((err = cudaMalloc(&c->owned, total)) != cudaSuccess) {
		cache_free(c);
		return err;
	}
	uint8_t *p = (uint8_t *)c->owned;
	for (int64_t r = 0; r < c->nregions; r++) {
		c->base[r] = p;
		p += (uint64_t)c->blocks * c->chunk[r];
	}
	if ((err = (cudaError_t)cache_upload(c)) != cudaSuccess) {
		cache_free(c);
		return err;
	}
	*out = c;
	return cudaSuccess;
}

extern "C" int kvc_cache_close(kvc_cache *c)
{
	if (c == NULL)
		return cudaSuccess;
	cudaError_t err = cudaSetDevice(c->device);
	cache_free(c);
	return err;
}

extern "C" int kvc_cache_fill(kvc_cache *c, int value)
{
	cudaError_t err = cudaSetDevice(c->device);
	for (int64_t r = 0; r < c->nregions && err == cudaSuccess; r++)
		err = cudaMemset(c->base[r], value + (int)r, (uint64_t)c->blocks * c->chunk[r]);
	return err;
}

static void staging_free(kvc_staging *s)
{
	if (s == NULL)
		return;
	if (s->stream != NULL)
		cudaStreamSynchronize(s->stream);
	cudaFreeHost(s->host);
	cudaFreeHost(s->h_ids);
	cudaFree(s->scratch);
	cudaFree(s->d_ids);
	if (s->done != NULL)
		cudaEventDestroy(s->done);
	if (s->stream != NULL)
		cudaStreamDestroy(s->stream);
	free(s);
}

extern "C" int kvc_staging_new(kvc_cache *c, int64_t slots, int64_t scratch_slots, kvc_staging **out, uint8_t **host)
{
	*out = NULL;
	*host = NULL;
	cudaError_t err = cudaSetDevice(c->device);
	if (err != cudaSuccess)
		return err;
	kvc_staging *s = (kvc_staging *)calloc(1, sizeof *s);
	if (s == NULL)
		return cudaErrorMemoryAllocation;
	s->device = c->device;
	s->slot_bytes = c->slot_bytes;
	s->slots = slots;
	s->scratch_slots = scratch_slots;
	s->ids_cap = slots > c->blocks ? slots : c->blocks;
	if ((err = cudaHostAlloc(&s->host, (uint64_t)slots * c->slot_bytes, cudaHostAllocPortable)) != cudaSuccess ||
	    (err = cudaHostAlloc(&s->h_ids, (uint64_t)s->ids_cap * sizeof(int64_t), cudaHostAllocDefault)) != cudaSuccess ||
	    (err = cudaMalloc(&s->scratch, (uint64_t)scratch_slots * c->slot_bytes)) != cudaSuccess ||
	    (err = cudaMalloc(&s->d_ids, (uint64_t)s->ids_cap * sizeof(int64_t))) != cudaSuccess ||
	    (err = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking)) != cudaSuccess ||
	    (err = cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming)) != cudaSuccess) {
		staging_free(s);
		return err;
	}
	*out = s;
	*host = s->host;
	return cudaSuccess;
}

extern "C" int kvc_staging_free(kvc_staging *s)
{
	if (s == NULL)
		return cudaSuccess;
	cudaError_t err = cudaSetDevice(s->device);
	staging_free(s);
	return err;
}

// copy_runs queues one DMA per run of consecutive slots among entries
// [p, p+m): between host slot slots[j] and scratch slot j-p.
static cudaError_t copy_runs(kvc_staging *s, const int64_t *slots, int64_t p, int64_t m, int to_host)
{
	uint64_t sb = s->slot_bytes;
	for (int64_t j = p; j < p + m;) {
		int64_t k = j + 1;
		while (k < p + m && slots[k] == slots[k - 1] + 1)
			k++;
		uint8_t *host = s->host + (uint64_t)slots[j] * sb;
		uint8_t *dev = s->scratch + (uint64_t)(j - p) * sb;
		uint64_t len = (uint64_t)(k - j) * sb;
		cudaError_t err = to_host ? cudaMemcpyAsync(host, dev, len, cudaMemcpyDeviceToHost, s->stream)
					  : cudaMemcpyAsync(dev, host, len, cudaMemcpyHostToDevice, s->stream);
		if (err != cudaSuccess)
			return err;
		j = k;
	}
	return cudaSuccess;
}

static int run(kvc_cache *c, kvc_staging *s, const int64_t *blocks, const int64_t *slots, int64_t n, int gather)
{
	if (n > s->ids_cap || s->device != c->device || s->slot_bytes != c->slot_bytes)
		return cudaErrorInvalidValue;
	cudaError_t err = cudaSetDevice(c->device);
	if (err != cudaSuccess)
		return err;
	// The previous batch on this staging has completed (each call waits for
	// its event), so h_ids is free to rewrite.
	memcpy(s->h_ids, blocks, (size_t)n * sizeof(int64_t));
	if ((err = cudaMemcpyAsync(s->d_ids, s->h_ids, (size_t)n * sizeof(int64_t), cudaMemcpyHostToDevice,
				   s->stream)) != cudaSuccess)
		return err;
	for (int64_t p = 0; p < n; p += s->scratch_slots) {
		int64_t m = n - p < s->scratch_slots ? n - p : s->scratch_slots;
		dim3 grid((unsigned)m, (unsigned)c->nregions);
		if (gather) {
			gather_kernel<<<grid, 256, 0, s->stream>>>(c->d_base, c->d_chunk, c->d_slot_off, c->slot_bytes,
								    s->d_ids + p, s->scratch);
			if ((err = cudaGetLastError()) != cudaSuccess || (err = copy_runs(s, slots, p, m, 1)) != cudaSuccess)
				break;
		} else {
			if ((err = copy_runs(s, slots, p, m, 0)) != cudaSuccess)
				break;
			scatter_kernel<<<grid, 256, 0, s->stream>>>(c->d_base, c->d_chunk, c->d_slot_off, c->slot_bytes,
								     s->d_ids + p, s->scratch);
			if ((err = cudaGetLastError()) != cudaSuccess)
				break;
		}
	}
	// Wait even after a failed enqueue: what was queued still reads h_ids
	// and the staging buffer, which the caller may reuse once we return.
	cudaError_t rec = cudaEventRecord(s->done, s->stream);
	cudaError_t sync = rec == cudaSuccess ? cudaEventSynchronize(s->done) : cudaStreamSynchronize(s->stream);
	if (err != cudaSuccess)
		return err;
	return rec != cudaSuccess ? rec : sync;
}

extern "C" int kvc_gather(kvc_cache *c, kvc_staging *s, const int64_t *blocks, const int64_t *slots, int64_t n)
{
	return run(c, s, blocks, slots, n, 1);
}

extern "C" int kvc_scatter(kvc_cache *c, kvc_staging *s, const int64_t *blocks, const int64_t *slots, int64_t n)
{
	return run(c, s, blocks, slots, n, 0);
}

extern "C" int kvc_bench_memcpy(kvc_staging *s, int to_host, uint64_t bytes, float *ms)
{
	cudaEvent_t start, stop;
	cudaError_t err = cudaSetDevice(s->device);
	if (err != cudaSuccess)
		return err;
	if ((err = cudaEventCreate(&start)) != cudaSuccess)
		return err;
	if ((err = cudaEventCreate(&stop)) != cudaSuccess) {
		cudaEventDestroy(start);
		return err;
	}
	cudaEventRecord(start, s->stream);
	err = to_host ? cudaMemcpyAsync(s->host, s->scratch, bytes, cudaMemcpyDeviceToHost, s->stream)
		      : cudaMemcpyAsync(s->scratch, s->host, bytes, cudaMemcpyHostToDevice, s->stream);
	cudaEventRecord(stop, s->stream);
	if (err == cudaSuccess)
		err = cudaEventSynchronize(stop);
	if (err == cudaSuccess)
		err = cudaEventElapsedTime(ms, start, stop);
	cudaEventDestroy(start);
	cudaEventDestroy(stop);
	return err;
}
