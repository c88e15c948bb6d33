"""The metrics-file reader: attaches read-only to a trainer's `metrics.bin` and returns frozen
snapshots, history records and the run's liveness.

Pure Python over `mmap` (no numpy, no torch): monitors, `operant runs`, `operant monitor
--once` and the exporter start fast. The file's format is operant.shared.metrics_layout's; see
docs/metrics-file.md for the protocol this module follows.

Safety: the file is opened O_RDONLY and mapped read-only, so no reader can disturb the writer
or the run directory. The header is validated from a plain pread before anything is mapped or
any offset is trusted; every problem with a file (missing, empty, truncated, zeroed, foreign,
newer, corrupt, replaced) raises `MetricsFileError` with a one-line message, never anything
else. Multi-word values are read under their seqlock and retried a bounded number of times, so
a reader never shows a torn value and never hangs on a writer that died mid-write.

Memory ordering: loads of single aligned words go through memoryview casts (one 8-byte load
each, so single words never tear). On x86-64 loads are not reordered with other loads, which
gives the seqlock's reader side its acquire ordering; on weakly ordered CPUs this reader relies
on the interpreter's many dependent instructions between the loads, and a C reader should use
the fences in cext/common/atomics.h.
"""

from __future__ import annotations

import math
import mmap
import os
import socket
import stat
import struct
import sys
import time
from typing import Any

import msgspec
import psutil

from operant.shared import metrics_layout as fmt
from operant.shared.frame import frame_palette

# Two start times within this many seconds name the same process: psutil derives start times
# from the boot time, which moves a little when the wall clock is stepped.
PID_START_TOLERANCE_S = 1.0
# A run whose heartbeat is older than this many intervals is stalled.
STALL_INTERVALS = 4.0
# Seqlock retries before a reader gives up on a value (a writer that died mid-write leaves it
# odd forever); the deadline bounds the time spent when the writer is merely very busy.
SEQLOCK_FAST_ATTEMPTS = 256
SEQLOCK_DEADLINE_S = 0.05

# The frame region's update count and step, after its seq word.
_FRAME_COUNTS = struct.Struct("<QQ")

STATUS_RUNNING = "running"
STATUS_FINISHED = "finished"
STATUS_FAILED = "failed"
STATUS_CRASHED = "crashed"
STATUS_STALLED = "stalled"
STATUSES = (STATUS_RUNNING, STATUS_FINISHED, STATUS_FAILED, STATUS_CRASHED, STATUS_STALLED)
# Not a status of its own (STATUSES is a documented interface): how listings show a finished
# run that was stopped early, by SIGTERM or Ctrl-C, and can be continued with --resume.
SHOWN_INTERRUPTED = "interrupted"


def shown_status(status: str, interrupted: bool) -> str:
    """The status as a listing shows it to people: `interrupted` for a run that finished
    early on request, else `status`. Scripts read `status` and `interrupted` instead."""
    return SHOWN_INTERRUPTED if status == STATUS_FINISHED and interrupted else status


def shown_sps(metrics: dict[str, Any], status: str) -> Any:
    """The steps/s a listing shows people: a running run's last update's; a run that has
    ended (finished, failed, crashed) its mean over the run, as its summary line says (its
    last update's rate alone is noise: one short update read 556K where the run made 394K)."""
    mean = metrics.get("sps_mean")
    ended = status in (STATUS_FINISHED, STATUS_FAILED, STATUS_CRASHED)
    return mean if ended and isinstance(mean, (int, float)) else metrics.get("sps")


class MetricsFileError(Exception):
    """Any problem with a metrics file. The message is one line: the file, what is wrong with
    it, and what to do."""


