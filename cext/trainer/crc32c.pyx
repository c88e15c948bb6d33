# cython: language_level=3
"""CRC32C (Castagnoli) and TFRecord's masked form, in C, for TensorBoard's event files.

TensorBoard's record writer (tensorboard.summary.writer.record_writer) checksums every record
with a Python loop over its bytes: some 70 us for one update's ~600-byte event, holding the
interpreter's lock on the writer's thread, which the training loop then waits for. This is the
same function (tests/test_tensorboard.py compares the two on random inputs) at about 1 us,
with the lock released; operant.trainer.services.tensorboard hands it to that writer.

Table-driven, one byte per step (reflected polynomial 0x82F63B78), as RFC 3720 B.4 gives it.
"""

from libc.stdint cimport uint32_t

cdef extern from *:
    """
    #include <stdint.h>
    #include <stddef.h>
    static uint32_t crc32c_table[256];

    static void crc32c_init(void) {
        uint32_t i, bit, crc;
        for (i = 0; i < 256; i++) {
            crc = i;
            for (bit = 0; bit < 8; bit++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
            crc32c_table[i] = crc;
        }
    }

    static uint32_t crc32c_bytes(const unsigned char *data, size_t length) {
        uint32_t crc = 0xFFFFFFFFu;
        size_t i;
        for (i = 0; i < length; i++) crc = crc32c_table[(crc ^ data[i]) & 0xFFu] ^ (crc >> 8);
        return crc ^ 0xFFFFFFFFu;
    }
    """
    void crc32c_init() noexcept nogil
    uint32_t crc32c_bytes(const unsigned char *data, size_t length) noexcept nogil

crc32c_init()

MASK_DELTA = 0xA282EAD8


def crc32c(const unsigned char[::1] data not None) -> int:
    """The CRC32C of a bytes-like object."""
    cdef uint32_t crc
    cdef size_t length = data.shape[0]
    if length == 0:
        return 0
    with nogil:
        crc = crc32c_bytes(&data[0], length)
    return crc


def masked_crc32c(const unsigned char[::1] data not None) -> int:
    """TFRecord's masked CRC32C: the CRC rotated right by 15 bits plus MASK_DELTA, mod 2**32
    (tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c)."""
    cdef uint32_t crc = crc32c(data)
    return <uint32_t>(((crc >> 15) | (crc << 17)) + <uint32_t>MASK_DELTA)
