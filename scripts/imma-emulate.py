#!/usr/bin/env python3
"""Lane-by-lane emulation of the tensor-core MatMulModP kernels in keeper/src/compute/kernels.cu
(byte_planes, matmul_tiles_imma, matmul_tiles_imma_wide), for machines without a GPU.

It transliterates each kernel's index arithmetic (plane layout, per-lane fragment loads, the
seven shift sums, the epilogue) and models mma.sync m8n8k16 / m16n8k32 (.row.col, u8, s32) with
the fragment layouts of the PTX ISA, then compares every tile with A·B mod 2^31−1 computed
directly, worst-case values included. It checks the arithmetic, not the hardware: the GPU
check (scripts/gpu-check.sh) and the CUDA tests compare the real kernels with the CPU.
Keep it in step with kernels.cu. Usage: python3 scripts/imma-emulate.py
"""
import random

P = (1 << 31) - 1
T = 64  # tile side
WEIGHT = [1, 1 << 8, 1 << 16, 1 << 24, 2, 1 << 9, 1 << 17]  # 2^(8s) mod P


def planes(inp, in_cols, valid_rows, valid_cols, transpose, rows, ld):
    """byte_planes: four planes of rows × ld bytes in 8×16 blocks of 128 bytes."""
    count = rows * ld
    out = bytearray(4 * count)
    for r in range(rows):
        for c in range(ld):
            v = 0
            if r < valid_rows and c < valid_cols:
                v = inp[c * in_cols + r] if transpose else inp[r * in_cols + c]
            at = ((r >> 3) * (ld >> 4) + (c >> 4)) * 128 + (r & 7) * 16 + (c & 15)
            for p in range(4):
                out[p * count + at] = (v >> (8 * p)) & 0xFF
    return out


def u32(buf, off):
    """One lane's 32-bit load, checked in bounds and aligned."""
    assert 0 <= off and off + 4 <= len(buf) and off % 4 == 0, "load out of bounds or misaligned"
    return int.from_bytes(buf[off:off + 4], 'little')