class Frame(msgspec.Struct, frozen=True, kw_only=True):
    """A pixel run's latest frame (format 1.2's frame region): one env's observation as the
    trainer published it at an update, whole (never a mix of two publications)."""

    shape: tuple[int, int, int]
    """(channels, height, width)."""
    dtype: str
    """`uint8` or `bool`: one byte per value either way."""
    channels: tuple[str, ...]
    """A name per channel (empty names where the writer gave none)."""
    colors: tuple[str, ...]
    """A `#rrggbb` per channel, as the writer chose them, else operant.shared.frame's
    palette."""
    env: int
    """Which env's observation (0: the first env of the rank's batch)."""
    updates: int
    """The update count when it was published (its history record is `updates - 1`)."""
    global_step: int
    """The writer's global_step when it was published."""
    data: bytes
    """C*H*W bytes in C order (channel, row, column)."""

    def value(self, channel: int, row: int, column: int) -> int:
        _, height, width = self.shape
        return self.data[(channel * height + row) * width + column]


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One consistent look at a run. Values the writer never set are 0 (counters) or NaN."""

    path: str
    run_id: str
    env_id: str
    status: str
    """Liveness: running, finished, failed, crashed (the writer is gone without a final
    state) or stalled (alive or unknown, but its heartbeat stopped)."""
    state: str
    """The state word as written: initializing, running, finished or failed."""
    interrupted: bool
    """Finished early on request (SIGINT/SIGTERM) rather than at its step budget."""
    reason: str
    """Why the run failed or stopped, as the writer put it; empty otherwise."""
    pid: int
    hostname: str
    format_version: str
    created_wall_ns: int
    heartbeat_wall_ns: int
    heartbeat_age_s: float
    heartbeat_interval_s: float
    heartbeat_count: int
    history_head: int
    counters: dict[str, int]
    gauges: dict[str, float]
    texts: dict[str, str]
    snapshot: dict[str, float] | None
    """The seqlock block by field name; None while it cannot be read whole (a writer that
    died mid-publish)."""
    schema: fmt.Schema
    """What the file holds: names, kinds, units and descriptions of every value."""
    frame: Frame | None = None
    """The latest frame of a pixel run (format 1.2); None when the file has no frame region,
    nothing was published yet, or no whole copy could be taken."""

    def metrics(self) -> dict[str, int | float | str]:
        """Every named value in one mapping: counters, gauges, texts and snapshot fields."""
        merged: dict[str, int | float | str] = {}
        merged.update(self.counters)
        merged.update(self.gauges)
        merged.update(self.texts)
        if self.snapshot:
            merged.update(self.snapshot)
        return merged


class HistoryRecord(msgspec.Struct, frozen=True, array_like=True):
    index: int
    """The record's number since the run began (0 is the first update)."""
    values: tuple[float, ...]
    """In schema.history order."""


class History(msgspec.Struct, frozen=True):
    records: tuple[HistoryRecord, ...]
    head: int
    """Pass as `since_head` next time to get only newer records."""
    skipped: int
    """Records after `since_head` that were overwritten by the ring before they could be read
    (the full history is in progress.jsonl)."""


def _local_identity() -> tuple[str, str]:
    return socket.gethostname(), fmt.boot_id()


