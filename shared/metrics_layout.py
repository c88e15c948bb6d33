"""The metrics file's format: the one place that knows its bytes.

`runs/<run_id>/metrics.bin` is written by one trainer process (operant.cext.metrics) and read by
any number of monitors (operant.shared.reader). This module owns everything both sides must
agree on: the magic and versions, the fixed header's fields and offsets, where each region
sits, the state word's values, the schema Structs (msgspec, JSON-encoded into the file), and
how a schema turns into a layout. Neither side restates a number from here; docs/metrics-file.md
describes the same format for third-party readers.

Versioning: a reader accepts any minor version of its own major. A minor version may only add
(header fields in reserved space, schema fields with defaults, metric kinds that old readers
skip); anything an old reader would misread takes a new major version.
"""

from __future__ import annotations

import socket
import struct
import zlib
from typing import Any, Literal

import msgspec

MAGIC = b"OPERANTM"
VERSION_MAJOR = 1
# 1.1 added the schema's rank fields (rank, world_size, local_rank, node): a run trained by
# several processes writes one file per rank (operant.shared.runs.metrics_path).
# 1.2 added the optional frame region (header `frame_offset`/`frame_size` in 1.1's reserved
# bytes 168-183, the schema's `frame`): a pixel env's latest observation of env 0.
VERSION_MINOR = 2
# Written as a little-endian u32: a reader that sees it differently is reading a file from a
# big-endian writer (the format is little-endian only).
ENDIAN_TAG = 0x0A0B0C0D

CACHE_LINE = 64
# Files are sized in whole pages so the mapping covers the file exactly.
PAGE = 4096

# The fixed header: (name, struct code) in file order, packed little-endian without padding.
# Offsets follow from the codes; HEADER_FIELDS is the single source for both sides.
HEADER_FIELDS: tuple[tuple[str, str], ...] = (
    ("magic", "8s"),
    ("version_major", "H"),
    ("version_minor", "H"),
    ("header_size", "I"),
    ("endian_tag", "I"),
    ("flags", "I"),
    ("file_size", "Q"),
    ("pid", "Q"),
    ("pid_start_time", "d"),
    ("heartbeat_interval_ns", "Q"),
    ("created_wall_ns", "Q"),
    ("schema_offset", "Q"),
    ("schema_length", "I"),
    ("schema_crc32", "I"),
    ("values_offset", "Q"),
    ("value_count", "I"),
    ("value_stride", "I"),
    ("snapshot_offset", "Q"),
    ("snapshot_words", "I"),
    ("reserved_0", "I"),
    ("text_offset", "Q"),
    ("text_count", "I"),
    ("text_stride", "I"),
    ("reason_offset", "Q"),
    ("reason_size", "I"),
    ("reserved_1", "I"),
    ("history_offset", "Q"),
    ("history_capacity", "I"),
    ("history_fields", "I"),
    ("history_stride", "I"),
    ("reserved_2", "I"),
    ("frame_offset", "Q"),
    ("frame_size", "I"),
    ("reserved_3", "I"),
)
HEADER_STRUCT = struct.Struct("<" + "".join(code for _, code in HEADER_FIELDS))
HEADER_OFFSETS: dict[str, int] = {}
_offset = 0
for _name, _code in HEADER_FIELDS:
    HEADER_OFFSETS[_name] = _offset
    _offset += struct.calcsize("<" + _code)
del _offset, _name, _code
# Bytes a reader must have before it can judge a file at all (magic .. reserved_3). A file of
# 1.0 or 1.1 holds zeros in the bytes 1.2 added (168-183): no frame region.
IDENTITY_SIZE = HEADER_STRUCT.size

# Words the writer changes while running, each on its own cache line so the heartbeat thread,
# the training loop and readers polling the state never contend for one line.
STATE_OFFSET = 192
HEARTBEAT_WALL_OFFSET = 256
HEARTBEAT_MONO_OFFSET = 264
HEARTBEAT_COUNT_OFFSET = 272
HISTORY_HEAD_OFFSET = 320
HEADER_SIZE = 512

