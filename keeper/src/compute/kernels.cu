// Compute Market kernels, compiled at run time by NVRTC (fmad off, no fast math) to a CUBIN
// for the device's own architecture. Every result is exact integer arithmetic (mod 2^31 - 1,
// SHA-256), so the bits equal the CPU reference (keeper/src/compute/cpu.rs) whatever the
// order of evaluation. No floating point, no atomics.

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned char u8;

#define P 2147483647ULL
#define TILE 64
#define KSTEP 16

// One Mersenne fold: x < 2^64 -> a value < 2^33 + 2^31, congruent mod P.
__device__ __forceinline__ u64 fold(u64 x) { return (x & P) + (x >> 31); }

// A cheaper fold for the matmul accumulators: x = hi·2^32 + lo ≡ 2·hi + lo (mod P, as
// 2^32 = 2·2^31 ≡ 2), one 32×32+64-bit multiply-add: x < 2^64 -> a value < 2^34.
__device__ __forceinline__ u64 fold32(u64 x) {
    u64 r;
    asm("mad.wide.u32 %0, %1, 2, %2;" : "=l"(r) : "r"((u32)(x >> 32)), "l"(x & 0xFFFFFFFFULL));
    return r;
}

// x mod P exactly (compute_market_protocol::job::mod_p).
__device__ __forceinline__ u32 reduce(u64 x) {
    x = fold(x);
    x = fold(x);
    return (u32)(x >= P ? x - P : x);
}

// compute_market_protocol::job::splitmix64
__device__ __forceinline__ u64 splitmix64(u64 z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// compute_market_protocol::job::matrix_element
__device__ __forceinline__ u32 element(u64 key, u64 idx) {
    return reduce(splitmix64(key ^ (idx * 0xD1B54A32D192ED03ULL)));
}

// out[i] = element(key, i) for i < count: a generated input matrix, row-major.
extern "C" __global__ void gen_matrix(u64 key, u32* out, u64 count) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (u64)gridDim.x * blockDim.x) {
        out[i] = element(key, i);
    }
}

// C = A·B mod P with A m×k and B k×n (row-major), as the job's output tiles: tile (tr, tc) is
// the 64×64 block at rows 64·tr, columns 64·tc, zero-padded outside C, row-major. A launch
// covers tile rows tr0.. and tile columns tc0.. (grid: columns × rows) and writes its tiles
// contiguously, launch-row-major: out + (blockIdx.y·gridDim.x + blockIdx.x)·4096.
// Block: 16×16 threads, 4×4 outputs each.
extern "C" __global__ void __launch_bounds__(256) matmul_tiles(
    const u32* __restrict__ a, const u32* __restrict__ b, u32* __restrict__ out,
    u32 m, u32 k, u32 n, u32 tr0, u32 tc0) {
    // as[kk][r] = A[row0 + r][k0 + kk]; rows padded by 4 words: the 16 threads that store one
    // row's k-slice spread over 8 banks, two to a bank (unpadded they would all hit one; a
    // conflict-free stride would break the rows' 16-byte alignment for the vector loads)
    __shared__ __align__(16) u32 as[KSTEP][TILE + 4];
    __shared__ __align__(16) u32 bs[KSTEP][TILE];  // bs[kk][c] = B[k0 + kk][col0 + c]
    const u32 tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    const u32 tc = tc0 + blockIdx.x, tr = tr0 + blockIdx.y;
    const u32 row0 = tr * TILE, col0 = tc * TILE;
    u64 acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0;

    for (u32 k0 = 0; k0 < k; k0 += KSTEP) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
            u32 idx = tid + 256 * q;
            u32 r = idx / KSTEP, kk = idx % KSTEP;  // A: consecutive threads, consecutive k
            u32 gr = row0 + r, gk = k0 + kk;
            as[kk][r] = (gr < m && gk < k) ? a[(u64)gr * k + gk] : 0;
            u32 bk = idx / TILE, c = idx % TILE;    // B: consecutive threads, consecutive columns
            u32 gk2 = k0 + bk, gc = col0 + c;
            bs[bk][c] = (gk2 < k && gc < n) ? b[(u64)gk2 * n + gc] : 0;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < KSTEP; kk++) {
            uint4 av = *reinterpret_cast<const uint4*>(&as[kk][ty * 4]);
            uint4 bv = *reinterpret_cast<const uint4*>(&bs[kk][tx * 4]);
            u32 ar[4] = {av.x, av.y, av.z, av.w};
            u32 br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += (u64)ar[i] * br[j];
            // four products (each ≤ (2^31 − 2)^2 = 2^62 − 2^33 + 4) on top of a folded value
            // (< 2^34) stay below 2^64 − 2^34 + 16: fold every fourth step
            if (kk % 4 == 3) {
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) acc[i][j] = fold32(acc[i][j]);
            }
        }
        __syncthreads();
    }
    u32* tile = out + ((u64)blockIdx.y * gridDim.x + blockIdx.x) * (TILE * TILE);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        u32 r = ty * 4 + i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            u32 c = tx * 4 + j;
            bool inside = row0 + r < m && col0 + c < n;
            tile[r * TILE + c] = inside ? reduce(acc[i][j]) : 0;
        }
    }
}

