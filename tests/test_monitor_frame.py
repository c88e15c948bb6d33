"""A pixel run's latest frame (format 1.2's frame region): written by the trainer, read whole
by the reader, shown by `operant monitor` (--once, --json, the Textual view), skipped by
files and readers that predate it."""

import asyncio
import base64
import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import numpy as np
import pytest
from monitor_fixtures import FakeSource, make_view

from operant.cext.metrics import MetricsWriter
from operant.monitor import cli
from operant.monitor.app import MonitorApp
from operant.monitor.frame_view import FrameView, frame_text
from operant.shared import frame as frames
from operant.shared import metrics_layout as fmt
from operant.shared.ranks import RunReader
from operant.shared.reader import Frame, MetricsFileError, MetricsReader

WRITER = Path(__file__).with_name("metrics_writer_proc.py")
# What seaborn's color_palette("cubehelix", n) gives, which MinAtar draws with (computed with
# the minatar package's own environment: seaborn 0.13, matplotlib 3.11).
SEABORN_CUBEHELIX = {
    4: ("#163d4e", "#54792f", "#d07e93", "#c1caf3"),
    10: (
        "#19122b",
        "#17344c",
        "#185b48",
        "#3c7632",
        "#7e7a36",
        "#bc7967",
        "#d486af",
        "#caa9e7",
        "#c2d2f3",
        "#d6f0ef",
    ),
}
BREAKOUT = fmt.FrameSpec(
    shape=(4, 10, 10),
    channels=("paddle", "ball", "trail", "brick"),
    colors=frames.frame_palette(4),
)


def frame_schema(frame=BREAKOUT, run_id="pixels"):
    return fmt.make_schema(
        run_id,
        env_id="MinAtar-Breakout-v1",
        counters=["global_step", "updates"],
        gauges=["sps"],
        snapshot=["a"],
        history=["x"],
        frame=frame,
    )


def breakout_frame(seed=0) -> np.ndarray:
    """A plausible Breakout observation: bricks in rows 1-3, a paddle, a ball with a trail."""
    obs = np.zeros((4, 10, 10), dtype=np.uint8)
    rng = np.random.default_rng(seed)
    obs[0, 9, rng.integers(10)] = 1
    row, column = rng.integers(4, 8), rng.integers(10)
    obs[1, row, column] = 1
    obs[2, row - 1, column] = 1
    obs[3, 1:4, :] = rng.integers(0, 2, (3, 10))
    return obs


# --- the palette and the drawing rules -------------------------------------------------------


def test_palette_is_minatars_cubehelix():
    for channels, colors in SEABORN_CUBEHELIX.items():
        assert frames.frame_palette(channels) == colors


def test_cells_show_the_highest_set_channel_as_text_and_half_blocks():
    data = np.zeros((3, 3, 2), dtype=np.uint8)
    data[0, 0, 0] = data[2, 0, 0] = 1  # channel 2 wins over 0
    data[1, 1, 1] = 7  # any non-zero value is set
    data[0, 2, 1] = 1
    grid = frames.cells(data.tobytes(), data.shape)
    assert grid == [[2, -1], [-1, 1], [-1, 0]]
    assert frames.text_rows(grid) == ["2.", ".1", ".0"]
    colors = ("#000001", "#000002", "#000003")
    # Rows 0 and 1 share a cell row; the odd last row's lower half is the background.
    assert frames.half_block_rows(grid, colors) == [
        [("#000003", "#000000"), ("#000000", "#000002")],
        [("#000000", "#000000"), ("#000001", "#000000")],
    ]


# --- the file ------------------------------------------------------------------------------


