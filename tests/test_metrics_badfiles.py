"""Bad metrics files: every one must raise MetricsFileError with a one-line message that names
the file and the problem, and nothing may crash, hang or read out of bounds."""

import os
import random
import struct

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operant.cext.metrics import MetricsWriter
from operant.shared import metrics_layout as fmt
from operant.shared.reader import MetricsFileError, MetricsReader, Snapshot


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    """A closed, finished file with every region in use, and its layout."""
    path = tmp_path_factory.mktemp("valid") / "metrics.bin"
    schema = fmt.make_schema(
        "bad-files",
        env_id="CartPole-v1",
        counters=["global_step"],
        gauges=["sps"],
        texts=["phase"],
        snapshot=["a", "b"],
        history=["x", "y"],
    )
    with MetricsWriter.create(path, schema, history_capacity=8) as writer:
        writer.set_counter(0, 42)
        writer.set_gauge(1, 1.5)
        writer.set_text(0, "rollout")
        writer.publish_snapshot(np.array([1.0, 2.0]))
        for i in range(11):
            writer.append_history(np.array([i, -i], dtype=float))
        layout = writer.layout
    return path.read_bytes(), layout


def expect_error(path, *fragments):
    with pytest.raises(MetricsFileError) as caught, MetricsReader(path) as reader:
        reader.snapshot()
        reader.history(0)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    for fragment in fragments:
        assert fragment in message, message
    return message


def patched(data: bytes, field: str, value) -> bytes:
    """`data` with one header field replaced (the layout module's own offsets and codes)."""
    code = dict(fmt.HEADER_FIELDS)[field]
    buf = bytearray(data)
    struct.pack_into("<" + code, buf, fmt.HEADER_OFFSETS[field], value)
    return bytes(buf)


def test_the_valid_file_reads(valid, tmp_path):
    data, _ = valid
    path = tmp_path / "metrics.bin"
    path.write_bytes(data)
    with MetricsReader(path) as reader:
        snap = reader.snapshot()
        history = reader.history(0)
    assert (snap.status, snap.counters, snap.texts) == (
        "finished",
        {"global_step": 42},
        {"phase": "rollout"},
    )
    assert [r.index for r in history.records] == [3, 4, 5, 6, 7, 8, 9, 10]