class MetricsReader:
    """Read-only view of one metrics file. Cheap to keep open; not thread-safe."""

    def __init__(self, path: str | os.PathLike[str], *, stall_intervals: float = STALL_INTERVALS):
        self.path = os.fspath(path)
        self.stall_intervals = stall_intervals
        self.retries = 0
        """Seqlock reads that had to be repeated because the writer was mid-write."""
        self._fd = -1
        self._mm: mmap.mmap | None = None
        self._views: list[memoryview[Any]] = []
        if sys.byteorder != "little":
            raise MetricsFileError(
                f"{self.path}: this reader needs a little-endian host "
                "(the metrics file is little-endian)"
            )
        try:
            # O_NONBLOCK: a FIFO (or a device) named metrics.bin is refused below as "not a
            # regular file" instead of blocking this open, and with it an exporter's every
            # scrape, forever; a regular file reads as without it.
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            raise MetricsFileError(
                f"{self.path}: no such file; is the run id right, or has the "
                "trainer not started yet?"
            ) from None
        except OSError as error:
            raise MetricsFileError(f"{self.path}: cannot open ({error.strerror})") from None
        try:
            self._open()
        except OSError as error:
            self.close()
            raise MetricsFileError(
                f"{self.path}: cannot read ({error.strerror or error})"
            ) from None
        except BaseException:
            self.close()
            raise

    # --- opening and validation ----------------------------------------------------------

    def _fail(self, what: str) -> MetricsFileError:
        return MetricsFileError(f"{self.path}: {what}")

    def _open(self) -> None:
        st = os.fstat(self._fd)
        if not stat.S_ISREG(st.st_mode):
            raise self._fail("not a regular file")
        self._identity = (st.st_dev, st.st_ino)
        size = st.st_size
        if size == 0:
            raise self._fail(
                "is empty (the trainer was stopped while creating it?); start the run again"
            )
        prefix = os.pread(self._fd, fmt.IDENTITY_SIZE, 0)
        if not prefix.strip(b"\0"):
            raise self._fail("is zeroed, not a metrics file (a crash before it was written?)")
        magic = prefix[: len(fmt.MAGIC)]
        if magic != fmt.MAGIC and not (len(magic) < len(fmt.MAGIC) and fmt.MAGIC.startswith(magic)):
            raise self._fail("is not an Operant metrics file (wrong magic)")
        if len(prefix) < fmt.IDENTITY_SIZE:
            raise self._fail(
                f"is truncated: {size} bytes, shorter than the {fmt.IDENTITY_SIZE}-byte header"
            )
        header = fmt.unpack_header(prefix)
        self.format_version = self._check_version(header)
        header_size = header["header_size"]
        if header_size < fmt.HEADER_SIZE or header_size % fmt.CACHE_LINE:
            raise self._fail(f"has a corrupt header (header size {header_size})")
        file_size = header["file_size"]
        if file_size < header_size or file_size % 8:
            raise self._fail(f"has a corrupt header (file size {file_size})")
        if size < file_size:
            raise self._fail(
                f"is truncated: {size} of {file_size} bytes; the file was cut "
                "short (disk full or copied while written?)"
            )
        if header["heartbeat_interval_ns"] <= 0:
            raise self._fail("has a corrupt header (heartbeat interval 0)")
        pid, start = header["pid"], header["pid_start_time"]
        if pid >= 2**31 or not math.isfinite(start):
            raise self._fail("has a corrupt header (writer pid or start time)")
        layout = fmt.Layout(**{name: header[name] for name in fmt.Layout.__struct_fields__})
        self._check_regions(layout, header_size)
        self.layout = layout
        self.pid = pid
        self.pid_start_time = start
        self.heartbeat_interval_s = header["heartbeat_interval_ns"] / 1e9
        self.created_wall_ns = header["created_wall_ns"]

        self._mm = mm = mmap.mmap(self._fd, file_size, access=mmap.ACCESS_READ)
        blob = mm[layout.schema_offset : layout.schema_offset + layout.schema_length]
        if fmt.schema_crc32(blob) != header["schema_crc32"]:
            raise self._fail("has a corrupted schema blob (checksum mismatch)")
        try:
            schema = fmt.decode_schema(blob)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            raise self._fail(f"has a corrupted schema blob ({error})") from None
        self._bind(schema, layout, mm)

    def _check_version(self, header: dict[str, Any]) -> str:
        """The file's "major.minor" once its byte order and major version are readable here."""
        major, minor = header["version_major"], header["version_minor"]
        if header["endian_tag"] != fmt.ENDIAN_TAG:
            if header["endian_tag"] == int.from_bytes(fmt.ENDIAN_TAG.to_bytes(4, "little"), "big"):
                raise self._fail(
                    "was written on a big-endian host; the format is little-endian only"
                )
            raise self._fail("has a corrupt header (byte-order tag)")
        if major > fmt.VERSION_MAJOR:
            raise self._fail(
                f"uses metrics format {major}.{minor}, newer than this reader "
                f"({fmt.VERSION_MAJOR}.x): upgrade operant to read it"
            )
        if major < fmt.VERSION_MAJOR:
            raise self._fail(
                f"uses metrics format {major}.{minor}, older than this reader "
                f"supports ({fmt.VERSION_MAJOR}.x): read it with the operant "
                "version that wrote it"
            )
        return f"{major}.{minor}"

    def _check_regions(self, layout: fmt.Layout, header_size: int) -> None:
        if layout.value_stride < 8 or layout.value_stride % 8:
            raise self._fail(f"has a corrupt header (value stride {layout.value_stride})")
        if (
            layout.text_stride < fmt.TEXT_HEADER_SIZE
            or layout.text_stride % 8
            or layout.reason_size < fmt.TEXT_HEADER_SIZE
            or layout.reason_size % 8
        ):
            raise self._fail("has a corrupt header (text slot size)")
        if (
            layout.history_capacity < 1
            or layout.history_stride % 8
            or layout.history_stride < fmt.HISTORY_RECORD_HEADER_SIZE + 8 * layout.history_fields
        ):
            raise self._fail("has a corrupt header (history ring shape)")
        if bool(layout.frame_offset) != bool(layout.frame_size) or (
            layout.frame_size and layout.frame_size < fmt.FRAME_HEADER_SIZE + 8
        ):
            raise self._fail("has a corrupt header (frame region)")
        previous_end, previous_name = header_size, "header"
        for name, offset, size in layout.regions()[1:]:
            if name != "schema" and offset % 8:
                raise self._fail(f"has a corrupt header ({name} region misaligned)")
            if offset < previous_end:
                raise self._fail(f"has a corrupt header ({name} region overlaps {previous_name})")
            if offset + size > layout.file_size:
                raise self._fail(f"has a corrupt header ({name} region ends past the file)")
            previous_end, previous_name = offset + size, name

    def _bind(self, schema: fmt.Schema, layout: fmt.Layout, mm: mmap.mmap) -> None:
        """Check the schema against the layout, then precompute every word to read."""
        names: set[str] = set()
        # (name, word index) of counters and gauges; (name, byte offset) of text slots.
        counters: list[tuple[str, int]] = []
        gauges: list[tuple[str, int]] = []
        texts: list[tuple[str, int]] = []
        for metric in schema.metrics:
            if metric.name in names:
                raise self._fail(f"has a corrupted schema blob (name {metric.name!r} twice)")
            names.add(metric.name)
            if metric.kind in (fmt.KIND_COUNTER, fmt.KIND_GAUGE):
                if not 0 <= metric.slot < layout.value_count:
                    raise self._fail(f"has a corrupted schema blob ({metric.name!r} slot)")
                target = counters if metric.kind == fmt.KIND_COUNTER else gauges
                target.append((metric.name, layout.value_word(metric.slot) // 8))
            elif metric.kind == fmt.KIND_TEXT:
                if not 0 <= metric.slot < layout.text_count:
                    raise self._fail(f"has a corrupted schema blob ({metric.name!r} slot)")
                texts.append((metric.name, layout.text_slot(metric.slot)))
            # Kinds a newer minor version added are skipped, by the versioning rules.
        problem = fmt.rank_problem(schema)
        if problem:
            raise self._fail(f"has a corrupted schema blob ({problem})")
        if len(schema.snapshot) != layout.snapshot_words:
            raise self._fail("has a corrupted schema blob (snapshot fields vs. header)")
        if len(schema.history) != layout.history_fields:
            raise self._fail("has a corrupted schema blob (history fields vs. header)")
        self._frame_seq_word = 0
        if schema.frame is not None:
            # A frame the schema declares must have its region; a region the schema does not
            # declare is left alone (a later minor version may give it other content).
            problem = fmt.frame_problem(schema.frame)
            if problem:
                raise self._fail(f"has a corrupted schema blob ({problem})")
            if not layout.frame_size or layout.frame_size < fmt.frame_region_size(schema.frame):
                raise self._fail("has a corrupted schema blob (frame vs. header)")
            self._frame_seq_word = layout.frame_offset // 8
            spec = schema.frame
            channels = spec.shape[0]
            self._frame_channels = spec.channels or ("",) * channels
            self._frame_colors = spec.colors or frame_palette(channels)
        self.schema = schema
        self._counters, self._gauges, self._texts = counters, gauges, texts
        view = memoryview(mm)
        self._q = view.cast("Q")
        self._d = view.cast("d")
        self._views = [self._q, self._d, view]
        self._snapshot_seq_word = layout.snapshot_offset // 8
        self._snapshot_start = layout.snapshot_offset + fmt.SNAPSHOT_HEADER_SIZE
        self._snapshot_struct = struct.Struct(f"<{layout.snapshot_words}d")
        self._history_struct = struct.Struct(f"<{layout.history_fields}d")
        self._snapshot_names = tuple(field.name for field in schema.snapshot)
        hostname, boot = _local_identity()
        same_host = schema.hostname == hostname if schema.hostname else False
        # Same host and same boot: the pid can be checked and the monotonic clocks compared.
        self._local = same_host and (not schema.boot_id or schema.boot_id == boot)
        self._rebooted = (
            same_host and bool(schema.boot_id) and bool(boot) and schema.boot_id != boot
        )

    # --- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        for view in self._views:
            view.release()
        self._views = []
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> MetricsReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def _mapping(self) -> mmap.mmap:
        """The mapped file, or MetricsFileError once the reader is closed."""
        if self._mm is None:
            raise MetricsFileError(f"{self.path}: the reader is closed")
        return self._mm

    def check(self) -> None:
        """Raise MetricsFileError if the file was shrunk, replaced by another file, or removed
        since it was opened."""
        if self._mm is None:
            raise MetricsFileError(f"{self.path}: the reader is closed")
        # A file shrunk under the mapping would kill this process with SIGBUS on the next
        # read past its new end; no Operant writer ever shrinks one.
        if os.fstat(self._fd).st_size < self.layout.file_size:
            raise self._fail(
                "was truncated while being read (not by an Operant writer); open it again"
            )
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise self._fail("was removed since it was opened") from None
        except OSError as error:
            raise self._fail(f"cannot be checked ({error.strerror})") from None
        if (st.st_dev, st.st_ino) != self._identity:
            raise self._fail(
                "was replaced by a new file since it was opened (a new run in "
                "the same directory?); open it again"
            )

    # --- seqlocked reads -----------------------------------------------------------------

    def _read_seqlocked(self, seq_word: int, read, *args):
        """`read(*args)` as of one even value of the seq word (a copy of the guarded words), or
        None if no whole copy could be taken within the retry budget."""
        q = self._q
        attempts, deadline = 0, 0.0
        while True:
            begin = q[seq_word]
            if not begin & 1:
                value = read(*args)
                if q[seq_word] == begin:
                    return value
            self.retries += 1
            attempts += 1
            if attempts % SEQLOCK_FAST_ATTEMPTS == 0:
                now = time.monotonic()
                if not deadline:
                    deadline = now + SEQLOCK_DEADLINE_S
                elif now > deadline:
                    return None

    def snapshot_block(self) -> tuple[float, ...] | None:
        """The seqlock block's values in schema.snapshot order, all from one publish_snapshot
        call; None if no whole copy could be taken. The cheapest read there is."""
        return self._read_seqlocked(
            self._snapshot_seq_word,
            self._snapshot_struct.unpack_from,
            self._mm,
            self._snapshot_start,
        )

    def frame(self) -> Frame | None:
        """The latest published frame, whole; None when the file has none, none was published
        yet, or no whole copy could be taken (a writer that died mid-publish)."""
        if not self._frame_seq_word:
            return None
        spec = self.schema.frame
        assert spec is not None
        if not self._q[self._frame_seq_word]:
            return None  # seq 0: never published
        start = self._frame_seq_word * 8 + 8
        end = start + fmt.FRAME_HEADER_SIZE - 8 + spec.nbytes
        copy = self._read_seqlocked(
            self._frame_seq_word, self._mapping().__getitem__, slice(start, end)
        )
        if copy is None:
            return None
        updates, global_step = _FRAME_COUNTS.unpack_from(copy)
        return Frame(
            shape=spec.shape,
            dtype=spec.dtype,
            channels=self._frame_channels,
            colors=self._frame_colors,
            env=spec.env,
            updates=updates,
            global_step=global_step,
            data=copy[fmt.FRAME_HEADER_SIZE - 8 :],
        )

    def _read_text(self, offset: int, size: int, what: str) -> str:
        data = self._read_seqlocked(
            offset // 8, self._mapping().__getitem__, slice(offset + 8, offset + size)
        )
        if data is None:
            return ""
        length = int.from_bytes(data[:4], "little")
        capacity = size - fmt.TEXT_HEADER_SIZE
        if length > capacity:
            raise self._fail(f"has a corrupt {what} (length {length} > {capacity})")
        return data[8 : 8 + length].decode("utf-8", "replace")

    # --- snapshots -----------------------------------------------------------------------

    def counter(self, name: str) -> int:
        for metric_name, word in self._counters:
            if metric_name == name:
                return self._q[word]
        raise KeyError(name)

    def snapshot(self) -> Snapshot:
        """Everything in the file now, with the run's liveness."""
        self.check()
        q, d = self._q, self._d
        # The state word first, with the ordering the writer gave it: values read after it
        # are at least as new as those stored before the state changed.
        state_word = q[fmt.STATE_OFFSET // 8]
        state_code = state_word & fmt.STATE_MASK
        if state_code not in fmt.STATE_NAMES:
            raise self._fail(
                f"has an unknown state {state_code} (corrupt, or written by a newer Operant)"
            )
        reason = self._read_text(self.layout.reason_offset, self.layout.reason_size, "reason text")
        heartbeat_wall = q[fmt.HEARTBEAT_WALL_OFFSET // 8]
        heartbeat_mono = q[fmt.HEARTBEAT_MONO_OFFSET // 8]
        heartbeat_count = q[fmt.HEARTBEAT_COUNT_OFFSET // 8]
        counters = {name: q[word] for name, word in self._counters}
        gauges = {name: d[word] for name, word in self._gauges}
        texts = {
            name: self._read_text(offset, self.layout.text_stride, f"text {name!r}")
            for name, offset in self._texts
        }
        block = self.snapshot_block()
        head = q[fmt.HISTORY_HEAD_OFFSET // 8]
        age = self._heartbeat_age(heartbeat_wall, heartbeat_mono)
        return Snapshot(
            path=self.path,
            run_id=self.schema.run_id,
            env_id=self.schema.env_id,
            status=self._status(state_code, age),
            state=fmt.STATE_NAMES[state_code],
            interrupted=bool(state_word & fmt.FLAG_INTERRUPTED),
            reason=reason,
            pid=self.pid,
            hostname=self.schema.hostname,
            format_version=self.format_version,
            created_wall_ns=self.created_wall_ns,
            heartbeat_wall_ns=heartbeat_wall,
            heartbeat_age_s=age,
            heartbeat_interval_s=self.heartbeat_interval_s,
            heartbeat_count=heartbeat_count,
            history_head=head,
            counters=counters,
            gauges=gauges,
            texts=texts,
            snapshot=None if block is None else dict(zip(self._snapshot_names, block)),
            schema=self.schema,
            frame=self.frame(),
        )

    def _heartbeat_age(self, wall_ns: int, mono_ns: int) -> float:
        if wall_ns == 0:
            return math.inf
        if self._local and mono_ns:
            # CLOCK_MONOTONIC is system-wide: immune to wall-clock steps on this host.
            return max(0.0, (time.monotonic_ns() - mono_ns) / 1e9)
        return max(0.0, (time.time_ns() - wall_ns) / 1e9)

    def _status(self, state_code: int, heartbeat_age_s: float) -> str:
        if state_code == fmt.STATE_FINISHED:
            return STATUS_FINISHED
        if state_code == fmt.STATE_FAILED:
            return STATUS_FAILED
        if self._rebooted:
            return STATUS_CRASHED
        if self._local and self.pid:
            process_status = self._process_status()
            if process_status is not None:
                return process_status
        if heartbeat_age_s > self.stall_intervals * self.heartbeat_interval_s:
            return STATUS_STALLED
        return STATUS_RUNNING

    def _process_status(self) -> str | None:
        """crashed or stalled when the writer's process says so; None when it looks alive or
        cannot be inspected (then the heartbeat decides)."""
        try:
            process = psutil.Process(self.pid)
            started = process.create_time()
            process_state = process.status()
        except psutil.NoSuchProcess:  # gone, or a zombie waiting to be reaped
            return STATUS_CRASHED
        except psutil.Error:  # not ours to inspect: the heartbeat decides
            return None
        if abs(started - self.pid_start_time) > PID_START_TOLERANCE_S:
            return STATUS_CRASHED  # the pid now belongs to another process
        if process_state in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return STATUS_CRASHED
        if process_state in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
            return STATUS_STALLED
        return None

    # --- history -------------------------------------------------------------------------

    def history(self, since_head: int = 0) -> History:
        """Whole records with index >= since_head still in the ring, oldest first.

        A record's seq names the record it holds, so one that was overwritten by a later lap
        of the ring, before or while it was copied, is left out and counted in `skipped`.
        Records are copied newest first: a reader that fell a whole ring behind a fast writer
        then races the writer's overwrites from the far end and keeps the newest records.
        """
        self.check()
        layout, q, mm = self.layout, self._q, self._mapping()
        head = q[fmt.HISTORY_HEAD_OFFSET // 8]
        start = max(since_head, head - layout.history_capacity, 0)
        unpack_from = self._history_struct.unpack_from
        records = []
        for index in range(head - 1, start - 1, -1):
            offset = layout.history_record(index)
            word = offset // 8
            want = fmt.history_seq_complete(index)
            if q[word] != want:
                # Overwritten already, and so is every older record: the ring is written in
                # index order.
                break
            values = unpack_from(mm, offset + fmt.HISTORY_RECORD_HEADER_SIZE)
            # A whole record's seq only ever changes to a later record's: any change means
            # this copy may be torn, and the record is gone.
            if q[word] != want:
                break
            records.append(HistoryRecord(index, values))
        records.reverse()
        return History(
            records=tuple(records), head=head, skipped=max(0, head - since_head - len(records))
        )