// ---- MatMulModP on the tensor cores (sm_75 and later) ----
//
// Every value is < 2^31, so it is four bytes: A = Σ_i 2^(8i)·A_i and B = Σ_j 2^(8j)·B_j with
// byte planes A_i, B_j. Then A·B = Σ_s 2^(8s)·D_s with D_s = Σ_{i+j=s} A_i·B_j: sixteen 8-bit
// integer products, exact on the tensor cores with 32-bit accumulation. Bound: a byte
// product is ≤ 255·255 (≤ 255·127 with a top byte, as values are < 2^31), at most four pairs
// share a shift and K ≤ 8192 (MAX_MATRIX_DIM): D_s ≤ 8192·(2·65025 + 2·32385) < 2^31. The
// epilogue sums D_s·(2^(8s) mod P) (< 7·2^55) in 64 bits and reduces exactly, so the result is
// the CPU's bit for bit.

// Byte planes of M (rows × ld, zero where r ≥ valid_rows or c ≥ valid_cols), generated here:
// M[r][c] = element(key, r·src_cols + c), or element(key, c·src_cols + r) when `transpose` (B's
// planes are stored by column, k running along, like A's rows). Each plane is cut into blocks
// of 8 rows × 16 columns, 128 bytes each, row-major inside and ordered by (r / 8, c / 16): byte
// p of M[r][c] goes to out + p·rows·ld + ((r/8)·(ld/16) + c/16)·128 + (r%8)·16 + c%16. Then lane
// L of a warp reads its fragment of an 8×16 block (row L/4, bytes 4·(L%4)..+3) at byte 4·L of
// the block: one 128-byte line per warp-wide load. rows must be a multiple of 8, ld of 16.
extern "C" __global__ void byte_planes(u64 key, u32 src_cols, u32 valid_rows, u32 valid_cols,
                                       u32 transpose, u8* __restrict__ out, u32 rows, u32 ld) {
    const u64 count = (u64)rows * ld;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (u64)gridDim.x * blockDim.x) {
        const u32 r = (u32)(i / ld), c = (u32)(i % ld);
        u32 v = 0;
        if (r < valid_rows && c < valid_cols)
            v = element(key, transpose ? (u64)c * src_cols + r : (u64)r * src_cols + c);
        const u64 at = ((u64)(r >> 3) * (ld >> 4) + (c >> 4)) * 128 + (r & 7) * 16 + (c & 15);
#pragma unroll
        for (int p = 0; p < 4; p++) out[(u64)p * count + at] = (u8)(v >> (8 * p));
    }
}

// D += A·B for one 8×8×16 block of unsigned bytes (PTX mma.m8n8k16): lane L holds A's row
// L/4, bytes k = 4·(L%4)..+3 (lowest address lowest byte), B's column L/4 with the same k, and
// D's row L/4, columns 2·(L%4) and 2·(L%4)+1.
__device__ __forceinline__ void mma_u8(u32& d0, u32& d1, u32 a, u32 b) {
#if __CUDA_ARCH__ >= 750
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.u8.u8.s32 {%0,%1}, {%2}, {%3}, {%0,%1};"
                 : "+r"(d0), "+r"(d1) : "r"(a), "r"(b));
#else
    asm volatile("trap;");
#endif
}

// The epilogue of both tensor-core kernels: output (r, c) of tile (tr, tc) is
// Σ_s acc[s][g][q]·2^(8s) mod P from its seven shift sums, or 0 outside C.
template <int Q>
__device__ __forceinline__ void store_shifts(u32* tile, const u32 (&acc)[7][4][Q], int g, int q, u32 r, u32 c,
                                             u32 tr, u32 tc, u32 m, u32 n) {
    // 2^(8s) mod P: 2^32 ≡ 2, so 2^40 ≡ 2^9 and 2^48 ≡ 2^17
    const u64 weight[7] = {1ULL, 1ULL << 8, 1ULL << 16, 1ULL << 24, 2ULL, 1ULL << 9, 1ULL << 17};
    u64 sum = 0;
#pragma unroll
    for (int s = 0; s < 7; s++) sum += (u64)acc[s][g][q] * weight[s];
    tile[(r - tr * TILE) * TILE + (c - tc * TILE)] = (r < m && c < n) ? reduce(sum) : 0;
}