def test_frame_round_trips_whole_with_its_update(tmp_path):
    path = tmp_path / "metrics.bin"
    with MetricsWriter.create(path, frame_schema()) as writer, MetricsReader(path) as reader:
        assert writer.has_frame
        snapshot = reader.snapshot()
        assert snapshot.format_version == "1.2" and snapshot.frame is None  # none published
        obs = breakout_frame()
        writer.publish_frame(obs.reshape(-1), 3, 3072)
        frame = reader.snapshot().frame
        assert frame == Frame(
            shape=(4, 10, 10),
            dtype="uint8",
            channels=BREAKOUT.channels,
            colors=BREAKOUT.colors,
            env=0,
            updates=3,
            global_step=3072,
            data=obs.tobytes(),
        )
        assert frame.value(0, 9, int(np.argmax(obs[0, 9]))) == 1
        later = breakout_frame(1)
        writer.publish_frame(later.reshape(-1), 4, 4096)
        assert reader.frame().data == later.tobytes() and reader.frame().updates == 4
        with pytest.raises(ValueError, match="takes 400 bytes"):
            writer.publish_frame(np.zeros(399, dtype=np.uint8))
    assert [name for name, _, _ in writer.layout.regions()][-1] == "frame"


def test_an_odd_sized_frame_is_padded_and_read_exactly(tmp_path):
    spec = fmt.FrameSpec(shape=(3, 5, 7), dtype="bool")  # 105 bytes: not whole words
    path = tmp_path / "metrics.bin"
    data = np.random.default_rng(3).integers(0, 2, 105).astype(np.uint8)
    with MetricsWriter.create(path, frame_schema(spec)) as writer:
        writer.publish_frame(data, 1, 10)
    with MetricsReader(path) as reader:
        frame = reader.frame()
    assert frame.data == data.tobytes() and frame.dtype == "bool"
    # No names or colours in the file: unnamed channels in MinAtar's palette.
    assert frame.channels == ("", "", "") and frame.colors == frames.frame_palette(3)