# Counter and gauge slots: one 64-bit word at the start of each 64-byte line.
VALUE_STRIDE = CACHE_LINE
# Text slots and the failure-reason slot: u64 seq, u32 length, u32 reserved, then UTF-8 bytes.
TEXT_HEADER_SIZE = 16
TEXT_STRIDE = 256
REASON_SIZE = 1024
# The snapshot region: u64 seq, then the float64 values.
SNAPSHOT_HEADER_SIZE = 8
# A history record: u64 seq, then the float64 fields.
HISTORY_RECORD_HEADER_SIZE = 8
# The frame region (1.2): u64 seq, u64 updates, u64 global_step, u64 reserved, then the
# frame's C*H*W bytes (one byte per value, C order) padded to whole words; all under the seq.
FRAME_HEADER_SIZE = 32
# What the frame region carries: (C, H, W) of one byte per value, not larger than this. The
# writer publishes a frame only for observations that fit (operant.trainer.services.telemetry).
FRAME_DTYPES = ("uint8", "bool")
FRAME_MAX_CHANNELS = 64
FRAME_MAX_SIDE = 256
FRAME_MAX_BYTES = 1 << 16

# The state word: low byte is the state, higher bits are flags.
STATE_INITIALIZING = 0
STATE_RUNNING = 1
STATE_FINISHED = 2
STATE_FAILED = 3
STATE_MASK = 0xFF
# Set with STATE_FINISHED when the run ended early on request (SIGINT/SIGTERM), not by
# reaching its step budget.
FLAG_INTERRUPTED = 1 << 8
STATE_NAMES = {
    STATE_INITIALIZING: "initializing",
    STATE_RUNNING: "running",
    STATE_FINISHED: "finished",
    STATE_FAILED: "failed",
}


# A history record's seq: 2*index+1 while record `index` is being written, 2*index+2 once it
# is whole; 0 means the slot was never written.
def history_seq_complete(index: int) -> int:
    return 2 * index + 2


KIND_COUNTER = "counter"
KIND_GAUGE = "gauge"
KIND_TEXT = "text"
MetricKind = Literal["counter", "gauge", "text"]