def test_missing_empty_and_not_a_file(tmp_path):
    expect_error(tmp_path / "nope.bin", "no such file")
    (tmp_path / "empty.bin").write_bytes(b"")
    expect_error(tmp_path / "empty.bin", "is empty")
    expect_error(tmp_path, "not a regular file")


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path):
    """A FIFO named metrics.bin blocked the reader's open(): the exporter's scrapes hung for
    good (and with them its SIGTERM), `operant runs` and the monitor too."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "run" / "metrics.bin"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    expect_error(fifo, "not a regular file")
    listed = subprocess.run(
        [sys.executable, "-m", "operant.cli", "runs", "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0 and "Traceback" not in listed.stderr
    assert f"run: {fifo}: not a regular file" in listed.stdout + listed.stderr


def test_truncated_at_every_region_boundary(valid, tmp_path):
    data, layout = valid
    cuts = {
        1,
        4,
        7,
        8,
        16,
        fmt.IDENTITY_SIZE - 1,
        fmt.IDENTITY_SIZE,
        fmt.HEADER_SIZE,
        len(data) - 1,
    }
    for _, offset, size in layout.regions():
        cuts.update({offset, offset + size})
    cuts = sorted(cut for cut in cuts if 0 < cut < len(data))
    assert len(cuts) >= 12
    for cut in cuts:
        path = tmp_path / f"cut-{cut}.bin"
        path.write_bytes(data[:cut])
        expect_error(path, "truncated")


def test_zeroed_random_and_wrong_magic(valid, tmp_path):
    data, _ = valid
    cases = {
        "zeroed": (bytes(len(data)), "is zeroed"),
        "random": (random.Random(7).randbytes(len(data)), "not an Operant metrics file"),
        "magic": (b"NOTOURS!" + data[8:], "wrong magic"),
        "png": (b"\x89PNG\r\n\x1a\n" + bytes(100), "wrong magic"),
    }
    for name, (content, fragment) in cases.items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(content)
        expect_error(path, fragment)


def test_versions_and_byte_order(valid, tmp_path):
    data, _ = valid
    path = tmp_path / "metrics.bin"
    path.write_bytes(patched(patched(data, "version_major", 2), "version_minor", 0))
    expect_error(path, "format 2.0", "newer", "upgrade operant")
    path.write_bytes(patched(patched(data, "version_major", 0), "version_minor", 0))
    expect_error(path, "format 0.0", "older")
    path.write_bytes(patched(data, "version_minor", 0))
    with MetricsReader(path) as reader:  # a 1.0 file (before ranks): one process, rank 0 of 1
        assert reader.snapshot().format_version == "1.0"
        assert (reader.schema.rank, reader.schema.world_size, reader.schema.node) == (0, 1, "")
    path.write_bytes(patched(patched(data, "version_minor", 7), "reserved_2", 0))
    with MetricsReader(path) as reader:  # a newer minor version reads
        assert reader.snapshot().format_version == "1.7"
    path.write_bytes(patched(data, "endian_tag", 0x0D0C0B0A))
    expect_error(path, "big-endian")


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("header_size", 100, "header size"),
        ("file_size", 1 << 40, "truncated"),
        ("file_size", 13, "file size"),
        ("heartbeat_interval_ns", 0, "heartbeat interval"),
        ("pid", 1 << 40, "pid"),
        ("pid_start_time", float("nan"), "start time"),
        ("history_capacity", 1 << 30, "history region ends past the file"),
        ("history_capacity", 0, "history ring shape"),
        ("history_stride", 12, "history ring shape"),
        ("values_offset", fmt.HEADER_SIZE + 8, "values region overlaps schema"),
        ("snapshot_offset", 1 << 50, "snapshot region ends past the file"),
        ("text_offset", 1089, "texts region misaligned"),
        ("text_stride", 8, "text slot size"),
        ("value_stride", 4, "value stride"),
    ],
)
def test_corrupt_header_fields(valid, tmp_path, field, value, fragment):
    data, _ = valid
    path = tmp_path / "metrics.bin"
    path.write_bytes(patched(data, field, value))
    expect_error(path, fragment)


def test_corrupted_schema_blob(valid, tmp_path):
    data, layout = valid
    path = tmp_path / "metrics.bin"
    flipped = bytearray(data)
    flipped[layout.schema_offset + 5] ^= 0x20
    path.write_bytes(bytes(flipped))
    expect_error(path, "corrupted schema blob", "checksum")

    def with_schema(blob: bytes) -> bytes:
        """A blob that passes the CRC, so the decoder or the consistency checks must object."""
        blob = blob.ljust(layout.schema_length, b" ")
        assert len(blob) == layout.schema_length
        buf = bytearray(data)
        buf[layout.schema_offset : layout.schema_offset + len(blob)] = blob
        return patched(bytes(buf), "schema_crc32", fmt.schema_crc32(blob))

    path.write_bytes(with_schema(b"{not json"))
    expect_error(path, "corrupted schema blob")
    path.write_bytes(with_schema(b'{"run_id": 5}'))
    expect_error(path, "corrupted schema blob", "run_id")
    for change, fragment in (
        (dict(snapshot=[]), "snapshot fields"),
        (dict(history=[{"name": "x"}]), "history fields"),
        (dict(metrics=[{"name": "g", "kind": "counter", "slot": 9}]), "slot"),
        (
            dict(
                metrics=[
                    {"name": "g", "kind": "text", "slot": 0},
                    {"name": "g", "kind": "text", "slot": 0},
                ]
            ),
            "twice",
        ),
        # (boot_id gives up its bytes: the blob must fit the original's length)
        (dict(boot_id="", rank=2, world_size=2), "rank 2 is outside a world of 2"),
    ):
        schema = msgspec.json.decode(
            data[layout.schema_offset : layout.schema_offset + layout.schema_length]
        )
        schema.update(change)
        path.write_bytes(with_schema(msgspec.json.encode(schema)))
        expect_error(path, "corrupted schema blob", fragment)


def test_unknown_state_and_corrupt_text(valid, tmp_path):
    data, layout = valid
    path = tmp_path / "metrics.bin"
    buf = bytearray(data)
    struct.pack_into("<Q", buf, fmt.STATE_OFFSET, 9)
    path.write_bytes(bytes(buf))
    expect_error(path, "unknown state 9")
    buf = bytearray(data)
    struct.pack_into("<I", buf, layout.text_slot(0) + 8, 5000)
    path.write_bytes(bytes(buf))
    expect_error(path, "corrupt text 'phase'", "length 5000")


def test_a_writer_that_died_mid_publish_leaves_the_block_unavailable(valid, tmp_path):
    data, layout = valid
    path = tmp_path / "metrics.bin"
    buf = bytearray(data)
    (seq,) = struct.unpack_from("<Q", buf, layout.snapshot_offset)
    struct.pack_into("<Q", buf, layout.snapshot_offset, seq + 1)  # odd forever
    path.write_bytes(bytes(buf))
    with MetricsReader(path) as reader:
        snap = reader.snapshot()
    assert snap.snapshot is None
    assert snap.counters == {"global_step": 42}


def test_replaced_removed_or_shrunk_while_open(valid, tmp_path):
    data, _ = valid
    path = tmp_path / "metrics.bin"
    path.write_bytes(data)
    reader = MetricsReader(path)
    other = tmp_path / "other.bin"
    other.write_bytes(data)
    os.replace(other, path)
    with pytest.raises(MetricsFileError, match="replaced by a new file.*open it again"):
        reader.snapshot()
    reader.close()

    reader = MetricsReader(path)
    path.unlink()
    with pytest.raises(MetricsFileError, match="was removed"):
        reader.snapshot()
    reader.close()

    path.write_bytes(data)
    reader = MetricsReader(path)
    os.truncate(path, 600)  # reading the mapping past 600 bytes would raise SIGBUS
    for read in (reader.snapshot, reader.history):
        with pytest.raises(MetricsFileError, match="truncated while being read"):
            read()
    reader.close()
    with pytest.raises(MetricsFileError, match="closed"):
        reader.snapshot()


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_fuzzed_files_give_a_snapshot_or_the_documented_error(valid, tmp_path, data):
    original, layout = valid
    buf = bytearray(original)
    # Mostly the header and schema, where a reader must not trust anything; sometimes
    # anywhere, and sometimes cut short.
    hot = st.integers(0, layout.values_offset - 1)
    anywhere = st.integers(0, len(buf) - 1)
    for position, value in data.draw(
        st.lists(
            st.tuples(st.one_of(hot, hot, anywhere), st.integers(0, 255)), min_size=1, max_size=12
        )
    ):
        buf[position] = value
    if data.draw(st.booleans()):
        del buf[data.draw(st.integers(0, len(buf))) :]
    path = tmp_path / "fuzzed.bin"
    path.write_bytes(bytes(buf))
    try:
        with MetricsReader(path) as reader:
            snap = reader.snapshot()
            history = reader.history(data.draw(st.integers(0, 20)))
    except MetricsFileError as error:
        assert "\n" not in str(error) and str(error).startswith(str(path))
        return
    assert isinstance(snap, Snapshot)
    assert snap.status in ("running", "finished", "failed", "crashed", "stalled")
    assert all(len(record.values) == reader.layout.history_fields for record in history.records)