def test_a_torn_frame_is_never_shown(tmp_path):
    """A writer process publishes Seaquest-sized frames as fast as it can, every byte of
    publication i holding i mod 256, while this process reads: every frame read is one whole
    publication, with its own update count and step."""
    path = tmp_path / "metrics.bin"
    writer = subprocess.Popen(
        [sys.executable, str(WRITER), "frame", str(path), "10", "10", "10"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "ready"
        reader = MetricsReader(path)
        reads = torn = distinct = went_back = 0
        last = 0
        deadline = time.monotonic() + 60.0
        while reads < 20_000 or distinct <= 100:
            frame = reader.frame()
            if frame is None:
                continue
            torn += frame.data != bytes([frame.updates & 0xFF]) * 1000
            torn += frame.global_step != 2 * frame.updates
            went_back += frame.updates < last
            distinct += frame.updates != last
            last = frame.updates
            reads += 1
            assert time.monotonic() < deadline, f"{reads} reads, {distinct} distinct"
        assert writer.poll() is None, "the writer stopped before the reads were done"
        print(f"\nframe: {reads} reads, {distinct} distinct, {reader.retries} retries")
        reader.close()
    finally:
        writer.kill()
        writer.wait()
    assert (torn, went_back) == (0, 0)


def test_a_writer_that_died_mid_publish_leaves_no_frame(tmp_path):
    path = tmp_path / "metrics.bin"
    with MetricsWriter.create(path, frame_schema()) as writer:
        writer.publish_frame(breakout_frame().reshape(-1), 1, 1)
        offset = writer.layout.frame_offset
    data = bytearray(path.read_bytes())
    struct.pack_into("<Q", data, offset, 3)  # odd: a write section never finished
    path.write_bytes(bytes(data))
    with MetricsReader(path) as reader:
        assert reader.snapshot().frame is None


def patched(data: bytes, field: str, value) -> bytes:
    buf = bytearray(data)
    struct.pack_into("<" + dict(fmt.HEADER_FIELDS)[field], buf, fmt.HEADER_OFFSETS[field], value)
    return bytes(buf)


def test_files_without_a_frame_read_as_before(tmp_path):
    """A run without images (a 1.2 file with no frame region), and a file of format 1.1 (zeros
    where 1.2 put the frame's header fields): no frame, every other value as written."""
    path = tmp_path / "metrics.bin"
    schema = frame_schema(frame=None)
    with MetricsWriter.create(path, schema) as writer:
        assert not writer.has_frame
        writer.set_counter(schema.slot("global_step"), 77)
        with pytest.raises(ValueError, match="no frame region"):
            writer.publish_frame(np.zeros(400, dtype=np.uint8))
    data = path.read_bytes()
    assert data[168:184] == bytes(16)
    assert b'"frame"' not in data  # the schema blob is the same as 1.1's
    old = tmp_path / "old.bin"
    old.write_bytes(patched(data, "version_minor", 1))
    for name in (path, old):
        with MetricsReader(name) as reader:
            snapshot = reader.snapshot()
        assert snapshot.frame is None and snapshot.counters["global_step"] == 77
    assert snapshot.format_version == "1.1"


def test_a_frame_without_its_region_is_refused(tmp_path):
    path = tmp_path / "metrics.bin"
    with MetricsWriter.create(path, frame_schema()) as writer:
        writer.publish_frame(breakout_frame().reshape(-1), 1, 1)
    data = path.read_bytes()
    bad = tmp_path / "bad.bin"
    bad.write_bytes(patched(patched(data, "frame_offset", 0), "frame_size", 0))
    with pytest.raises(MetricsFileError, match="frame vs. header"):
        MetricsReader(bad)
    bad.write_bytes(patched(data, "frame_size", 0))
    with pytest.raises(MetricsFileError, match="frame region"):
        MetricsReader(bad)
    bad.write_bytes(patched(data, "frame_size", 1 << 20))
    with pytest.raises(MetricsFileError, match="frame region ends past the file"):
        MetricsReader(bad)


class SchemaOf11(msgspec.Struct):
    """The schema as a reader of format 1.1 decodes it: no `frame`."""

    run_id: str
    metrics: list[dict]
    snapshot: list[dict] = []
    history: list[dict] = []


# The header a reader of 1.1 knows: magic through reserved_2 (docs/metrics-file.md of 1.1).
HEADER_11 = struct.Struct("<8sHHIIIQQdQQQIIQIIQIIQIIQIIQIIII")


def read_as_11(path) -> dict:
    """What a reader written to the 1.1 document reads: the header's first 168 bytes, the
    schema (fields it does not know ignored), counters, the snapshot block, the history."""
    data = path.read_bytes()
    fields = HEADER_11.unpack_from(data)
    magic, major, minor, file_size = fields[0], fields[1], fields[2], fields[6]
    schema_offset, schema_length = fields[11], fields[12]
    values_offset, value_stride = fields[14], fields[16]
    snapshot_offset, snapshot_words = fields[17], fields[18]
    history_offset, history_capacity, history_fields, history_stride = fields[26:30]
    assert magic == b"OPERANTM" and major == 1 and file_size <= len(data)
    regions = [
        (values_offset, 0),
        (snapshot_offset, 8 + 8 * snapshot_words),
        (history_offset, history_capacity * history_stride),
    ]
    assert all(offset + size <= file_size for offset, size in regions)
    schema = msgspec.json.decode(
        data[schema_offset : schema_offset + schema_length], type=SchemaOf11
    )
    counters = {
        m["name"]: struct.unpack_from("<Q", data, values_offset + m["slot"] * value_stride)[0]
        for m in schema.metrics
        if m["kind"] == "counter"
    }
    seq, *block = struct.unpack_from(f"<Q{snapshot_words}d", data, snapshot_offset)
    head = struct.unpack_from("<Q", data, fmt.HISTORY_HEAD_OFFSET)[0]
    record = struct.unpack_from(
        f"<Q{history_fields}d",
        data,
        history_offset + ((head - 1) % history_capacity) * history_stride,
    )
    return {
        "version": f"{major}.{minor}",
        "counters": counters,
        "snapshot": dict(zip([f["name"] for f in schema.snapshot], block)),
        "last_record": record[1:],
    }


def test_a_reader_of_format_11_reads_a_12_file_with_a_frame(tmp_path):
    path = tmp_path / "metrics.bin"
    schema = frame_schema()
    with MetricsWriter.create(path, schema) as writer:
        writer.set_counter(schema.slot("global_step"), 3072)
        writer.publish_snapshot(np.array([0.25]))
        writer.append_history(np.array([1.5]))
        writer.publish_frame(breakout_frame().reshape(-1), 3, 3072)
    assert read_as_11(path) == {
        "version": "1.2",
        "counters": {"global_step": 3072, "updates": 0},
        "snapshot": {"a": 0.25},
        "last_record": (1.5,),
    }


# --- a real trainer, and the monitor's commands --------------------------------------------


@pytest.fixture(scope="module")
def pixel_run(tmp_path_factory):
    """A real MinAtar Breakout run of 3 updates through operant-train's main, with env 0's
    observation recorded at every publish (what the trainer wrote), and its env."""
    from operant.trainer.run.main import main
    from operant.trainer.services import telemetry

    root = tmp_path_factory.mktemp("runs")
    published, envs = [], []
    original_publish, original_source = telemetry.Publisher.publish, telemetry.frame_source

    def source(env):
        envs.append(env)
        return original_source(env)

    def publish(self, record):
        original_publish(self, record)
        published.append((record.updates, record.global_step, np.array(envs[0].obs[0])))

    patch = pytest.MonkeyPatch()
    patch.setattr(telemetry, "frame_source", source)
    patch.setattr(telemetry.Publisher, "publish", publish)
    try:
        status = main(
            [
                "--env",
                "MinAtar-Breakout-v1",
                "--total-steps",
                "768",
                "--seed",
                "3",
                "--runs-dir",
                str(root),
                "--run-id",
                "pixels",
                "--quiet",
                "--set",
                "env.num_envs=8",
                "--set",
                "ppo.num_steps=32",
                "--set",
                "ppo.num_minibatches=2",
                "--set",
                "ppo.update_epochs=1",
            ]
        )
    finally:
        patch.undo()
    assert status == 0
    return root, published


def test_a_minatar_run_publishes_env_0s_latest_observation(pixel_run):
    root, published = pixel_run
    assert [(updates, step) for updates, step, _ in published] == [(1, 256), (2, 512), (3, 768)]
    # The frames differ from update to update: the file follows the env.
    assert not np.array_equal(published[0][2], published[-1][2])
    with RunReader(root / "pixels") as reader:
        frame = reader.read().total.frame
    updates, step, obs = published[-1]
    assert (frame.updates, frame.global_step, frame.shape) == (updates, step, (4, 10, 10))
    assert frame.data == obs.tobytes()
    assert frame.channels == ("paddle", "ball", "trail", "brick")
    assert frame.colors == SEABORN_CUBEHELIX[4]


def test_once_and_json_show_the_frame(pixel_run, capsys):
    root, published = pixel_run
    _, _, obs = published[-1]
    assert cli.main(["--runs-dir", str(root), "pixels", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    shown = document["frame"]
    assert base64.b64decode(shown["data"]) == obs.tobytes()
    assert shown["shape"] == [4, 10, 10] and shown["updates"] == 3
    assert shown["channels"] == ["paddle", "ball", "trail", "brick"]
    grid = frames.cells(obs.tobytes(), obs.shape)
    assert shown["cells"] == grid
    assert cli.main(["--runs-dir", str(root), "pixels", "--once"]) == 0
    text = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith("frame   "))
    assert text[start] == "frame   env 0 at update 3 (step 768): 10 x 10, 4 channels"
    assert text[start + 1 : start + 11] == ["  " + row for row in frames.text_rows(grid)]
    assert text[start + 11] == "  . none  0 paddle  1 ball  2 trail  3 brick"


def test_json_of_a_run_without_images_has_a_null_frame(tmp_path, capsys):
    run_dir = tmp_path / "flat"
    run_dir.mkdir()
    with MetricsWriter.create(run_dir / "metrics.bin", frame_schema(frame=None)):
        pass
    assert cli.main(["--runs-dir", str(tmp_path), "flat", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["frame"] is None
    assert cli.main(["--runs-dir", str(tmp_path), "flat", "--once"]) == 0
    assert "frame " not in capsys.readouterr().out


def test_only_image_observations_publish_a_frame():
    from operant.envs import make_env
    from operant.trainer.services.telemetry import frame_source

    breakout = make_env("MinAtar-Breakout-v1", 2, impl="native", copy=False)
    stacked = make_env("MinAtar-Breakout-v1", 2, impl="native", copy=False, frame_stack=3)
    cartpole = make_env("CartPole-v1", 2, impl="native", copy=False)
    grid = make_env("Grid-v0", 2, impl="native", copy=False)
    try:
        for env in (breakout, stacked):
            env.reset(seed=1)
            source = frame_source(env)
            assert source.spec.shape == (4, 10, 10)
            assert source.spec.channels == ("paddle", "ball", "trail", "brick")
            # The newest frame (the last 4 channels of a stack), a view of the env's memory.
            assert np.array_equal(source.frame(), env.obs[0, -4:].reshape(-1))
            assert np.shares_memory(source.frame(), env.obs)
        assert frame_source(cartpole) is None and frame_source(grid) is None
    finally:
        for env in (breakout, stacked, cartpole, grid):
            env.close()


# --- the Textual monitor -------------------------------------------------------------------


def test_the_monitor_draws_the_frame_in_half_blocks():
    obs = breakout_frame()
    frame = Frame(
        shape=(4, 10, 10),
        dtype="uint8",
        channels=BREAKOUT.channels,
        colors=BREAKOUT.colors,
        env=0,
        updates=3,
        global_step=3072,
        data=obs.tobytes(),
    )

    async def drive():
        app = MonitorApp(FakeSource(make_view(frame=frame)))
        async with app.run_test(size=(160, 48)) as pilot:
            view = app.main.query_one("#frame", FrameView)
            while app.view is None:
                await pilot.pause(0.02)
            await pilot.pause()
            assert view.display and view.frame == frame
            assert view.border_subtitle == "update 3" and view.border_title == "env 0"
            # Inside its border: 10 columns by 5 rows of half blocks, then the legend.
            region = view.content_region
            assert region.width >= 10 and region.height >= 5 + 4
            return [
                app.screen.get_style_at(region.x + column, region.y + row)
                for row in range(5)
                for column in range(10)
            ]

    styles = asyncio.run(drive())  # each cell's style on screen, row by row
    grid = frames.cells(obs.tobytes(), obs.shape)
    expected = frames.half_block_rows(grid, BREAKOUT.colors)
    drawn = [(style.color.triplet.hex, style.bgcolor.triplet.hex) for style in styles]
    assert drawn == [cell for row in expected for cell in row]


def test_frame_text_and_no_frame_hides_the_view():
    obs = breakout_frame()
    frame = Frame(
        shape=(4, 10, 10),
        dtype="uint8",
        channels=BREAKOUT.channels,
        colors=BREAKOUT.colors,
        env=0,
        updates=1,
        global_step=1,
        data=obs.tobytes(),
    )
    text = frame_text(frame, legend_width=16)
    lines = text.plain.splitlines()
    assert lines[:5] == [frames.UPPER_HALF_BLOCK * 10] * 5
    assert lines[5:] == ["■ paddle", "■ ball", "■ trail", "■ brick"]

    async def drive():
        app = MonitorApp(FakeSource(make_view()))
        async with app.run_test(size=(120, 40)) as pilot:
            while app.view is None:
                await pilot.pause(0.02)
            return app.main.query_one("#frame", FrameView).display

    assert asyncio.run(drive()) is False


def test_a_torch_env_publishes_its_frame_from_the_tensor():
    """A device-resident family's buffer is a torch tensor: on the CPU the frame is a view of
    its memory; elsewhere (a GPU) row 0 is copied to the host at each publish."""
    import types

    import torch

    from operant.envs.contract import ObsSpec
    from operant.trainer.services.telemetry import frame_source

    obs = torch.zeros((3, 2, 4, 5), dtype=torch.bool)
    env = types.SimpleNamespace(obs_spec=ObsSpec((2, 4, 5), np.dtype(np.bool_)), obs=obs)
    source = frame_source(env)
    assert source.spec.dtype == "bool" and source.spec.channels == ()
    obs[0, 1, 3, 4] = True
    assert source.frame()[1 * 20 + 3 * 5 + 4] == 1 and source.frame().sum() == 1

    class DeviceTensor:
        """A stand-in for a tensor on another device: only `.to("cpu")` reads it."""

        device = types.SimpleNamespace(type="cuda")

        def __getitem__(self, index):
            return types.SimpleNamespace(detach=lambda: obs[index])

    env.obs = DeviceTensor()
    source = frame_source(env)
    obs[0, 0, 0, 0] = True
    assert source.frame()[0] == 1 and source.frame().sum() == 2
