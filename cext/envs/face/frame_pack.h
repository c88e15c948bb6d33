/* Binary frames one bit a cell: the frame-stack ring's packed slots (cext/envs/face/frame_stack.pyx).
 *
 * A frame whose every byte is 0 or 1 (MinAtar's C x 10 x 10 channels, declared by the space
 * Box(0, 1, uint8)) is kept in the ring as bits: cell j of a frame is bit j % 8 of byte j / 8
 * (least significant first), a row `fs_packed_bytes(F)` bytes (F / 8 rounded up to whole 8-byte
 * words). Packing reads F bytes and writes F / 8 (a nonzero byte packs as 1); unpacking writes
 * the F bytes of 0 and 1 back, the same bytes the frame had.
 *
 * Why (docs/journal/issue-18-rollout-without-copies.md, "Frame stacking"): MinAtar's kernels write
 * their own observation rows by difference, a few cells a step, and the ring's slot then needs a
 * copy of each frame; at 1,024 rows that copy moved 400 KB - 1 MB a step through a ring four times
 * that size, and cost as much as the step. As bits the slot write is an eighth of that and the ring
 * fits in L2 beside the env's own buffer.
 *
 * Three versions, chosen once by the CPU (fs_pack_init): AVX-512BW (64 cells an instruction,
 * masked at a row's end), AVX2 (32 cells, the rest byte by byte), and portable C. No
 * allocation; rows are independent. */
#ifndef OPERANT_FRAME_PACK_H
#define OPERANT_FRAME_PACK_H

#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define FS_X86 1
#endif

static inline int64_t fs_packed_bytes(int64_t frame_bytes) {
    return (frame_bytes + 63) / 64 * 8;
}

/* Portable C, 8 cells a step in a 64-bit word (the last ones zero-extended): each byte made
 * 0 or 1 (1 where any bit is set), then one multiply gathers the eight low bits into the top
 * byte, cell k into bit 56 + k. */
static inline uint64_t fs_bytes_nonzero(uint64_t x) {
    const uint64_t low7 = 0x7F7F7F7F7F7F7F7FULL;
    return ((((x & low7) + low7) | x) >> 7) & 0x0101010101010101ULL;
}

static inline void fs_pack_c(const uint8_t *src, uint8_t *dst, int64_t frame_bytes) {
    int64_t j = 0, packed = fs_packed_bytes(frame_bytes);
    uint64_t x;
    for (; j + 8 <= frame_bytes; j += 8) {
        memcpy(&x, src + j, 8);
        dst[j / 8] = (uint8_t)((fs_bytes_nonzero(x) * 0x0102040810204080ULL) >> 56);
    }
    for (; j < packed * 8; j += 8) {
        x = 0;
        if (j < frame_bytes) memcpy(&x, src + j, (size_t)(frame_bytes - j));
        dst[j / 8] = (uint8_t)((fs_bytes_nonzero(x) * 0x0102040810204080ULL) >> 56);
    }
}

/* The inverse: the byte times 0x01.. repeated in every byte, bit k kept in byte k, each byte
 * then made 0 or 1. */
static void fs_unpack_c(const uint8_t *src, uint8_t *dst, int64_t frame_bytes) {
    int64_t j = 0;
    uint64_t x;
    for (; j < frame_bytes; j += 8) {
        x = fs_bytes_nonzero((src[j / 8] * 0x0101010101010101ULL) & 0x8040201008040201ULL);
        if (j + 8 <= frame_bytes) {
            memcpy(dst + j, &x, 8);
        } else {
            memcpy(dst + j, &x, (size_t)(frame_bytes - j));
        }
    }
}

#ifdef FS_X86
/* A row's last (frame_bytes % 32) cells take the vector path too (the byte-by-byte loop they
 * took first cost more than the rest of the row). */