// The tiles of matmul_tiles (same grid, same output layout) from the byte planes of
// byte_planes: `ap` holds A's four planes (rows padded to whole tiles × ldk, `a_plane` bytes
// apart), `bp` B's four by column (columns padded to whole tiles × ldk, `b_plane` apart); ldk
// is k rounded up to 32 (a multiple of 16 would do here, 32 for the wide kernel below, and
// both read the same planes) and the padding is zero. Block: 16 warps; warp w computes rows
// 8·(w/2)..+7 and columns 32·(w%2)..+31 of the tile, as four 8×8 blocks, keeping the seven
// shifts' sums apart.
extern "C" __global__ void __launch_bounds__(512) matmul_tiles_imma(
    const u8* __restrict__ ap, const u8* __restrict__ bp, u32* __restrict__ out,
    u32 m, u32 n, u32 ldk, u64 a_plane, u64 b_plane, u32 tr0, u32 tc0) {
    const u32 lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const u32 tc = tc0 + blockIdx.x, tr = tr0 + blockIdx.y;
    const u32 row0 = tr * TILE + 8 * (w >> 1), col0 = tc * TILE + 32 * (w & 1);
    const u32 quad = lane >> 2;
    u32 acc[7][4][2];
#pragma unroll
    for (int s = 0; s < 7; s++)
#pragma unroll
        for (int g = 0; g < 4; g++) acc[s][g][0] = acc[s][g][1] = 0;
    // this lane's word of the first 8×16 block of its row group (A) and column groups (B); the
    // next k-step's blocks follow 128 bytes on, a column group's (ldk/16)·128 = 8·ldk further
    const u8* arow = ap + (u64)(row0 >> 3) * (ldk >> 4) * 128 + 4 * lane;
    const u8* bcol = bp + (u64)(col0 >> 3) * (ldk >> 4) * 128 + 4 * lane;
    for (u32 k0 = 0; k0 < ldk; k0 += 16) {
        const u64 kb = (u64)(k0 >> 4) * 128;
        u32 a[4], b[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++) a[i] = *reinterpret_cast<const u32*>(arow + i * a_plane + kb);
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int g = 0; g < 4; g++) b[j][g] = *reinterpret_cast<const u32*>(bcol + j * b_plane + (u64)g * 8 * ldk + kb);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int g = 0; g < 4; g++) mma_u8(acc[i + j][g][0], acc[i + j][g][1], a[i], b[j][g]);
    }
    u32* tile = out + ((u64)blockIdx.y * gridDim.x + blockIdx.x) * (TILE * TILE);
#pragma unroll
    for (int g = 0; g < 4; g++)
#pragma unroll
        for (int v = 0; v < 2; v++)
            store_shifts(tile, acc, g, v, row0 + quad, col0 + 8 * g + 2 * (lane & 3) + v, tr, tc, m, n);
}

// D += A·B for one 16×8×32 block of unsigned bytes (PTX mma.m16n8k32, sm_80 and later), which
// is four m8n8k16 blocks: a0 and a1 hold rows 0–7 and 8–15 of k 0–15, a2 and a3 the same rows of
// k 16–31, each laid out like mma_u8's A; b0 and b1 hold k 0–15 and 16–31 like its B; d0, d1 are
// rows 0–7 and d2, d3 rows 8–15 like its D.
__device__ __forceinline__ void mma_u8_wide(u32 (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    asm volatile("trap;");
#endif
}

// matmul_tiles_imma with the m16n8k32 shape (sm_80 and later): the same planes (ldk a multiple
// of 32), 8 warps; warp w computes rows 16·(w/2)..+15 and columns 32·(w%2)..+31 of the tile.
extern "C" __global__ void __launch_bounds__(256) matmul_tiles_imma_wide(
    const u8* __restrict__ ap, const u8* __restrict__ bp, u32* __restrict__ out,
    u32 m, u32 n, u32 ldk, u64 a_plane, u64 b_plane, u32 tr0, u32 tc0) {
    const u32 lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const u32 tc = tc0 + blockIdx.x, tr = tr0 + blockIdx.y;
    const u32 row0 = tr * TILE + 16 * (w >> 1), col0 = tc * TILE + 32 * (w & 1);
    const u32 quad = lane >> 2;
    u32 acc[7][4][4];
#pragma unroll
    for (int s = 0; s < 7; s++)
#pragma unroll
        for (int g = 0; g < 4; g++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[s][g][q] = 0;
    // block (row group, k block) of a plane: ((group)·(ldk/16) + k block)·128; the next row
    // group is (ldk/16)·128 = 8·ldk bytes on
    const u8* arow = ap + (u64)(row0 >> 3) * (ldk >> 4) * 128 + 4 * lane;
    const u8* bcol = bp + (u64)(col0 >> 3) * (ldk >> 4) * 128 + 4 * lane;
    for (u32 k0 = 0; k0 < ldk; k0 += 32) {
        const u64 kb = (u64)(k0 >> 4) * 128;
        u32 a[4][4], b[4][4][2];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const u8* p = arow + i * a_plane + kb;
            a[i][0] = *reinterpret_cast<const u32*>(p);
            a[i][1] = *reinterpret_cast<const u32*>(p + 8 * (u64)ldk);
            a[i][2] = *reinterpret_cast<const u32*>(p + 128);
            a[i][3] = *reinterpret_cast<const u32*>(p + 8 * (u64)ldk + 128);
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int g = 0; g < 4; g++) {
                const u8* p = bcol + j * b_plane + (u64)g * 8 * ldk + kb;
                b[j][g][0] = *reinterpret_cast<const u32*>(p);
                b[j][g][1] = *reinterpret_cast<const u32*>(p + 128);
            }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int g = 0; g < 4; g++) mma_u8_wide(acc[i + j][g], a[i], b[j][g][0], b[j][g][1]);
    }
    u32* tile = out + ((u64)blockIdx.y * gridDim.x + blockIdx.x) * (TILE * TILE);
#pragma unroll
    for (int g = 0; g < 4; g++)
#pragma unroll
        for (int q = 0; q < 4; q++)
            store_shifts(tile, acc, g, q, row0 + quad + 8 * (q >> 1), col0 + 8 * g + 2 * (lane & 3) + (q & 1),
                         tr, tc, m, n);
}

