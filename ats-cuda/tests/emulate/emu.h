// Runs ATS's CUDA kernel sources on the host, so their logic (indexing,
// masks, softmax, merges) is checked in CI on machines without a GPU.
//
// Every CUDA thread of a block is a host thread; `__syncthreads` is a block
// barrier and warp shuffles exchange through a per-warp buffer between two
// warp barriers, so kernels must call them uniformly, as CUDA requires.
// Blocks run one after another, which makes `__shared__` (static here) and
// the dynamic shared area per block. Shared memory is filled with NaNs
// before each block so a read of something never written shows up.
// Not emulated: timing, memory ordering between blocks, and performance.

#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define ATS_EMULATE 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static

struct EmuDim {
    unsigned x = 1, y = 1, z = 1;
};
inline thread_local EmuDim threadIdx, blockIdx;
inline EmuDim blockDim, gridDim;

struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };

namespace emu {
constexpr size_t kDynShared = 100 * 1024;
alignas(16) inline unsigned char dyn_shared[kDynShared];
inline std::barrier<>* block_barrier = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
inline uint64_t exchange[1024];

template <class T>
T shfl(T v, int src) {
    const unsigned t = threadIdx.x, w = t / 32;
    std::memcpy(&exchange[t], &v, sizeof(T));
    warp_barriers[w]->arrive_and_wait();
    T r;
    std::memcpy(&r, &exchange[w * 32 + (src & 31)], sizeof(T));
    warp_barriers[w]->arrive_and_wait();
    return r;
}

// `n` values of type T from a driver's input file (aborts when short).
template <class T>
std::vector<T> read(FILE* f, size_t n) {
    std::vector<T> v(n);
    if (fread(v.data(), sizeof(T), n, f) != n) std::abort();
    return v;
}

// Runs `kernel` over a grid of blocks of `block.x` threads (1-D blocks).
template <class F>
void launch(EmuDim grid, EmuDim block, F kernel) {
    const unsigned n = block.x;
    if (block.y != 1 || block.z != 1 || n == 0 || n > 1024) std::abort();
    gridDim = grid;
    blockDim = block;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                std::memset(dyn_shared, 0xff, kDynShared);
                std::barrier<> bar(n);
                block_barrier = &bar;
                warp_barriers.clear();
                for (unsigned w = 0; w < (n + 31) / 32; w++)
                    warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32u, n - 32 * w)));
                std::vector<std::thread> threads;
                for (unsigned t = 0; t < n; t++)
                    threads.emplace_back([=] {
                        threadIdx = EmuDim{t, 0, 0};
                        blockIdx = EmuDim{bx, by, bz};
                        kernel();
                    });
                for (auto& th : threads) th.join();
            }
}
}  // namespace emu

#define DYN_SHARED(T, name) T* name = reinterpret_cast<T*>(emu::dyn_shared)

inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_barriers[threadIdx.x / 32]->arrive_and_wait(); }
template <class T>
T __shfl_sync(unsigned, T v, int src) { return emu::shfl(v, src); }
template <class T>
T __shfl_xor_sync(unsigned, T v, int mask) { return emu::shfl(v, (int)(threadIdx.x % 32) ^ mask); }
template <class T>
T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }

inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::max;
using std::min;

inline float emu_h2f(unsigned short h) { _Float16 f; std::memcpy(&f, &h, 2); return (float)f; }
inline unsigned short emu_f2h(float x) { _Float16 f = (_Float16)x; unsigned short h; std::memcpy(&h, &f, 2); return h; }