__attribute__((target("avx2"))) static inline void fs_pack_avx2(const uint8_t *src, uint8_t *dst,
                                                         int64_t frame_bytes) {
    const __m256i zero = _mm256_setzero_si256();
    int64_t j = 0, packed = fs_packed_bytes(frame_bytes);
    uint32_t bits;
    for (; j + 32 <= frame_bytes; j += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(src + j));
        bits = ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, zero));
        memcpy(dst + j / 8, &bits, 4);
    }
    if (j < frame_bytes) {
        /* the last 32 bytes of the frame (overlapping the groups done), shifted down to the
         * cells left; a frame shorter than 32 bytes through a zeroed copy */
        int64_t left = frame_bytes - j;
        if (frame_bytes >= 32) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(src + frame_bytes - 32));
            bits = ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, zero)) >> (32 - left);
        } else {
            uint8_t rest[32] = {0};
            memcpy(rest, src, (size_t)frame_bytes);
            __m256i v = _mm256_loadu_si256((const __m256i *)rest);
            bits = ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, zero));
        }
        memcpy(dst + j / 8, &bits, 4);
        j += 32;
    }
    if (j / 8 < packed) memset(dst + j / 8, 0, (size_t)(packed - j / 8));
}

__attribute__((target("avx2"))) static void fs_unpack_avx2(const uint8_t *src, uint8_t *dst,
                                                           int64_t frame_bytes) {
    /* byte k of a 32-cell group reads packed byte k / 8 (each 128-bit lane holds the group's
     * four bytes, repeated) and keeps bit k % 8 */
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2,
                                            2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i select = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i one = _mm256_set1_epi8(1);
    int64_t j = 0;
    for (; j + 32 <= frame_bytes; j += 32) {
        uint32_t bits;
        memcpy(&bits, src + j / 8, 4);
        __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
        v = _mm256_cmpeq_epi8(_mm256_and_si256(v, select), select);
        _mm256_storeu_si256((__m256i *)(dst + j), _mm256_and_si256(v, one));
    }
    if (j < frame_bytes) {  /* the last group through a 32-byte copy, as packing's */
        uint8_t rest[32];
        uint32_t bits;
        memcpy(&bits, src + j / 8, 4);
        __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
        v = _mm256_cmpeq_epi8(_mm256_and_si256(v, select), select);
        _mm256_storeu_si256((__m256i *)rest, _mm256_and_si256(v, one));
        memcpy(dst + j, rest, (size_t)(frame_bytes - j));
    }
}

__attribute__((target("avx512f,avx512bw"))) static inline void fs_pack_avx512(const uint8_t *src,
                                                                       uint8_t *dst,
                                                                       int64_t frame_bytes) {
    int64_t j = 0;
    uint64_t bits;
    for (; j + 64 <= frame_bytes; j += 64) {
        __m512i v = _mm512_loadu_si512((const void *)(src + j));
        bits = (uint64_t)_mm512_test_epi8_mask(v, v);
        memcpy(dst + j / 8, &bits, 8);
    }
    if (j < frame_bytes) {  /* the last cells through a masked load: the padding reads 0 */
        __mmask64 take = ((__mmask64)1 << (frame_bytes - j)) - 1;
        __m512i v = _mm512_maskz_loadu_epi8(take, src + j);
        bits = (uint64_t)_mm512_test_epi8_mask(v, v);
        memcpy(dst + j / 8, &bits, 8);
    }
}

__attribute__((target("avx512f,avx512bw"))) static void fs_unpack_avx512(const uint8_t *src,
                                                                         uint8_t *dst,
                                                                         int64_t frame_bytes) {
    const __m512i one = _mm512_set1_epi8(1);
    int64_t j = 0;
    uint64_t bits;
    for (; j + 64 <= frame_bytes; j += 64) {
        memcpy(&bits, src + j / 8, 8);
        _mm512_storeu_si512((void *)(dst + j), _mm512_maskz_mov_epi8((__mmask64)bits, one));
    }
    if (j < frame_bytes) {
        __mmask64 take = ((__mmask64)1 << (frame_bytes - j)) - 1;
        memcpy(&bits, src + j / 8, 8);
        _mm512_mask_storeu_epi8(dst + j, take, _mm512_maskz_mov_epi8((__mmask64)bits, one));
    }
}
#endif