// out[r·rows + i] = Σ_j element(key, i·cols + j) · vs[r·cols + j] mod P for r < nv (≤ 4): the
// Freivalds products of a generated matrix, one block per row, never storing the matrix.
extern "C" __global__ void __launch_bounds__(256) gen_rows_dot(
    u64 key, u32 rows, u32 cols, const u32* __restrict__ vs, u32 nv, u32* __restrict__ out) {
    __shared__ u64 part[4][256];
    const u32 row = blockIdx.x, t = threadIdx.x;
    if (row >= rows) return;
    u64 acc[4] = {0, 0, 0, 0};
    const u64 base = (u64)row * cols;
    for (u32 j = t; j < cols; j += blockDim.x) {
        u64 e = element(key, base + j);
#pragma unroll
        for (int r = 0; r < 4; r++)
            if (r < nv) acc[r] = fold(acc[r] + e * vs[(u64)r * cols + j]);
    }
#pragma unroll
    for (int r = 0; r < 4; r++) part[r][t] = acc[r];
    __syncthreads();
    for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
#pragma unroll
            for (int r = 0; r < 4; r++) part[r][t] = fold(part[r][t] + part[r][t + s]);
        }
        __syncthreads();
    }
    if (t < nv) out[(u64)t * rows + row] = reduce(part[t][0]);
}

// ---- SHA-256 (FIPS 180-4) ----

__constant__ u32 K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

__device__ __forceinline__ u32 rotr(u32 x, u32 n) { return (x >> n) | (x << (32 - n)); }

// One compression of a single 64-byte block given as 16 big-endian words.
__device__ void sha256_block(u32 w[16], u32 h[8]) {
    u32 a = 0x6a09e667, b = 0xbb67ae85, c = 0x3c6ef372, d = 0xa54ff53a;
    u32 e = 0x510e527f, f = 0x9b05688c, g = 0x1f83d9ab, hh = 0x5be0cd19;
#pragma unroll
    for (int i = 0; i < 64; i++) {
        u32 wi;
        if (i < 16) {
            wi = w[i];
        } else {
            u32 w15 = w[(i - 15) & 15], w2 = w[(i - 2) & 15];
            u32 s0 = rotr(w15, 7) ^ rotr(w15, 18) ^ (w15 >> 3);
            u32 s1 = rotr(w2, 17) ^ rotr(w2, 19) ^ (w2 >> 10);
            wi = w[i & 15] = w[i & 15] + s0 + w[(i - 7) & 15] + s1;
        }
        u32 S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        u32 ch = (e & f) ^ (~e & g);
        u32 t1 = hh + S1 + ch + K256[i] + wi;
        u32 S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        u32 mj = (a & b) ^ (a & c) ^ (b & c);
        u32 t2 = S0 + mj;
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] = 0x6a09e667 + a; h[1] = 0xbb67ae85 + b; h[2] = 0x3c6ef372 + c; h[3] = 0xa54ff53a + d;
    h[4] = 0x510e527f + e; h[5] = 0x9b05688c + f; h[6] = 0x1f83d9ab + g; h[7] = 0x5be0cd19 + hh;
}

// HashBatch: for nonce = first + i (i < count), SHA-256(seed ‖ nonce as u64 LE) iterated
// `iterations` times in all (each further round hashes the previous 32-byte digest); the
// digest goes to out + 32·i. `seed` is 8 big-endian words.
extern "C" __global__ void hash_batch(const u32* __restrict__ seed, u64 first, u64 count, u32 iterations, u8* __restrict__ out) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    u64 nonce = first + i;
    u32 w[16];
#pragma unroll
    for (int q = 0; q < 8; q++) w[q] = seed[q];
    // the nonce's 8 little-endian bytes, read as big-endian words
    u32 lo = (u32)nonce, hi = (u32)(nonce >> 32);
    w[8] = __byte_perm(lo, 0, 0x0123);
    w[9] = __byte_perm(hi, 0, 0x0123);
    w[10] = 0x80000000;  // padding after 40 bytes
