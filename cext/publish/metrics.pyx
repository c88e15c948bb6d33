# cython: language_level=3
"""The metrics-file writer: lock-free publication from the trainer into `metrics.bin`.

Layering: trainer -> MetricsWriter (this module) -> atomics.h (atomic stores, fences, seqlock)
-> a shared mapping of the file; the format itself (offsets, state values, schema) comes from
operant.shared.metrics_layout, which readers import too.

One writer process, one writer object per file. After `create()` returns, every method only
stores into mapped memory: no syscall, no lock, no allocation on the hot path (set_counter,
add_counter, set_gauge, publish_snapshot, append_history, publish_frame, heartbeat). Text and state changes
encode a str, so they allocate, but they are not per-step work.

Order of a run (the trainer's side):
    writer = MetricsWriter.create(run_dir / METRICS_FILE, schema)   # file appears, initializing
    operant.shared.runs.update_latest(root, run_id)                  # then `latest` points at it
    writer.start_heartbeat()                                         # native thread, no GIL
    writer.set_state(STATE_RUNNING)
    ... per update: set_counter/add_counter/set_gauge, publish_snapshot, append_history,
        publish_frame (a schema with a frame: a pixel env's latest observation) ...
    writer.set_state(STATE_FINISHED) | set_state(STATE_FAILED, reason) ; writer.close()

A writer must not be used from a forked child: the mapping is shared, so two processes would
write one file.
"""

cimport cython
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy
from posix.mman cimport MAP_FAILED, MAP_SHARED, PROT_READ, PROT_WRITE, mmap, munmap
from posix.time cimport CLOCK_MONOTONIC, CLOCK_REALTIME, clock_gettime, nanosleep, timespec

from atomics cimport (
    op_fence_release,
    op_fetch_add_u64,
    op_load_acquire_u64,
    op_load_relaxed_u64,
    op_seqlock_write_begin,
    op_seqlock_write_end,
    op_store_f64s_relaxed,
    op_store_relaxed_f64,
    op_store_relaxed_u64,
    op_store_release_u64,
)

import errno
import math
import os
import struct

from operant.shared import atomic
from operant.shared import metrics_layout as layout_mod

cdef extern from "<pthread.h>" nogil:
    # Opaque to Cython: only passed by pointer and value to these two functions.
    ctypedef unsigned long pthread_t
    int pthread_create(pthread_t *thread, const void *attr, void *(*start)(void *) noexcept nogil,
                       void *arg)
    int pthread_join(pthread_t thread, void **result)


cdef struct HeartbeatTicker:
    # Everything the heartbeat needs, apart from the writer object, so a native thread can
    # tick it without the GIL.
    uint64_t *wall_ns
    uint64_t *mono_ns
    uint64_t *count
    int64_t interval_ns
    uint64_t stop


cdef enum:
    KIND_NONE = 0
    KIND_COUNTER = 1
    KIND_GAUGE = 2

# Read once from the layout module, which owns the number.
cdef Py_ssize_t TEXT_HEADER_SIZE = layout_mod.TEXT_HEADER_SIZE
cdef Py_ssize_t FRAME_HEADER_WORDS = layout_mod.FRAME_HEADER_SIZE // 8

# The heartbeat thread sleeps in slices at most this long, so stop_heartbeat() returns quickly.
cdef int64_t HEARTBEAT_SLICE_NS = 50_000_000


cdef inline uint64_t _now_ns(int clock) noexcept nogil:
    cdef timespec ts
    clock_gettime(clock, &ts)
    return <uint64_t>ts.tv_sec * 1_000_000_000 + <uint64_t>ts.tv_nsec


cdef void heartbeat_tick(HeartbeatTicker *ticker) noexcept nogil:
    # Two independent words: a reader may pair a new wall time with an old monotonic one,
    # which only ever makes the heartbeat look one tick older.
    op_store_relaxed_u64(ticker.wall_ns, _now_ns(CLOCK_REALTIME))
    op_store_relaxed_u64(ticker.mono_ns, _now_ns(CLOCK_MONOTONIC))
    op_fetch_add_u64(ticker.count, 1)