typedef void (*fs_frame_fn)(const uint8_t *src, uint8_t *dst, int64_t frame_bytes);
static fs_frame_fn fs_pack_one = fs_pack_c;
static fs_frame_fn fs_unpack_one = fs_unpack_c;

/* Choose the versions for this CPU; `level` 0 forces portable C, 1 at most AVX2, 2 any (the
 * tests compare all three). Returns the level chosen. */
static int fs_pack_init(int level) {
    int chosen = 0;
#ifdef FS_X86
    __builtin_cpu_init();
    if (level >= 2 && __builtin_cpu_supports("avx512bw")) {
        chosen = 2;
    } else if (level >= 1 && __builtin_cpu_supports("avx2")) {
        chosen = 1;
    }
    fs_pack_one = chosen == 2 ? fs_pack_avx512 : chosen == 1 ? fs_pack_avx2 : fs_pack_c;
    fs_unpack_one = chosen == 2 ? fs_unpack_avx512 : chosen == 1 ? fs_unpack_avx2 : fs_unpack_c;
#else
    (void)level;
#endif
    return chosen;
}

/* `rows` frames of `frame_bytes` bytes, `src_stride` bytes apart, packed into rows
 * `fs_packed_bytes(frame_bytes)` bytes apart. The row loop is compiled once per version, so
 * that the packing is inlined into it (a call through the pointer per row cost a third more:
 * 9.5 against 6.1 us for 1,024 rows of 400 cells, a C driver, 2026-11-26), and again for
 * MinAtar's frame sizes (C x 100 cells, C = 4, 6, 7, 10) with the size a constant: the loop
 * over a row's vectors is then unrolled, its tail mask computed once (AVX-512, 32 rows in L1 as
 * the MinAtar kernel packs them: 400 cells 6.0 -> 3.2 ns a row, 700 11.7 -> 5.0, 1,000
 * 19.1 -> 9.4; /tmp driver, 2026-11-26). Other sizes take the general loop. */
#define FS_PACK_SIZE(pack, size)                                                            \
    case size:                                                                               \
        for (row = 0; row < rows; row++)                                                     \
            pack(src + row * src_stride, dst + row * packed, size);                          \
        break;
#define FS_PACK_ROWS(name, pack)                                                            \
    static void name(const uint8_t *src, int64_t src_stride, uint8_t *dst, int64_t rows,     \
                     int64_t frame_bytes) {                                                  \
        int64_t row, packed = fs_packed_bytes(frame_bytes);                                  \
        switch (frame_bytes) {                                                               \
        FS_PACK_SIZE(pack, 400) FS_PACK_SIZE(pack, 600) FS_PACK_SIZE(pack, 700)              \
        FS_PACK_SIZE(pack, 1000)                                                             \
        default:                                                                             \
            for (row = 0; row < rows; row++)                                                 \
                pack(src + row * src_stride, dst + row * packed, frame_bytes);               \
        }                                                                                    \
    }
FS_PACK_ROWS(fs_pack_rows_c, fs_pack_c)
#ifdef FS_X86
__attribute__((target("avx2"))) FS_PACK_ROWS(fs_pack_rows_avx2, fs_pack_avx2)
__attribute__((target("avx512f,avx512bw"))) FS_PACK_ROWS(fs_pack_rows_avx512, fs_pack_avx512)
#endif

static void fs_pack_rows(const uint8_t *src, int64_t src_stride, uint8_t *dst, int64_t rows,
                         int64_t frame_bytes) {
#ifdef FS_X86
    if (fs_pack_one == fs_pack_avx512) {
        fs_pack_rows_avx512(src, src_stride, dst, rows, frame_bytes);
        return;
    }
    if (fs_pack_one == fs_pack_avx2) {
        fs_pack_rows_avx2(src, src_stride, dst, rows, frame_bytes);
        return;
    }
#endif
    fs_pack_rows_c(src, src_stride, dst, rows, frame_bytes);
}

#endif