#pragma unroll
    for (int q = 11; q < 15; q++) w[q] = 0;
    w[15] = 40 * 8;
    u32 h[8];
    sha256_block(w, h);
    for (u32 it = 1; it < iterations; it++) {
#pragma unroll
        for (int q = 0; q < 8; q++) w[q] = h[q];
        w[8] = 0x80000000;
#pragma unroll
        for (int q = 9; q < 15; q++) w[q] = 0;
        w[15] = 32 * 8;
        sha256_block(w, h);
    }
    u8* o = out + 32 * i;
#pragma unroll
    for (int q = 0; q < 8; q++) {
        o[4 * q] = (u8)(h[q] >> 24);
        o[4 * q + 1] = (u8)(h[q] >> 16);
        o[4 * q + 2] = (u8)(h[q] >> 8);
        o[4 * q + 3] = (u8)h[q];
    }
}

typedef signed char i8;

// Four exact 8-bit products added to c: dp4a from sm_61, byte by byte before.
__device__ __forceinline__ int dot4(int a, int b, int c) {
#if __CUDA_ARCH__ >= 610
    return __dp4a(a, b, c);
#else
#pragma unroll
    for (int k = 0; k < 4; k++) c += (int)(i8)(a >> (8 * k)) * (int)(i8)(b >> (8 * k));
    return c;
#endif
}

// One dense layer of an integer MLP (PROTOCOL §5, Mlp) over `rows` rows, one thread per
// (row, output), grid-stride: acc = bias[o] + Σ_j W[o][j]·x[r][j], the rows of x and W padded
// with zeros to in4 bytes (a multiple of 4), four products a step; int32 sums are exact by the
// model's bound, so any order gives the CPU's value. A hidden layer writes
// max(0, clamp(⌊(acc·M + 2^(s−1)) / 2^s⌋, −128, 127)) (int64, arithmetic shift) to y (rows ×
// out4, padding left zero); the last layer writes acc to logits (rows × out).
extern "C" __global__ void mlp_layer(const i8* __restrict__ x, u32 in4, const i8* __restrict__ w,
                                     const int* __restrict__ bias, const int* __restrict__ mult,
                                     const int* __restrict__ shift, u32 rows, u32 out, u32 out4,
                                     int hidden, i8* __restrict__ y, int* __restrict__ logits) {
    u64 total = (u64)rows * out;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x) {
        u32 r = (u32)(i / out), o = (u32)(i % out);
        const int* xr = (const int*)(x + (u64)r * in4);
        const int* wo = (const int*)(w + (u64)o * in4);
        int acc = bias[o];
        for (u32 j = 0; j < in4 / 4; j++) acc = dot4(xr[j], wo[j], acc);
        if (hidden) {
            int s = shift[o];
            long long v = ((long long)acc * mult[o] + (1LL << (s - 1))) >> s;
            v = v < 0 ? 0 : (v > 127 ? 127 : v);
            y[(u64)r * out4 + o] = (i8)v;
        } else {
            logits[(u64)r * out + o] = acc;
        }
    }
}

// ---- The integer encoder (PROTOCOL §5, Encoder): one launch per step over a batch of texts,
// their rows (tokens) stacked. Every value is the CPU reference's (crates/protocol/src/
// encoder.rs): integer sums exact by the model's bounds (any order gives the same value),
// int64 requantization with an arithmetic shift, floor divisions, no floating point but an
// exact integer square root's first guess.

typedef short i16;
typedef long long i64;

#define ENC_RES (1LL << 24)
#define ENC_MAX_T 512

// clamp(⌊(acc·m + 2^(s−1)) / 2^s⌋, lo, hi) (Requant::apply)
__device__ __forceinline__ i64 enc_rq(i64 acc, int m, int s, i64 lo, i64 hi) {
    i64 v = (acc * (i64)m + (1LL << (s - 1))) >> s;
    return v < lo ? lo : (v > hi ? hi : v);
}

// ⌊a / d⌋ for d ≥ 1
__device__ __forceinline__ i64 enc_floor_div(i64 a, i64 d) {
    i64 q = a / d;
    return (a % d != 0 && a < 0) ? q - 1 : q;
}

// Two int16 · int8 products added to c: x holds two int16 (low first), w's bytes `2·hi`,
// `2·hi + 1` the two int8 weights (dp2a from sm_61, one by one before).
__device__ __forceinline__ int enc_dot2(int x, int w, int c, int hi) {
#if __CUDA_ARCH__ >= 610
    return hi ? __dp2a_hi(x, w, c) : __dp2a_lo(x, w, c);
#else
    int s = hi ? 16 : 0;
    return c + (int)(i16)x * (int)(i8)(w >> s) + (int)(i16)(x >> 16) * (int)(i8)(w >> (s + 8));
#endif
}

