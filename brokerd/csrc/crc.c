/* The CRC-32 of a record's body (zlib.crc32, the reference: the Python store and the differential tests use it).
 *
 * On x86-64 CPUs with PCLMULQDQ and SSE4.1 (checked at run time) the 16-byte multiple of a body of 64 bytes or more
 * is folded with carry-less multiplications (~30 ns per KiB against ~270 ns for zlib's tables here); the rest goes
 * through zlib's crc32_z when the build links zlib, else through zlib.crc32. */
#include "send.h"

#ifdef BROKERD_ZLIB
#include <zlib.h>
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_FOLD 1
#include <immintrin.h>

/* CRC-32 (zlib's) of len bytes (len >= 64, a multiple of 16) by carry-less multiplication folding ("Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ Instruction", Gopal et al., 2009: its bit-reflected constants
 * for the CRC-32 polynomial); crc: the running crc, not inverted (~ of zlib's value). */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc_fold(const unsigned char *buf, size_t len, uint32_t crc) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8;
    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = k1k2;
    buf += 64; len -= 64;
    while (len >= 64) {  /* four 128-bit lanes folded 64 bytes forward at a time */
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(buf + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(buf + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(buf + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(buf + 0x30)));
        buf += 64; len -= 64;
    }
    x0 = k3k4;  /* the four lanes folded into one */
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {  /* then 16 bytes at a time */
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16; len -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);  /* 128 bits to 64 */
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x00), x2);
    x0 = poly;  /* Barrett reduction to 32 bits */
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

static int fold_ok(void) {
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    }
    return ok;
}
#endif

/* zlib.crc32(p[:n], value) */
static int crc_more(uint32_t value, const char *p, Py_ssize_t n, uint32_t *out) {
#ifdef BROKERD_ZLIB
    *out = (uint32_t)crc32_z(value, (const Bytef *)p, (z_size_t)n);  /* the function zlib.crc32 calls */
    return 0;
#else
    PyObject *mv = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    if (mv == NULL) return -1;
    PyObject *r = PyObject_CallFunction(g_crc32, "OI", mv, (unsigned int)value);
    Py_DECREF(mv);
    if (r == NULL) return -1;
    *out = (uint32_t)PyLong_AsUnsignedLong(r);
    Py_DECREF(r);
    return PyErr_Occurred() ? -1 : 0;
#endif
}

int crc_of(const char *p, Py_ssize_t n, uint32_t *out) {
    uint32_t crc = 0;
#ifdef HAVE_FOLD
    if (n >= 64 && fold_ok()) {
        Py_ssize_t head = n & ~(Py_ssize_t)15;
        crc = ~crc_fold((const unsigned char *)p, (size_t)head, ~crc);
        p += head;
        n -= head;
        if (n == 0) { *out = crc; return 0; }
    }
#endif
    return crc_more(crc, p, n, out);
}
