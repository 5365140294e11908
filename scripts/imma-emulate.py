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
def emulate(m, k, n, A, B):
    T = 64
    gr, gc = -(-m // T), -(-n // T)
    ldk = -(-k // 32) * 32
    def planes(inp, in_cols, valid_rows, valid_cols, transpose, rows, ld):
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
    a_rows, b_rows = gr * T, gc * T
    ap = planes(A, k, m, k, 0, a_rows, ldk)
    bp = planes(B, n, n, k, 1, b_rows, ldk)
    a_plane, b_plane = a_rows * ldk, b_rows * ldk
    def u32(buf, off):
        assert 0 <= off and off + 4 <= len(buf) and off % 4 == 0, "load out of bounds or misaligned"
        return int.from_bytes(buf[off:off + 4], 'little')
    def mma(d, a, b):  # d: [32][2], a/b: [32] words
        A8 = [[0] * 16 for _ in range(8)]; B8 = [[0] * 8 for _ in range(16)]
        for L in range(32):
            for i in range(4):
                A8[L >> 2][4 * (L & 3) + i] = (a[L] >> (8 * i)) & 0xFF
                B8[4 * (L & 3) + i][L >> 2] = (b[L] >> (8 * i)) & 0xFF
        for L in range(32):
            for v in range(2):
                r, c = L >> 2, 2 * (L & 3) + v
                d[L][v] = (d[L][v] + sum(A8[r][kk] * B8[kk][c] for kk in range(16))) & 0xFFFFFFFF
    tiles = []
    for by in range(gr):
        for bx in range(gc):
            tile = [None] * (T * T)
            tr, tc = by, bx
            for w in range(16):
                row0, col0 = tr * T + 8 * (w >> 1), tc * T + 32 * (w & 1)
                acc = [[[[0, 0] for _ in range(32)] for g in range(4)] for s in range(7)]
                for k0 in range(0, ldk, 16):
                    kb = (k0 >> 4) * 128
                    a = [[u32(ap, i * a_plane + (row0 >> 3) * (ldk >> 4) * 128 + 4 * L + kb) for L in range(32)] for i in range(4)]
                    b = [[[u32(bp, j * b_plane + (col0 >> 3) * (ldk >> 4) * 128 + 4 * L + g * 8 * ldk + kb) for L in range(32)] for g in range(4)] for j in range(4)]
                    for i in range(4):
                        for j in range(4):
                            for g in range(4):
                                mma(acc[i + j][g], a[i], b[j][g])
                weight = [1, 1 << 8, 1 << 16, 1 << 24, 2, 1 << 9, 1 << 17]
                for L in range(32):
                    r = row0 + (L >> 2)
                    for g in range(4):
                        for v in range(2):
                            c = col0 + 8 * g + 2 * (L & 3) + v
                            assert all(acc[s][g][L][v] < (1 << 31) for s in range(7))
                            sm = sum(acc[s][g][L][v] * weight[s] for s in range(7))
                            assert sm < (1 << 64)
                            idx = (r - tr * T) * T + (c - tc * T)
                            assert tile[idx] is None
                            tile[idx] = (sm % P) if (r < m and c < n) else 0
            assert None not in tile
            tiles.append(tile)
    return tiles, gr, gc


def emulate_wide(m, k, n, A, B):
    T = 64
    gr, gc = -(-m // T), -(-n // T)
    ldk = -(-k // 32) * 32
    def planes(inp, in_cols, valid_rows, valid_cols, transpose, rows, ld):
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
    a_rows, b_rows = gr * T, gc * T
    ap = planes(A, k, m, k, 0, a_rows, ldk)
    bp = planes(B, n, n, k, 1, b_rows, ldk)
    a_plane, b_plane = a_rows * ldk, b_rows * ldk
    def u32(buf, off):
        assert 0 <= off and off + 4 <= len(buf) and off % 4 == 0, "load out of bounds or misaligned"
        return int.from_bytes(buf[off:off + 4], 'little')
    # m16n8k32 as documented: a0 rows g k 0-15 (tig*4+i), a1 rows g+8, a2 rows g k 16+, a3 rows g+8 k 16+;
    # b0 col g k tig*4+i, b1 k 16+tig*4+i; d0,d1 row g cols tig*2+v; d2,d3 row g+8
    def mma(d, a, b0, b1):
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
    tiles = []
    for by in range(gr):
        for bx in range(gc):
            tile = [None] * (T * T)
            tr, tc = by, bx
            for w in range(8):
                row0, col0 = tr * T + 16 * (w >> 1), tc * T + 32 * (w & 1)
                acc = [[[[0] * 4 for _ in range(32)] for g in range(4)] for s in range(7)]
                arow = (row0 >> 3) * (ldk >> 4) * 128
                bcol = (col0 >> 3) * (ldk >> 4) * 128
                for k0 in range(0, ldk, 32):
                    kb = (k0 >> 4) * 128
                    a = [[[u32(ap, arow + 4 * L + i * a_plane + kb + off) for L in range(32)] for off in (0, 8 * ldk, 128, 8 * ldk + 128)] for i in range(4)]
                    b = [[[[u32(bp, bcol + 4 * L + j * b_plane + g * 8 * ldk + kb + off) for L in range(32)] for off in (0, 128)] for g in range(4)] for j in range(4)]
                    for i in range(4):
                        for j in range(4):
                            for g in range(4):
                                mma(acc[i + j][g], a[i], b[j][g][0], b[j][g][1])
                weight = [1, 1 << 8, 1 << 16, 1 << 24, 2, 1 << 9, 1 << 17]
                for L in range(32):
                    for g in range(4):
                        for q in range(4):
                            r = row0 + (L >> 2) + 8 * (q >> 1)
                            c = col0 + 8 * g + 2 * (L & 3) + (q & 1)
                            sm = sum(acc[s][g][L][q] * weight[s] for s in range(7))
                            idx = (r - tr * T) * T + (c - tc * T)
                            assert tile[idx] is None
                            tile[idx] = (sm % P) if (r < m and c < n) else 0
            assert None not in tile
            tiles.append(tile)
    return tiles

def reference(m, k, n, A, B):
    T = 64
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
    got, gr, gc = emulate(m, k, n, A, B)
    assert got == want, (m, k, n)
    assert emulate_wide(m, k, n, A, B) == want, ("wide", m, k, n)
    print("equal", m, k, n)