// The embeddings into the residual stream, one thread per (row, channel):
// r = rq(word[id]) + rq(pos[p]), each clamped to ±2^24.
extern "C" __global__ void enc_embed(const u32* __restrict__ ids, const u32* __restrict__ pos,
                                     const i8* __restrict__ word, const i8* __restrict__ pemb,
                                     u32 h, const int* __restrict__ wm, const int* __restrict__ ws,
                                     const int* __restrict__ pm, const int* __restrict__ ps,
                                     u32 rows, int* __restrict__ r) {
    u64 total = (u64)rows * h;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x) {
        u32 row = (u32)(i / h), c = (u32)(i % h);
        i64 a = enc_rq(word[(u64)ids[row] * h + c], wm[c], ws[c], -ENC_RES, ENC_RES);
        i64 b = enc_rq(pemb[(u64)pos[row] * h + c], pm[c], ps[c], -ENC_RES, ENC_RES);
        r[i] = (int)(a + b);
    }
}

// LayerNorm (Norm::apply), one block of 256 threads per row: μ = ⌊Σr / n⌋, σ = max(⌊√⌊Σd² /
// n⌋⌋, 1), z = ⌊d · 2^12 / σ⌋, y = clamp(⌊(z·g + b + 2^(t−1)) / 2^t⌋, ±32767) into int16 rows
// of `ystride`.
extern "C" __global__ void __launch_bounds__(256) enc_norm(const int* __restrict__ r, u32 h,
                                                           const int* __restrict__ g,
                                                           const int* __restrict__ b, int t,
                                                           u32 rows, i16* __restrict__ y,
                                                           u32 ystride) {
    __shared__ i64 part[256];
    u32 tid = threadIdx.x;
    for (u32 row = blockIdx.x; row < rows; row += gridDim.x) {
        const int* rr = r + (u64)row * h;
        i64 s = 0;
        for (u32 c = tid; c < h; c += 256) s += rr[c];
        part[tid] = s;
        __syncthreads();
        for (u32 k = 128; k > 0; k >>= 1) {
            if (tid < k) part[tid] += part[tid + k];
            __syncthreads();
        }
        i64 mu = enc_floor_div(part[0], h);
        __syncthreads();
        i64 q = 0;
        for (u32 c = tid; c < h; c += 256) {
            i64 d = rr[c] - mu;
            q += d * d;
        }
        part[tid] = q;
        __syncthreads();
        for (u32 k = 128; k > 0; k >>= 1) {
            if (tid < k) part[tid] += part[tid + k];
            __syncthreads();
        }
        u64 var = (u64)(part[0] / h);
        __syncthreads();
        u64 sg = (u64)sqrt((double)var);
        while (sg > 0 && sg * sg > var) sg--;
        while ((sg + 1) * (sg + 1) <= var) sg++;
        i64 sigma = sg < 1 ? 1 : (i64)sg;
        for (u32 c = tid; c < h; c += 256) {
            i64 z = enc_floor_div((i64)(rr[c] - mu) * 4096, sigma);
            i64 v = (z * g[c] + b[c] + (1LL << (t - 1))) >> t;
            v = v < -32767 ? -32767 : (v > 32767 ? 32767 : v);
            y[(u64)row * ystride + c] = (i16)v;
        }
    }
}

// A dense layer (Dense::apply) over int16 rows, one thread per (row, output): x rows of k4
// int16 (zero past the inputs), the weights transposed as k4/4 rows of `out` words (each the
// output's four int8 weights of those inputs: consecutive threads read consecutive words),
// sums in int32 (exact by the row bound), requantized to lo ..= hi into int32 y (rows × out).
extern "C" __global__ void enc_gemm(const int* __restrict__ x, u32 k4, const int* __restrict__ wt,
                                    const int* __restrict__ bias, const int* __restrict__ mult,
                                    const int* __restrict__ shift, u32 rows, u32 out, i64 lo,
                                    i64 hi, int* __restrict__ y) {
    u64 total = (u64)rows * out;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x) {
        u32 row = (u32)(i / out), o = (u32)(i % out);
        const int* xr = x + (u64)row * (k4 / 2);
        int acc = 0;
        for (u32 q = 0; q < k4 / 4; q++) {
            int w = wt[(u64)q * out + o];
            acc = enc_dot2(xr[2 * q], w, acc, 0);
            acc = enc_dot2(xr[2 * q + 1], w, acc, 1);
        }
        y[i] = (int)enc_rq((i64)bias[o] + acc, mult[o], shift[o], lo, hi);
    }
}