def run(m, k, n, A, B, warps, warp_rows, kstep, step, outputs):
    """The launch both kernels share: planes as launch_matmul builds them (k padded to 32),
    one block per tile, `warps` warps of warp_rows × 32 outputs each. `step(acc, ap, bp, arow,
    bcol, ldk, a_plane, b_plane, kb)` runs one K step into acc[s][g][lane][q]; `outputs(lane,
    g)` lists the (row, column) within the warp's block of each q; the epilogue is
    store_shifts."""
    gr, gc = -(-m // T), -(-n // T)
    ldk = -(-k // 32) * 32
    a_rows, b_rows = gr * T, gc * T
    ap = planes(A, k, m, k, 0, a_rows, ldk)
    bp = planes(B, n, n, k, 1, b_rows, ldk)
    a_plane, b_plane = a_rows * ldk, b_rows * ldk
    tiles = []
    for tr in range(gr):
        for tc in range(gc):
            tile = [None] * (T * T)
            for w in range(warps):
                row0, col0 = tr * T + warp_rows * (w >> 1), tc * T + 32 * (w & 1)
                q_count = len(outputs(0, 0))
                acc = [[[[0] * q_count for _ in range(32)] for g in range(4)] for s in range(7)]
                arow = (row0 >> 3) * (ldk >> 4) * 128
                bcol = (col0 >> 3) * (ldk >> 4) * 128
                for k0 in range(0, ldk, kstep):
                    step(acc, ap, bp, arow, bcol, ldk, a_plane, b_plane, (k0 >> 4) * 128)
                for L in range(32):
                    for g in range(4):
                        for q, (dr, dc) in enumerate(outputs(L, g)):
                            r, c = row0 + dr, col0 + dc
                            assert all(acc[s][g][L][q] < (1 << 31) for s in range(7))
                            sm = sum(acc[s][g][L][q] * WEIGHT[s] for s in range(7))
                            idx = (r - tr * T) * T + (c - tc * T)
                            assert tile[idx] is None
                            tile[idx] = (sm % P) if (r < m and c < n) else 0
            assert None not in tile
            tiles.append(tile)
    return tiles


def mma_8816(d, a, b):
    """mma.m8n8k16 .row.col u8: lane L holds A row L/4 and B column L/4, k 4·(L%4)..+3; D row
    L/4, columns 2·(L%4)+v."""
    A8 = [[0] * 16 for _ in range(8)]; B8 = [[0] * 8 for _ in range(16)]
    for L in range(32):
        for i in range(4):
            A8[L >> 2][4 * (L & 3) + i] = (a[L] >> (8 * i)) & 0xFF
            B8[4 * (L & 3) + i][L >> 2] = (b[L] >> (8 * i)) & 0xFF
    for L in range(32):
        for v in range(2):
            r, c = L >> 2, 2 * (L & 3) + v
            d[L][v] = (d[L][v] + sum(A8[r][kk] * B8[kk][c] for kk in range(16))) & 0xFFFFFFFF


def mma_16832(d, a, b0, b1):
    """mma.m16n8k32 .row.col u8: a0/a1 rows g/g+8 of k 0–15, a2/a3 the same of k 16–31, b0/b1 k
    0–15/16–31 of column g (g = L/4, k 4·(L%4)+i); d0,d1 row g and d2,d3 row g+8, columns
    2·(L%4)+v."""
    A16 = [[0] * 32 for _ in range(16)]; B8 = [[0] * 8 for _ in range(32)]
    for L in range(32):
        g, t = L >> 2, L & 3
        for i in range(4):
            A16[g][t * 4 + i] = (a[0][L] >> (8 * i)) & 0xFF
            A16[g + 8][t * 4 + i] = (a[1][L] >> (8 * i)) & 0xFF
            A16[g][16 + t * 4 + i] = (a[2][L] >> (8 * i)) & 0xFF
            A16[g + 8][16 + t * 4 + i] = (a[3][L] >> (8 * i)) & 0xFF
            B8[t * 4 + i][g] = (b0[L] >> (8 * i)) & 0xFF
            B8[16 + t * 4 + i][g] = (b1[L] >> (8 * i)) & 0xFF
    for L in range(32):
        g, t = L >> 2, L & 3
        for q in range(4):
            r, c = g + 8 * (q >> 1), 2 * t + (q & 1)
            d[L][q] = (d[L][q] + sum(A16[r][kk] * B8[kk][c] for kk in range(32))) & 0xFFFFFFFF


def emulate(m, k, n, A, B):
    """matmul_tiles_imma: 16 warps of 8×32, K steps of 16."""
    def step(acc, ap, bp, arow, bcol, ldk, a_plane, b_plane, kb):
        a = [[u32(ap, arow + i * a_plane + 4 * L + kb) for L in range(32)] for i in range(4)]
        b = [[[u32(bp, bcol + j * b_plane + 4 * L + g * 8 * ldk + kb) for L in range(32)] for g in range(4)] for j in range(4)]
        for i in range(4):
            for j in range(4):
                for g in range(4):
                    mma_8816(acc[i + j][g], a[i], b[j][g])
    outputs = lambda L, g: [(L >> 2, 8 * g + 2 * (L & 3) + v) for v in range(2)]
    return run(m, k, n, A, B, 16, 8, 16, step, outputs)


def emulate_wide(m, k, n, A, B):
    """matmul_tiles_imma_wide: 8 warps of 16×32, K steps of 32."""
    def step(acc, ap, bp, arow, bcol, ldk, a_plane, b_plane, kb):
        a = [[[u32(ap, arow + 4 * L + i * a_plane + kb + off) for L in range(32)] for off in (0, 8 * ldk, 128, 8 * ldk + 128)] for i in range(4)]
        b = [[[[u32(bp, bcol + 4 * L + j * b_plane + g * 8 * ldk + kb + off) for L in range(32)] for off in (0, 128)] for g in range(4)] for j in range(4)]
        for i in range(4):
            for j in range(4):
                for g in range(4):
                    mma_16832(acc[i + j][g], a[i], b[j][g][0], b[j][g][1])
    outputs = lambda L, g: [((L >> 2) + 8 * (q >> 1), 8 * g + 2 * (L & 3) + (q & 1)) for q in range(4)]
    return run(m, k, n, A, B, 8, 16, 32, step, outputs)


def reference(m, k, n, A, B):
    gr, gc = -(-m // T), -(-n // T)
    out = []
    for tr in range(gr):
        for tc in range(gc):
            tile = []
            for r in range(T):
                for c in range(T):
                    R, C = tr * T + r, tc * T + c
                    tile.append(sum(A[R * k + kk] * B[kk * n + C] for kk in range(k)) % P if R < m and C < n else 0)
            out.append(tile)
    return out

random.seed(1)
for (m, k, n) in [(1, 1, 1), (9, 17, 70), (70, 33, 65), (64, 64, 64), (130, 40, 129)]:
    A = [random.choice([P - 1, random.randrange(P)]) for _ in range(m * k)]
    B = [random.choice([P - 1, random.randrange(P)]) for _ in range(k * n)]
    want = reference(m, k, n, A, B)
    assert emulate(m, k, n, A, B) == want, (m, k, n)
    assert emulate_wide(m, k, n, A, B) == want, ("wide", m, k, n)
    print("equal", m, k, n)
