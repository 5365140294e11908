// The decoder's CUDA kernels (the "Generate" section of keeper/src/compute/kernels.cu, which the
// test writes beside this file as decoder_kernels.cu) run on the CPU as a GPU would run them:
// the launch's blocks and their warps one after another, each warp 32 threads that meet at
// every shuffle. What keeper/tests/cuda.rs compares with the reference where there is no GPU.
//
// usage: warp_emulator IN OUT, IN holding u32 kind (0 dec_dense, 1 dec_logits), width, rows,
// outputs, blocks, then the kernel's arrays; OUT gets rows × outputs int64.
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

struct Dim {
    unsigned x = 0, y = 0, z = 0;
};
static thread_local Dim threadIdx, blockIdx;
static Dim blockDim, gridDim;
static std::barrier<>* warp;
static long long lanes[32];

template <class T> T __shfl_down_sync(unsigned mask, T v, int off) {
    if (mask != 0xffffffffu) std::abort();
    unsigned lane = threadIdx.x & 31;
    lanes[lane] = (long long)v;
    warp->arrive_and_wait();
    T r = lane + off < 32 ? (T)lanes[lane + off] : v;
    warp->arrive_and_wait();
    return r;
}

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned char u8;
typedef short i16;
typedef long long i64;
#include "decoder_kernels.cu"

template <class F> static void launch(unsigned blocks, unsigned threads, F kernel) {
    gridDim.x = blocks;
    blockDim.x = threads;
    for (unsigned b = 0; b < blocks; b++)
        for (unsigned w = 0; w < threads / 32; w++) {
            std::barrier<> bar(32);
            warp = &bar;
            std::vector<std::thread> ts;
            for (unsigned l = 0; l < 32; l++)
                ts.emplace_back([&, l] {
                    blockIdx.x = b;
                    threadIdx.x = w * 32 + l;
                    kernel();
                });
            for (auto& t : ts) t.join();
        }
}

template <class T> static std::vector<T> take(FILE* f, size_t n) {
    std::vector<T> v(n);
    if (fread(v.data(), sizeof(T), n, f) != n) std::abort();
    return v;
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 3;
    auto head = take<u32>(in, 5);
    u32 kind = head[0], width = head[1], rows = head[2], outs = head[3], blocks = head[4];
    size_t nb = width / 32;
    std::vector<i64> acc((size_t)rows * outs, 0x5555);
    auto x = take<i16>(in, (size_t)rows * width);
    if (kind == 0) {
        auto q4 = take<u8>(in, (size_t)outs * width / 2);
        auto d = take<int>(in, outs * nb);
        auto mn = take<int>(in, outs * nb);
        launch(blocks, 256, [&] {
            dec_dense(x.data(), width, rows, q4.data(), d.data(), mn.data(), outs, acc.data());
        });
    } else {
        auto eq = take<signed char>(in, (size_t)outs * width);
        auto ed = take<int>(in, outs * nb);
        launch(blocks, 256, [&] {
            dec_logits(x.data(), width, rows, eq.data(), ed.data(), outs, acc.data());
        });
    }
    FILE* out = fopen(argv[2], "wb");
    if (!out || fwrite(acc.data(), 8, acc.size(), out) != acc.size()) return 4;
    fclose(out);
    return 0;
}