// Attention (Encoder::attention), one block of 128 threads per (row i, head): its text's rows
// first[i] .. first[i] + len[i]; scores S_j = Σ q·k, e_j = E[min(⌊((max S − S_j)·m + 2^(s−1))
// / 2^s⌋, 1023)], p_j = ⌊e_j · 2^15 / Σe⌋, ctx = rq(Σ_j p_j · v_j) to int8 into int16 rows of
// `cstride`.
extern "C" __global__ void __launch_bounds__(128) enc_attention(
    const int* __restrict__ qkv, u32 h, u32 heads, const u32* __restrict__ first,
    const u32* __restrict__ len, const int* __restrict__ table, int am, int ash,
    const int* __restrict__ cm, const int* __restrict__ cs, u32 rows, i16* __restrict__ ctx,
    u32 cstride) {
    __shared__ i64 e[ENC_MAX_T];
    __shared__ i64 red[128];
    u32 tid = threadIdx.x, dh = h / heads;
    for (u64 blk = blockIdx.x; blk < (u64)rows * heads; blk += gridDim.x) {
        u32 i = (u32)(blk / heads), c0 = (u32)(blk % heads) * dh;
        u32 f = first[i], t = len[i];
        const int* qi = qkv + (u64)i * 3 * h + c0;
        for (u32 j = tid; j < t; j += 128) {
            const int* kj = qkv + (u64)(f + j) * 3 * h + h + c0;
            int s = 0;
            for (u32 d = 0; d < dh; d++) s += qi[d] * kj[d];
            e[j] = s;
        }
        __syncthreads();
        i64 m = -(1LL << 62);
        for (u32 j = tid; j < t; j += 128) m = e[j] > m ? e[j] : m;
        red[tid] = m;
        __syncthreads();
        for (u32 k = 64; k > 0; k >>= 1) {
            if (tid < k && red[tid + k] > red[tid]) red[tid] = red[tid + k];
            __syncthreads();
        }
        i64 mx = red[0];
        __syncthreads();
        i64 s = 0;
        for (u32 j = tid; j < t; j += 128) {
            i64 idx = ((mx - e[j]) * am + (1LL << (ash - 1))) >> ash;
            i64 ev = table[idx < 1023 ? idx : 1023];
            e[j] = ev;
            s += ev;
        }
        red[tid] = s;
        __syncthreads();
        for (u32 k = 64; k > 0; k >>= 1) {
            if (tid < k) red[tid] += red[tid + k];
            __syncthreads();
        }
        i64 sum = red[0];
        for (u32 j = tid; j < t; j += 128) e[j] = (e[j] << 15) / sum;
        __syncthreads();
        for (u32 d = tid; d < dh; d += 128) {
            i64 acc = 0;
            for (u32 j = 0; j < t; j++) acc += e[j] * qkv[(u64)(f + j) * 3 * h + 2 * h + c0 + d];
            ctx[(u64)i * cstride + c0 + d] = (i16)enc_rq(acc, cm[c0 + d], cs[c0 + d], -128, 127);
        }
        __syncthreads();
    }
}

// The residual stream: r = rq(y) clamped to ±2^24, plus a (both rows × h; y int16 rows of
// `ystride`).
extern "C" __global__ void enc_residual(const i16* __restrict__ y, u32 ystride,
                                        const int* __restrict__ a, const int* __restrict__ m,
                                        const int* __restrict__ s, u32 h, u32 rows,
                                        int* __restrict__ r) {
    u64 total = (u64)rows * h;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x) {
        u32 row = (u32)(i / h), c = (u32)(i % h);
        r[i] = (int)(enc_rq(y[(u64)row * ystride + c], m[c], s[c], -ENC_RES, ENC_RES) + a[i]);
    }
}

// GELU by table: g = table[u + 512] into int16 rows of `gstride` (u: rows × f).
extern "C" __global__ void enc_gelu(const int* __restrict__ u, const i16* __restrict__ table,
                                    u32 f, u32 rows, i16* __restrict__ g, u32 gstride) {
    u64 total = (u64)rows * f;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x) {
        u32 row = (u32)(i / f), j = (u32)(i % f);
        g[(u64)row * gstride + j] = table[u[i] + 512];
    }
}

// Mean pooling, one thread per (text, channel): ⌊Σ_p y[p][c] / T⌋ over the text's rows.
extern "C" __global__ void enc_pool(const i16* __restrict__ y, u32 ystride,
                                    const u32* __restrict__ first, const u32* __restrict__ len,
                                    u32 h, u32 texts, i16* __restrict__ out) {
    u64 total = (u64)texts * h;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x) {
        u32 k = (u32)(i / h), c = (u32)(i % h);
        i64 s = 0;
        for (u32 p = 0; p < len[k]; p++) s += y[(u64)(first[k] + p) * ystride + c];
        out[i] = (i16)enc_floor_div(s, len[k]);
    }
}

// ---- Generate: the decoder's dense layers and logits (PROTOCOL §5, Generate) ----
//
// The GPU computes the accumulators that are nearly all of a decoder's multiply-adds; the host
// does the rest (norms, RoPE, attention, SwiGLU, requantization) as the CPU path does. Every
// sum is of integers, exact in int64 (|acc| ≤ 2^53 by Decoder::check), so any order of
// addition gives the CPU's bits. A warp computes one output for up to DEC_ROWS rows; its lanes
// take (block, half) units — 16 inputs each, the low nibbles (half 0) or the high ones (half 1)
// of a Q4_1 block's 16 bytes — and the warp sums its lanes' int64 partials by shuffles.