class Metric(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One named value in the file.

    `kind` is kept a plain string on decode so a reader skips kinds a newer minor version
    adds instead of refusing the whole file.
    """

    name: str
    """What the user sees, e.g. `episode_return_mean`."""
    kind: str
    """`counter` (u64, only grows), `gauge` (f64 bits) or `text` (UTF-8 in a text slot)."""
    slot: int
    """Index into the value region (counter, gauge) or the text region (text)."""
    unit: str = ""
    """Unit shown next to the value (`steps`, `s`, `bytes`, `1/s`); empty when unitless."""
    description: str = ""
    """One sentence for tooltips and `--help`-like listings."""


class Field(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One float64 word of the snapshot block or of a history record, in order."""

    name: str
    unit: str = ""
    description: str = ""


class FrameSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the frame region holds (since 1.2): the latest observation of one env, an image of
    `shape` (C, H, W), channels first, one byte per value. Absent from the schema (and the
    region from the file) when the run publishes no frame."""

    shape: tuple[int, int, int]
    """(channels, height, width)."""
    dtype: str = "uint8"
    """`uint8` or `bool` (one byte each, 0 or 1 for bool)."""
    channels: tuple[str, ...] = ()
    """A name per channel, in channel order (MinAtar's object kinds); empty: unnamed."""
    colors: tuple[str, ...] = ()
    """A `#rrggbb` colour per channel to draw it in; empty: the reader's default palette."""
    env: int = 0
    """Which env's (row's) observation it is."""

    @property
    def nbytes(self) -> int:
        channels, height, width = self.shape
        return channels * height * width


def frame_problem(spec: FrameSpec) -> str:
    """What is wrong with a frame spec, or '' when nothing is."""
    if len(spec.shape) != 3 or min(spec.shape) < 1:
        return f"frame shape {spec.shape} is not (channels, height, width) of positive sizes"
    channels, height, width = spec.shape
    if channels > FRAME_MAX_CHANNELS or max(height, width) > FRAME_MAX_SIDE:
        return f"frame shape {spec.shape} is larger than a frame may be"
    if spec.nbytes > FRAME_MAX_BYTES:
        return f"frame of {spec.nbytes} bytes is larger than {FRAME_MAX_BYTES}"
    if spec.dtype not in FRAME_DTYPES:
        return f"frame dtype {spec.dtype!r} is not one of {', '.join(FRAME_DTYPES)}"
    if spec.channels and len(spec.channels) != channels:
        return f"frame has {channels} channels but {len(spec.channels)} channel names"
    if spec.colors and len(spec.colors) != channels:
        return f"frame has {channels} channels but {len(spec.colors)} colours"
    for color in spec.colors:
        if len(color) != 7 or color[0] != "#" or not all(c in _HEX for c in color[1:]):
            return f"frame colour {color!r} is not #rrggbb"
    return ""


_HEX = frozenset("0123456789abcdefABCDEF")


class Schema(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the file holds, encoded as JSON into the schema region. New fields get defaults."""

    run_id: str
    env_id: str = ""
    hostname: str = ""
    """The writer's host: a reader elsewhere cannot check the pid, only the heartbeat."""
    boot_id: str = ""
    """Linux boot id of the writer's host; a reader on the same host after a reboot knows
    the writer is gone."""
    writer: str = ""
    """Software that wrote the file, e.g. `operant 0.1.0`."""
    metrics: tuple[Metric, ...] = ()
    snapshot: tuple[Field, ...] = ()
    """Values published together under the seqlock (`publish_snapshot`)."""
    history: tuple[Field, ...] = ()
    """Fields of one history record (`append_history`), one record per update."""
    rank: int = 0
    """Which process of the training group writes this file (since 1.1; 0 in older files).
    Each rank writes its own file with its own values (operant.shared.runs.metrics_path)."""
    world_size: int = 1
    """How many processes train the run together (since 1.1; 1 in older files)."""
    local_rank: int = 0
    """The rank's number among the group's processes on its node (since 1.1)."""
    node: str = ""
    """The node the rank runs on, as the launcher's hosts are named (since 1.1; empty in a
    single-process run, where `hostname` says it)."""
    frame: FrameSpec | None = None
    """The frame region's content (since 1.2); None (absent) when the file has none."""

    def metric(self, name: str) -> Metric:
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise KeyError(f"no metric {name!r} in the schema")

    def slot(self, name: str) -> int:
        """The slot a writer passes to set_counter/set_gauge/set_text for metric `name`."""
        return self.metric(name).slot

    def snapshot_index(self, name: str) -> int:
        return _field_index(self.snapshot, name, "snapshot")

    def history_index(self, name: str) -> int:
        return _field_index(self.history, name, "history")

    @property
    def value_count(self) -> int:
        slots = [m.slot for m in self.metrics if m.kind in (KIND_COUNTER, KIND_GAUGE)]
        return max(slots) + 1 if slots else 0

    @property
    def text_count(self) -> int:
        slots = [m.slot for m in self.metrics if m.kind == KIND_TEXT]
        return max(slots) + 1 if slots else 0


def _field_index(fields: tuple[Field, ...], name: str, where: str) -> int:
    for index, field in enumerate(fields):
        if field.name == name:
            return index
    raise KeyError(f"no {where} field {name!r} in the schema")


MetricSpec = str | tuple[str, str] | tuple[str, str, str]


def _spec(item: MetricSpec) -> tuple[str, str, str]:
    """A bare name, (name, unit) or (name, unit, description)."""
    if isinstance(item, str):
        return item, "", ""
    name, unit, *rest = item
    return name, unit, rest[0] if rest else ""


def make_schema(
    run_id: str,
    *,
    env_id: str = "",
    counters=(),
    gauges=(),
    texts=(),
    snapshot=(),
    history=(),
    writer: str = "",
    rank: int = 0,
    world_size: int = 1,
    local_rank: int = 0,
    node: str = "",
    frame: FrameSpec | None = None,
) -> Schema:
    """A schema with slots assigned in order (counters, then gauges; texts separately).

    Each of counters/gauges/texts/snapshot/history is a sequence of names, (name, unit) or
    (name, unit, description). Metric and snapshot names must be unique together, since a
    reader shows them in one namespace; history fields may repeat metric names. `rank`,
    `world_size`, `local_rank` and `node` say which process of a training group writes the
    file (defaults: the only one). `frame` declares a frame region (a pixel env's latest
    observation).
    """
    metrics: list[Metric] = []
    for kind, items in ((KIND_COUNTER, counters), (KIND_GAUGE, gauges)):
        for item in items:
            name, unit, description = _spec(item)
            metrics.append(
                Metric(name=name, kind=kind, slot=len(metrics), unit=unit, description=description)
            )
    for slot, item in enumerate(texts):
        name, unit, description = _spec(item)
        metrics.append(
            Metric(name=name, kind=KIND_TEXT, slot=slot, unit=unit, description=description)
        )
    schema = Schema(
        run_id=run_id,
        env_id=env_id,
        hostname=socket.gethostname(),
        boot_id=boot_id(),
        writer=writer,
        metrics=tuple(metrics),
        snapshot=tuple(Field(name=n, unit=u, description=d) for n, u, d in map(_spec, snapshot)),
        history=tuple(Field(name=n, unit=u, description=d) for n, u, d in map(_spec, history)),
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        node=node,
        frame=frame,
    )
    check_schema(schema)
    return schema


def check_schema(schema: Schema) -> None:
    """Raise ValueError naming the first problem: duplicate names or slots, bad kinds, a rank
    outside its world."""
    problem = rank_problem(schema) or (frame_problem(schema.frame) if schema.frame else "")
    if problem:
        raise ValueError(problem)
    seen: set[str] = set()
    for name in [m.name for m in schema.metrics] + [f.name for f in schema.snapshot]:
        if not name:
            raise ValueError("metric and field names must not be empty")
        if name in seen:
            raise ValueError(f"name {name!r} appears twice among metrics and snapshot fields")
        seen.add(name)
    if len({f.name for f in schema.history}) != len(schema.history):
        raise ValueError("history field names must be unique")
    slots: set[tuple[bool, int]] = set()
    for metric in schema.metrics:
        if metric.kind not in (KIND_COUNTER, KIND_GAUGE, KIND_TEXT):
            raise ValueError(f"metric {metric.name!r} has unknown kind {metric.kind!r}")
        if metric.slot < 0:
            raise ValueError(f"metric {metric.name!r} has a negative slot")
        key = (metric.kind == KIND_TEXT, metric.slot)
        if key in slots:
            raise ValueError(f"metric {metric.name!r} shares slot {metric.slot} with another")
        slots.add(key)


def rank_problem(schema: Schema) -> str:
    """What is wrong with the schema's rank fields, or '' when nothing is."""
    if schema.world_size < 1:
        return f"world_size {schema.world_size} must be at least 1"
    if not 0 <= schema.rank < schema.world_size:
        return f"rank {schema.rank} is outside a world of {schema.world_size}"
    if schema.local_rank < 0:
        return f"local_rank {schema.local_rank} must not be negative"
    return ""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Schema)


def encode_schema(schema: Schema) -> bytes:
    return _encoder.encode(schema)


def decode_schema(blob: bytes) -> Schema:
    """Raises msgspec.DecodeError/ValidationError on a bad blob; the reader words the message."""
    return _decoder.decode(blob)


def boot_id() -> str:
    """This host's boot id (Linux), or '' where there is none."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            return file.read().strip()
    except OSError:
        return ""


def _align(value: int, to: int) -> int:
    return (value + to - 1) // to * to


class Layout(msgspec.Struct, frozen=True, kw_only=True):
    """Offsets and sizes of every region, as stored in the header. A reader builds one from
    the header it reads; a writer from `compute_layout`."""

    file_size: int
    schema_offset: int
    schema_length: int
    values_offset: int
    value_count: int
    value_stride: int
    snapshot_offset: int
    snapshot_words: int
    text_offset: int
    text_count: int
    text_stride: int
    reason_offset: int
    reason_size: int
    history_offset: int
    history_capacity: int
    history_fields: int
    history_stride: int
    frame_offset: int = 0
    """The frame region (1.2); 0 with `frame_size` 0 when the file has none."""
    frame_size: int = 0

    def value_word(self, slot: int) -> int:
        """Byte offset of counter/gauge `slot`."""
        return self.values_offset + slot * self.value_stride

    def text_slot(self, slot: int) -> int:
        return self.text_offset + slot * self.text_stride

    def history_record(self, index: int) -> int:
        """Byte offset of the slot that holds (or will hold) record number `index`."""
        return self.history_offset + (index % self.history_capacity) * self.history_stride

    def regions(self) -> list[tuple[str, int, int]]:
        """(name, offset, size) of each region in file order, the header first (the frame
        region only where the file has one)."""
        regions = [
            ("header", 0, HEADER_SIZE),
            ("schema", self.schema_offset, self.schema_length),
            ("values", self.values_offset, self.value_count * self.value_stride),
            ("snapshot", self.snapshot_offset, SNAPSHOT_HEADER_SIZE + 8 * self.snapshot_words),
            ("texts", self.text_offset, self.text_count * self.text_stride),
            ("reason", self.reason_offset, self.reason_size),
            ("history", self.history_offset, self.history_capacity * self.history_stride),
        ]
        if self.frame_size:
            regions.append(("frame", self.frame_offset, self.frame_size))
        return regions


def compute_layout(schema: Schema, schema_length: int, history_capacity: int) -> Layout:
    """Regions in file order, each starting on its own cache line, the file a whole number of
    pages: header | schema | values | snapshot | texts | reason | history | frame (where the
    schema declares one)."""
    if not 1 <= history_capacity < 2**32:
        raise ValueError("history_capacity must be between 1 and 2**32 - 1")
    schema_offset = HEADER_SIZE
    values_offset = _align(schema_offset + schema_length, CACHE_LINE)
    snapshot_offset = _align(values_offset + schema.value_count * VALUE_STRIDE, CACHE_LINE)
    text_offset = _align(
        snapshot_offset + SNAPSHOT_HEADER_SIZE + 8 * len(schema.snapshot), CACHE_LINE
    )
    reason_offset = _align(text_offset + schema.text_count * TEXT_STRIDE, CACHE_LINE)
    history_offset = _align(reason_offset + REASON_SIZE, CACHE_LINE)
    history_stride = HISTORY_RECORD_HEADER_SIZE + 8 * len(schema.history)
    end = history_offset + history_capacity * history_stride
    frame_offset = frame_size = 0
    if schema.frame is not None:
        frame_offset = _align(end, CACHE_LINE)
        frame_size = frame_region_size(schema.frame)
        end = frame_offset + frame_size
    file_size = _align(end, PAGE)
    return Layout(
        file_size=file_size,
        schema_offset=schema_offset,
        schema_length=schema_length,
        values_offset=values_offset,
        value_count=schema.value_count,
        value_stride=VALUE_STRIDE,
        snapshot_offset=snapshot_offset,
        snapshot_words=len(schema.snapshot),
        text_offset=text_offset,
        text_count=schema.text_count,
        text_stride=TEXT_STRIDE,
        reason_offset=reason_offset,
        reason_size=REASON_SIZE,
        history_offset=history_offset,
        history_capacity=history_capacity,
        history_fields=len(schema.history),
        history_stride=history_stride,
        frame_offset=frame_offset,
        frame_size=frame_size,
    )


def frame_region_size(spec: FrameSpec) -> int:
    """Bytes of the frame region for `spec`: its header and the frame in whole words."""
    return FRAME_HEADER_SIZE + _align(spec.nbytes, 8)


def pack_header(
    layout: Layout,
    *,
    schema_crc32: int,
    pid: int,
    pid_start_time: float,
    heartbeat_interval_ns: int,
    created_wall_ns: int,
) -> bytes:
    """The first HEADER_SIZE bytes of a new file (state initializing, heartbeat and head 0)."""
    fields: dict[str, Any] = {name: 0 for name, _ in HEADER_FIELDS}
    fields.update(msgspec.structs.asdict(layout))
    fields.update(
        magic=MAGIC,
        version_major=VERSION_MAJOR,
        version_minor=VERSION_MINOR,
        header_size=HEADER_SIZE,
        endian_tag=ENDIAN_TAG,
        schema_crc32=schema_crc32,
        pid=pid,
        pid_start_time=pid_start_time,
        heartbeat_interval_ns=heartbeat_interval_ns,
        created_wall_ns=created_wall_ns,
    )
    packed = HEADER_STRUCT.pack(*(fields[name] for name, _ in HEADER_FIELDS))
    return packed + bytes(HEADER_SIZE - len(packed))


def unpack_header(prefix: bytes) -> dict[str, Any]:
    """The header fields of the first IDENTITY_SIZE bytes, by name (no validation); each value
    has its struct code's type (bytes for `magic`, float for `pid_start_time`, else int)."""
    values = HEADER_STRUCT.unpack_from(prefix)
    return {name: value for (name, _), value in zip(HEADER_FIELDS, values)}


def schema_crc32(blob: bytes) -> int:
    return zlib.crc32(blob) & 0xFFFFFFFF