cdef void *_heartbeat_main(void *arg) noexcept nogil:
    cdef HeartbeatTicker *ticker = <HeartbeatTicker *>arg
    cdef timespec pause
    cdef int64_t waited, slice_ns
    while not op_load_acquire_u64(&ticker.stop):
        heartbeat_tick(ticker)
        waited = 0
        while waited < ticker.interval_ns and not op_load_acquire_u64(&ticker.stop):
            slice_ns = min(ticker.interval_ns - waited, HEARTBEAT_SLICE_NS)
            pause.tv_sec = slice_ns // 1_000_000_000
            pause.tv_nsec = slice_ns % 1_000_000_000
            nanosleep(&pause, NULL)
            waited += slice_ns
    return NULL


cdef void _store_text(unsigned char *slot, bytes padded, Py_ssize_t length):
    # Slot layout: u64 seq | u32 length, u32 reserved | data. The data is copied word by word
    # through a local so the source's alignment does not matter.
    cdef uint64_t *seq = <uint64_t *>slot
    cdef uint64_t *words = <uint64_t *>(slot + TEXT_HEADER_SIZE)
    cdef const unsigned char *src = padded
    cdef uint64_t word
    cdef Py_ssize_t i
    op_seqlock_write_begin(seq)
    op_store_relaxed_u64(seq + 1, <uint64_t>length)
    for i in range(len(padded) // 8):
        memcpy(&word, src + 8 * i, 8)
        op_store_relaxed_u64(words + i, word)
    op_seqlock_write_end(seq)


def _encode_text(text, Py_ssize_t capacity):
    """UTF-8, cut at a character boundary to fit, zero-padded to whole words."""
    data = str(text).encode("utf-8")
    if len(data) > capacity:
        data = data[:capacity].decode("utf-8", "ignore").encode("utf-8")
    length = len(data)
    return data + bytes(-length % 8), length


@cython.final
cdef class MetricsWriter:
    """The one writer of a metrics file. Build it with `MetricsWriter.create(...)`."""

    cdef unsigned char *base
    cdef size_t size
    cdef uint64_t *state_word
    cdef uint64_t *head_word
    cdef unsigned char *values
    cdef Py_ssize_t value_count
    cdef Py_ssize_t value_stride
    cdef unsigned char *value_kinds
    cdef uint64_t *snapshot_seq
    cdef uint64_t *snapshot_data
    cdef Py_ssize_t snapshot_words
    cdef unsigned char *texts
    cdef Py_ssize_t text_count
    cdef Py_ssize_t text_stride
    cdef unsigned char *reason
    cdef Py_ssize_t reason_size
    cdef unsigned char *history
    cdef Py_ssize_t history_capacity
    cdef Py_ssize_t history_fields
    cdef Py_ssize_t history_stride
    cdef uint64_t next_history_index
    cdef uint64_t *frame_seq
    cdef Py_ssize_t frame_bytes
    cdef HeartbeatTicker *ticker
    cdef pthread_t heartbeat_thread
    cdef bint heartbeat_running
    cdef readonly object path
    cdef readonly object schema
    cdef readonly object layout

    def __cinit__(self):
        self.base = NULL
        self.frame_seq = NULL
        self.ticker = NULL
        self.value_kinds = NULL
        self.heartbeat_running = False

    @classmethod
    def create(cls, path, schema, history_capacity=8192, heartbeat_interval_s=1.0,
               prepare=None):
        """Create the metrics file at `path` for `schema` and return its writer.

        The file is built under a temporary name in the same directory, sized once (and its
        blocks allocated, so a full disk fails here rather than as SIGBUS later), initialised
        (state initializing, counters 0, gauges and snapshot NaN, one heartbeat), given its
        first values by `prepare(writer)` where one is passed (a resumed run's replayed
        history and its counters: a reader never sees them climb from 0), flushed, and only
        then renamed onto `path`: a reader sees no file or a whole one. The caller then
        updates the runs root's `latest` pointer (operant.shared.runs.update_latest).
        """
        import psutil

        path = os.fspath(path)
        layout_mod.check_schema(schema)
        if heartbeat_interval_s <= 0:
            raise ValueError("heartbeat_interval_s must be positive")
        blob = layout_mod.encode_schema(schema)
        layout = layout_mod.compute_layout(schema, len(blob), int(history_capacity))
        header = layout_mod.pack_header(
            layout,
            schema_crc32=layout_mod.schema_crc32(blob),
            pid=os.getpid(),
            pid_start_time=psutil.Process().create_time(),
            heartbeat_interval_ns=int(heartbeat_interval_s * 1e9),
            created_wall_ns=_now_ns(CLOCK_REALTIME),
        )
        nan = struct.pack("<d", math.nan)
        writer = None
        try:
            # The mapping keeps the file: the handle closes when the block ends.
            with atomic.replacing(path) as handle:
                fd = handle.fileno()
                os.ftruncate(fd, layout.file_size)
                try:
                    os.posix_fallocate(fd, 0, layout.file_size)
                except OSError as error:
                    # A filesystem without fallocate keeps the ftruncate size; any other
                    # error (ENOSPC above all) would strike later as SIGBUS, so it stops us.
                    if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                os.pwrite(fd, header, 0)
                os.pwrite(fd, blob, layout.schema_offset)
                for metric in schema.metrics:
                    if metric.kind == layout_mod.KIND_GAUGE:
                        os.pwrite(fd, nan, layout.value_word(metric.slot))
                os.pwrite(fd, nan * layout.snapshot_words,
                          layout.snapshot_offset + layout_mod.SNAPSHOT_HEADER_SIZE)
                writer = MetricsWriter.__new__(MetricsWriter)
                writer._attach(fd, path, schema, layout, heartbeat_interval_s)
                writer.heartbeat()
                if prepare is not None:
                    prepare(writer)
        except BaseException:
            if writer is not None:
                writer.close()
            raise
        return writer

    def _attach(self, int fd, path, schema, layout, double heartbeat_interval_s):
        cdef void *base = mmap(NULL, layout.file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
        if base == MAP_FAILED:
            raise OSError(f"cannot map {path}")
        self.base = <unsigned char *>base
        self.size = layout.file_size
        self.path = path
        self.schema = schema
        self.layout = layout
        self.state_word = <uint64_t *>(self.base + <Py_ssize_t>layout_mod.STATE_OFFSET)
        self.head_word = <uint64_t *>(self.base + <Py_ssize_t>layout_mod.HISTORY_HEAD_OFFSET)
        self.values = self.base + <Py_ssize_t>layout.values_offset
        self.value_count = layout.value_count
        self.value_stride = layout.value_stride
        self.snapshot_seq = <uint64_t *>(self.base + <Py_ssize_t>layout.snapshot_offset)
        self.snapshot_data = self.snapshot_seq + 1
        self.snapshot_words = layout.snapshot_words
        self.texts = self.base + <Py_ssize_t>layout.text_offset
        self.text_count = layout.text_count
        self.text_stride = layout.text_stride
        self.reason = self.base + <Py_ssize_t>layout.reason_offset
        self.reason_size = layout.reason_size
        self.history = self.base + <Py_ssize_t>layout.history_offset
        self.history_capacity = layout.history_capacity
        self.history_fields = layout.history_fields
        self.history_stride = layout.history_stride
        self.next_history_index = 0
        if layout.frame_size:
            # Region: u64 seq, u64 updates, u64 global_step, u64 reserved, the frame's words.
            self.frame_seq = <uint64_t *>(self.base + <Py_ssize_t>layout.frame_offset)
            self.frame_bytes = schema.frame.nbytes
        self.value_kinds = <unsigned char *>calloc(max(self.value_count, 1), 1)
        self.ticker = <HeartbeatTicker *>calloc(1, sizeof(HeartbeatTicker))
        if self.value_kinds == NULL or self.ticker == NULL:
            raise MemoryError()
        for metric in schema.metrics:
            if metric.kind == layout_mod.KIND_COUNTER:
                self.value_kinds[metric.slot] = KIND_COUNTER
            elif metric.kind == layout_mod.KIND_GAUGE:
                self.value_kinds[metric.slot] = KIND_GAUGE
        self.ticker.wall_ns = <uint64_t *>(self.base + <Py_ssize_t>layout_mod.HEARTBEAT_WALL_OFFSET)
        self.ticker.mono_ns = <uint64_t *>(self.base + <Py_ssize_t>layout_mod.HEARTBEAT_MONO_OFFSET)
        self.ticker.count = <uint64_t *>(self.base + <Py_ssize_t>layout_mod.HEARTBEAT_COUNT_OFFSET)
        self.ticker.interval_ns = <int64_t>(heartbeat_interval_s * 1e9)

    # --- C level -------------------------------------------------------------------------

    cdef void c_set_counter(self, Py_ssize_t slot, uint64_t value) noexcept nogil:
        op_store_relaxed_u64(<uint64_t *>(self.values + slot * self.value_stride), value)

    cdef void c_add_counter(self, Py_ssize_t slot, uint64_t delta) noexcept nogil:
        op_fetch_add_u64(<uint64_t *>(self.values + slot * self.value_stride), delta)

    cdef void c_set_gauge(self, Py_ssize_t slot, double value) noexcept nogil:
        op_store_relaxed_f64(<uint64_t *>(self.values + slot * self.value_stride), value)

    cdef void c_publish_snapshot(self, const double *values) noexcept nogil:
        op_seqlock_write_begin(self.snapshot_seq)
        op_store_f64s_relaxed(self.snapshot_data, values, self.snapshot_words)
        op_seqlock_write_end(self.snapshot_seq)

    cdef void c_append_history(self, const double *values) noexcept nogil:
        # The record's own seq names the record it holds (2i+1 writing, 2i+2 whole), so a
        # reader can tell a record overwritten by a later lap of the ring from the one it asked.
        cdef uint64_t index = self.next_history_index
        cdef Py_ssize_t slot = <Py_ssize_t>(index % <uint64_t>self.history_capacity)
        cdef uint64_t *record = <uint64_t *>(self.history + slot * self.history_stride)
        op_store_relaxed_u64(record, 2 * index + 1)
        op_fence_release()
        op_store_f64s_relaxed(record + 1, values, self.history_fields)
        op_store_release_u64(record, 2 * index + 2)
        op_store_release_u64(self.head_word, index + 1)
        self.next_history_index = index + 1

    cdef void c_publish_frame(self, const unsigned char *frame, uint64_t updates,
                              uint64_t global_step) noexcept nogil:
        # Under the region's seqlock, like the snapshot block: a reader copies a whole frame
        # with the update that took it, or retries. Copied word by word through a local, so
        # the source's alignment does not matter; the last word is zero-padded.
        cdef uint64_t *seq = self.frame_seq
        cdef uint64_t *words = seq + FRAME_HEADER_WORDS
        cdef Py_ssize_t full = self.frame_bytes // 8
        cdef Py_ssize_t tail = self.frame_bytes % 8
        cdef Py_ssize_t i
        cdef uint64_t word
        op_seqlock_write_begin(seq)
        op_store_relaxed_u64(seq + 1, updates)
        op_store_relaxed_u64(seq + 2, global_step)
        for i in range(full):
            memcpy(&word, frame + 8 * i, 8)
            op_store_relaxed_u64(words + i, word)
        if tail:
            word = 0
            memcpy(&word, frame + 8 * full, tail)
            op_store_relaxed_u64(words + full, word)
        op_seqlock_write_end(seq)

    cdef void c_heartbeat(self) noexcept nogil:
        heartbeat_tick(self.ticker)

    # --- Python level --------------------------------------------------------------------

    cdef void _check_value_slot(self, Py_ssize_t slot, unsigned char kind) except *:
        if self.base == NULL:
            raise ValueError("the metrics writer is closed")
        if slot < 0 or slot >= self.value_count or self.value_kinds[slot] != kind:
            kind_name = "counter" if kind == KIND_COUNTER else "gauge"
            raise IndexError(f"slot {slot} is not a {kind_name} in this schema "
                             "(use schema.slot(name))")

    def set_counter(self, Py_ssize_t slot, uint64_t value):
        self._check_value_slot(slot, KIND_COUNTER)
        self.c_set_counter(slot, value)

    def add_counter(self, Py_ssize_t slot, uint64_t delta=1):
        self._check_value_slot(slot, KIND_COUNTER)
        self.c_add_counter(slot, delta)

    def set_gauge(self, Py_ssize_t slot, double value):
        self._check_value_slot(slot, KIND_GAUGE)
        self.c_set_gauge(slot, value)

    def publish_snapshot(self, const double[::1] values):
        """Store the schema's snapshot values (float64, in schema.snapshot order) atomically
        as a whole: a reader sees all of them from one call or retries."""
        self._check_open()
        if values.shape[0] != self.snapshot_words:
            raise ValueError(f"publish_snapshot takes {self.snapshot_words} values "
                             f"(schema.snapshot), got {values.shape[0]}")
        if self.snapshot_words:
            self.c_publish_snapshot(&values[0])

    def append_history(self, const double[::1] values):
        """Append one record (float64, in schema.history order) to the history ring."""
        self._check_open()
        if values.shape[0] != self.history_fields:
            raise ValueError(f"append_history takes {self.history_fields} values "
                             f"(schema.history), got {values.shape[0]}")
        if self.history_fields:
            self.c_append_history(&values[0])
        else:
            self.c_append_history(NULL)

    def publish_frame(self, const unsigned char[::1] frame, uint64_t updates=0,
                      uint64_t global_step=0):
        """Store the schema's frame (its C*H*W bytes in C order, schema.frame) with the update
        count and step it was taken at, whole under the region's seqlock: a reader sees one
        publication's frame or none, never a mix."""
        self._check_open()
        if self.frame_seq == NULL:
            raise ValueError("this metrics file has no frame region (schema.frame is None)")
        if frame.shape[0] != self.frame_bytes:
            raise ValueError(f"publish_frame takes {self.frame_bytes} bytes (schema.frame), "
                             f"got {frame.shape[0]}")
        self.c_publish_frame(&frame[0], updates, global_step)

    @property
    def has_frame(self):
        """Whether the file has a frame region (its schema declares a frame)."""
        return self.frame_seq != NULL

    def skip_history(self, uint64_t count):
        """Number the history from record `count` instead of 0: a resumed run (a new file for
        an old run) continues its history where the run's previous file left off. Only before
        the first append; records 0 .. count - 1 read as overwritten (their slots hold seq 0).
        The caller re-appends the newest of them it still has (from progress.jsonl)."""
        self._check_open()
        if self.next_history_index != 0:
            raise ValueError("skip_history must come before the first append_history")
        self.next_history_index = count
        op_store_release_u64(self.head_word, count)

    def heartbeat(self):
        """Record that the writer is alive now (wall-clock and monotonic ns)."""
        self._check_open()
        self.c_heartbeat()

    def set_text(self, Py_ssize_t slot, text):
        """Store a short UTF-8 text (cut to the slot's capacity at a character boundary)."""
        self._check_open()
        if slot < 0 or slot >= self.text_count:
            raise IndexError(f"slot {slot} is not a text slot in this schema")
        capacity = self.text_stride - TEXT_HEADER_SIZE
        padded, length = _encode_text(text, capacity)
        _store_text(self.texts + slot * self.text_stride, padded, length)

    def set_state(self, int state, reason="", bint interrupted=False):
        """Move the run to `state` (metrics_layout.STATE_*). The reason text (why it failed,
        or what stopped it) and a fresh heartbeat are stored first; the state word last, with
        release semantics, so a reader that sees the state also sees both."""
        self._check_open()
        if state not in layout_mod.STATE_NAMES:
            raise ValueError(f"unknown state {state}; use metrics_layout.STATE_*")
        if interrupted and state != layout_mod.STATE_FINISHED:
            raise ValueError("interrupted applies only to STATE_FINISHED")
        capacity = self.reason_size - TEXT_HEADER_SIZE
        padded, length = _encode_text(reason, capacity)
        _store_text(self.reason, padded, length)
        self.c_heartbeat()
        cdef uint64_t word = <uint64_t>state
        if interrupted:
            word |= layout_mod.FLAG_INTERRUPTED
        op_store_release_u64(self.state_word, word)

    @property
    def state(self):
        """The state word's state (metrics_layout.STATE_*)."""
        self._check_open()
        return <int>(op_load_relaxed_u64(self.state_word) & layout_mod.STATE_MASK)

    @property
    def closed(self):
        return self.base == NULL

    @property
    def history_head(self):
        """Records appended so far (the ring holds the last history_capacity of them)."""
        return self.next_history_index

    def start_heartbeat(self):
        """Tick the heartbeat every heartbeat_interval_s from a native thread that never takes
        the GIL, so the heartbeat keeps going through long updates. Idempotent."""
        self._check_open()
        if self.heartbeat_running:
            return
        op_store_release_u64(&self.ticker.stop, 0)
        if pthread_create(&self.heartbeat_thread, NULL, _heartbeat_main, self.ticker) != 0:
            raise OSError("cannot start the heartbeat thread")
        self.heartbeat_running = True

    def stop_heartbeat(self):
        """Stop the heartbeat thread (returns within ~50 ms). Idempotent."""
        self._stop_heartbeat()

    cdef void _stop_heartbeat(self) noexcept nogil:
        if self.heartbeat_running:
            op_store_release_u64(&self.ticker.stop, 1)
            pthread_join(self.heartbeat_thread, NULL)
            self.heartbeat_running = False

    cdef void _check_open(self) except *:
        if self.base == NULL:
            raise ValueError("the metrics writer is closed")

    def close(self):
        """Stop the heartbeat thread and unmap the file; the file stays as last written.
        Set a final state (finished/failed) first: a file left `running` by a live process
        reads as stalled. Idempotent."""
        with nogil:
            self._release()

    cdef void _release(self) noexcept nogil:
        self._stop_heartbeat()
        if self.base != NULL:
            munmap(self.base, self.size)
            self.base = NULL
            self.frame_seq = NULL
        free(self.ticker)
        self.ticker = NULL
        free(self.value_kinds)
        self.value_kinds = NULL

    def __dealloc__(self):
        self._release()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        """A run left initializing/running ends here: finished on a normal exit, finished and
        interrupted on KeyboardInterrupt, failed (with the exception as reason) otherwise."""
        if self.base != NULL and self.state in (layout_mod.STATE_INITIALIZING,
                                                 layout_mod.STATE_RUNNING):
            if exc_type is None:
                self.set_state(layout_mod.STATE_FINISHED)
            elif issubclass(exc_type, KeyboardInterrupt):
                self.set_state(layout_mod.STATE_FINISHED, "interrupted", interrupted=True)
            else:
                self.set_state(layout_mod.STATE_FAILED, f"{exc_type.__name__}: {exc}")
        self.close()
        return False

    def _benchmark(self, what, Py_ssize_t count, Py_ssize_t slot=0):
        """Nanoseconds for `count` C-level operations in a nogil loop: what is one of
        counter_set, counter_add, gauge, snapshot, history, heartbeat, frame (like numpy's
        BitGenerator._benchmark, a measurement hook for benchmarks/bench_metrics.py)."""
        import numpy as np

        self._check_open()
        kinds = {"counter_set": KIND_COUNTER, "counter_add": KIND_COUNTER, "gauge": KIND_GAUGE}
        if what in kinds:
            self._check_value_slot(slot, kinds[what])
        elif what == "frame" and self.frame_seq == NULL:
            raise ValueError("this metrics file has no frame region")
        elif what not in ("snapshot", "history", "heartbeat", "frame"):
            raise ValueError(f"unknown benchmark {what!r}")
        cdef double[::1] buffer = np.zeros(max(self.snapshot_words, self.history_fields, 1))
        cdef const double *values = &buffer[0]
        cdef unsigned char[::1] frame = np.zeros(max(self.frame_bytes, 1), dtype=np.uint8)
        cdef Py_ssize_t i
        cdef int op = ("counter_set", "counter_add", "gauge", "snapshot", "history",
                       "heartbeat", "frame").index(what)
        cdef uint64_t start, stop
        with nogil:
            start = _now_ns(CLOCK_MONOTONIC)
            if op == 0:
                for i in range(count):
                    self.c_set_counter(slot, <uint64_t>i)
            elif op == 1:
                for i in range(count):
                    self.c_add_counter(slot, 1)
            elif op == 2:
                for i in range(count):
                    self.c_set_gauge(slot, <double>i)
            elif op == 3:
                for i in range(count):
                    self.c_publish_snapshot(values)
            elif op == 4:
                for i in range(count):
                    self.c_append_history(values)
            elif op == 5:
                for i in range(count):
                    self.c_heartbeat()
            else:
                for i in range(count):
                    self.c_publish_frame(&frame[0], <uint64_t>i, <uint64_t>i)
            stop = _now_ns(CLOCK_MONOTONIC)
        return int(stop - start)