#define DEC_ROWS 8

__device__ __forceinline__ i64 dec_warp_sum(i64 v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// acc[r·out + o] = Σ_b d[o][b]·Σ_i q[o][32b+i]·x[r][32b+i] + min[o][b]·Σ_i x[r][32b+i]
// (Dense::acc) for r < rows, o < out: x int16 rows × inp (inp a multiple of 32), q4 the
// layer's nibbles as Dense::q4 lays them (row o's block b: 16 bytes at (o·inp + 32b)/2, byte i
// holding input 32b+i low and 32b+16+i high), d and mn out × inp/32. Per lane, a half block's
// products stay within 16·15·2^15 (int32); its scale and minimum are applied in int64.
extern "C" __global__ void __launch_bounds__(256) dec_dense(
    const i16* __restrict__ x, u32 inp, u32 rows, const u8* __restrict__ q4,
    const int* __restrict__ d, const int* __restrict__ mn, u32 out, i64* __restrict__ acc) {
    u32 lane = threadIdx.x & 31, nb = inp / 32;
    u64 groups = (rows + DEC_ROWS - 1) / DEC_ROWS, warps = (u64)out * groups;
    u64 stride = (u64)gridDim.x * (blockDim.x / 32);
    // the loop's bound is the same for every lane of a warp: all 32 reach every shuffle
    for (u64 w = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < warps; w += stride) {
        u32 o = (u32)(w / groups), r0 = (u32)(w % groups) * DEC_ROWS;
        u32 n = rows - r0 < DEC_ROWS ? rows - r0 : DEC_ROWS;
        i64 s[DEC_ROWS];
        for (int k = 0; k < DEC_ROWS; k++) s[k] = 0;
        for (u32 u = lane; u < 2 * nb; u += 32) {
            u32 b = u >> 1, half = u & 1;
            const u8* qb = q4 + ((u64)o * inp + 32 * b) / 2;
            i64 db = d[(u64)o * nb + b], mb = mn[(u64)o * nb + b];
            int q[16];
            for (int i = 0; i < 16; i++) q[i] = half ? (qb[i] >> 4) : (qb[i] & 15);
            for (u32 k = 0; k < n; k++) {
                const i16* xr = x + (u64)(r0 + k) * inp + 32 * b + 16 * half;
                int qx = 0, sx = 0;
                for (int i = 0; i < 16; i++) {
                    qx += q[i] * (int)xr[i];
                    sx += (int)xr[i];
                }
                s[k] += db * qx + mb * sx;
            }
        }
        for (u32 k = 0; k < DEC_ROWS; k++) {
            i64 t = dec_warp_sum(s[k]);
            if (lane == 0 && k < n) acc[(u64)(r0 + k) * out + o] = t;
        }
    }
}

// acc[r·vocab + t] = Σ_c ed[t][c/32]·eq[t][c]·y[r][c] (Decoder::logits before its
// requantization, which the host applies) for r < rows, t < vocab: y int16 rows × h (h a
// multiple of 32), eq the int8 embedding vocab × h, ed its block scales vocab × h/32. Per lane,
// a half block's products stay within 16·128·2^15 (int32).
extern "C" __global__ void __launch_bounds__(256) dec_logits(
    const i16* __restrict__ y, u32 h, u32 rows, const signed char* __restrict__ eq,
    const int* __restrict__ ed, u32 vocab, i64* __restrict__ acc) {
    u32 lane = threadIdx.x & 31, nb = h / 32;
    u64 groups = (rows + DEC_ROWS - 1) / DEC_ROWS, warps = (u64)vocab * groups;
    u64 stride = (u64)gridDim.x * (blockDim.x / 32);
    for (u64 w = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < warps; w += stride) {
        u32 t = (u32)(w / groups), r0 = (u32)(w % groups) * DEC_ROWS;
        u32 n = rows - r0 < DEC_ROWS ? rows - r0 : DEC_ROWS;
        i64 s[DEC_ROWS];
        for (int k = 0; k < DEC_ROWS; k++) s[k] = 0;
        for (u32 u = lane; u < 2 * nb; u += 32) {
            u32 b = u >> 1, half = u & 1;
            const signed char* qb = eq + (u64)t * h + 32 * b + 16 * half;
            i64 db = ed[(u64)t * nb + b];
            for (u32 k = 0; k < n; k++) {
                const i16* yr = y + (u64)(r0 + k) * h + 32 * b + 16 * half;
                int qy = 0;
                for (int i = 0; i < 16; i++) qy += (int)qb[i] * (int)yr[i];
                s[k] += db * qy;
            }
        }
        for (u32 k = 0; k < DEC_ROWS; k++) {
            i64 v = dec_warp_sum(s[k]);
            if (lane == 0 && k < n) acc[(u64)(r0 + k) * vocab + t] = v;
        }
    }
}
