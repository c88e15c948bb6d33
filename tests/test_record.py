"""The update record (operant.shared.record): progress.jsonl's exact line format, the names
the metrics file publishes (readers and dashboards depend on them), and that the monitor can
import it without torch."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from operant.shared import record
from operant.shared.record import (
    PHASES,
    RECORD_METRICS,
    UpdateRecord,
    decode_progress_line,
    encode_progress_line,
)

# progress.jsonl's keys, in order, as every earlier version wrote them.
PROGRESS_KEYS = [
    "update",
    "global_step",
    "episodes",
    "elapsed_s",
    "sps",
    "sps_mean",
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_length_mean",
    "episodes_this_update",
    "learning_rate",
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_fraction",
    "explained_variance",
    "epochs",
    "phase_s",
]


def make_record(**changes) -> UpdateRecord:
    values = dict(
        updates=3,
        global_step=6144,
        episodes=198,
        elapsed_s=0.2179,
        sps=36520.6,
        sps_mean=28202.6,
        episode_return_mean=22.34,
        episode_return_min=11.0,
        episode_return_max=45.0,
        episode_length_mean=23.388059701492537,
        episodes_this_update=67,
        learning_rate=0.0024000000000000002,
        policy_loss=-0.0028263970743864775,
        value_loss=17.12643814086914,
        entropy=0.6459307074546814,
        approx_kl=None,
        clip_fraction=0.06201171875,
        explained_variance=1e-05,
        epochs=2.0,
        phase_s={
            "env": 3.2e-05,
            "forward": 0.017418,
            "store": 0.000223,
            "gae": 5e-05,
            "update": 0.038179,
            "publish": 1e-06,
        },
    )
    return UpdateRecord(**{**values, **changes})


def test_progress_line_is_what_json_dumps_always_wrote():
    line = encode_progress_line(make_record())
    assert line == (
        '{"update":3,"global_step":6144,"episodes":198,"elapsed_s":0.2179,"sps":36520.6,'
        '"sps_mean":28202.6,"episode_return_mean":22.34,"episode_return_min":11.0,'
        '"episode_return_max":45.0,"episode_length_mean":23.388059701492537,'
        '"episodes_this_update":67,"learning_rate":0.0024000000000000002,'
        '"policy_loss":-0.0028263970743864775,"value_loss":17.12643814086914,'
        '"entropy":0.6459307074546814,"approx_kl":null,"clip_fraction":0.06201171875,'
        '"explained_variance":1e-05,"epochs":2.0,"phase_s":{"env":3.2e-05,"forward":0.017418,'
        '"store":0.000223,"gae":5e-05,"update":0.038179,"publish":1e-06}}'
    )
    assert list(json.loads(line)) == PROGRESS_KEYS


def test_solved_appears_only_when_true_and_lines_read_back():
    solved = make_record(solved=True)
    line = encode_progress_line(solved)
    assert list(json.loads(line)) == [*PROGRESS_KEYS, "solved"] and line.endswith(',"solved":true}')
    assert decode_progress_line(line) == solved
    assert decode_progress_line(encode_progress_line(make_record())).solved is False
    with pytest.raises(msgspec.DecodeError):
        decode_progress_line('{"update":1}')  # a line cut short by a crash is not a record


def test_every_field_is_declared_once_with_its_name():
    assert [declared.name for declared in RECORD_METRICS] == list(UpdateRecord.__struct_fields__)
    for declared in RECORD_METRICS:
        assert declared.kind in (record.COUNTER, record.GAUGE) and declared.description
        assert declared.label
    assert record.label("episode_return_mean") == "episode return"
    assert record.label("sps") == "steps/s"
    assert record.label("some_new_metric") == "some new metric"


def test_phase_names_round_trip():
    assert [declared.name for declared in record.PHASE_METRICS] == [
        "phase_env_s",
        "phase_forward_s",
        "phase_store_s",
        "phase_gae_s",
        "phase_update_s",
        "phase_publish_s",
    ]
    assert [record.phase_of(declared.name) for declared in record.PHASE_METRICS] == list(PHASES)
    assert record.phase_of("phase_render_s") == "render"
    assert record.phase_of("phase_s") is None and record.phase_of("sps") is None


def test_the_last_update_time_is_this_processs_own(tmp_path):
    """A resumed run's replayed records are not updates of its new trainer: until that one
    finishes an update, the file says none (NaN), and readers count from its start."""
    import math
    import time

    from operant.shared.reader import MetricsReader
    from operant.trainer.services.telemetry import Publisher

    replayed = [make_record(updates=1, global_step=2048), make_record(updates=2)]
    publisher = Publisher(
        tmp_path / "metrics.bin", "run", "CartPole-v1", "native", "cpu", 10_000,
        prepare=lambda first: first.resume(replayed, {"updates": 2, "global_step": 4096,
                                                      "episodes": 9}),
    )  # fmt: skip
    try:
        with MetricsReader(tmp_path / "metrics.bin") as reader:
            assert reader.history().head == 2
            assert math.isnan(reader.snapshot().gauges["last_update_unix_s"])
            before = time.time()
            publisher.publish(make_record(updates=3))
            assert before <= reader.snapshot().gauges["last_update_unix_s"] <= time.time()
    finally:
        publisher.close()


def test_metrics_file_keeps_the_names_readers_use():
    from operant.trainer.services import telemetry

    schema = telemetry.build_schema("run", "CartPole-v1")
    kinds: dict[str, set[str]] = {}
    for metric in schema.metrics:
        kinds.setdefault(metric.kind, set()).add(metric.name)
    assert kinds == {
        "counter": {
            "global_step",
            "episodes",
            "updates",
            "process_steps",
            "process_episodes",
            "process_updates",
            "trained_steps",
        },
        "gauge": {
            "sps",
            "sps_mean",
            "elapsed_s",
            "total_steps",
            "episode_return_mean",
            "episode_return_min",
            "episode_return_max",
            "episode_length_mean",
            "policy_loss",
            "value_loss",
            "entropy",
            "approx_kl",
            "clip_fraction",
            "explained_variance",
            "learning_rate",
            "cpu_percent",
            "rss_bytes",
            "elapsed_before_s",
            "last_update_unix_s",
            "env_episodes",
            "env_episode_return_mean",
        },
        "text": {"env_id", "env_impl", "device", "warning"},
    }
    units = {metric.name: metric.unit for metric in schema.metrics}
    assert units["sps"] == "steps/s" and units["rss_bytes"] == "bytes"
    assert units["entropy"] == "nats"
    phases = [f"phase_{phase}_s" for phase in PHASES]
    assert [field.name for field in schema.snapshot] == phases
    assert {field.name for field in schema.history} == {
        "global_step",
        "elapsed_s",
        "sps",
        "episode_return_mean",
        "episode_length_mean",
        "policy_loss",
        "value_loss",
        "entropy",
        "approx_kl",
        "clip_fraction",
        "explained_variance",
        "learning_rate",
        "env_episode_return_mean",
        *phases,
    }


def test_record_module_imports_without_torch():
    code = (
        "import sys, operant.shared.record, operant.trainer.services.telemetry; "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_progress_tail_reads_records_up_to_a_damaged_line(tmp_path):
    from operant.trainer.services.progress import progress_tail

    path = tmp_path / "progress.jsonl"
    lines = [encode_progress_line(make_record(updates=n)) for n in (1, 2, 3, 4)]
    path.write_text("\n".join([lines[0], "not json", *lines[1:]]) + "\n")
    tail = progress_tail(path, 10)
    assert [item.updates for item in tail] == [2, 3, 4]
    assert tail[-1] == make_record(updates=4)


def test_a_resume_reads_the_records_it_keeps_without_cutting_the_log(tmp_path):
    # A resume reads its history before it cuts progress.jsonl (the cut waits until the start
    # can no longer fail): the records up to the checkpoint's length, a last line cut short
    # by a crash left out, and the file untouched.
    from operant.trainer.services.progress import kept_length, progress_tail

    path = tmp_path / "progress.jsonl"
    lines = [encode_progress_line(make_record(updates=n)) for n in (1, 2, 3, 4)]
    content = ("\n".join(lines) + "\n").encode()
    path.write_bytes(content)
    at_two = len(lines[0]) + len(lines[1]) + 2
    assert kept_length(path, at_two) == at_two
    assert [item.updates for item in progress_tail(path, 10, end=at_two)] == [1, 2]
    path.write_bytes(content[:-5])  # the end lost with the power; the checkpoint is update 4
    kept = kept_length(path, len(content))
    assert kept == len(content) - len(lines[3]) - 1
    assert [item.updates for item in progress_tail(path, 10, end=kept)] == [1, 2, 3]
    assert path.read_bytes() == content[:-5]


def test_process_counters_start_at_zero_with_the_process(tmp_path):
    """A resumed run's position (global_step, episodes, updates) continues from its
    checkpoint; what this process did (process_*) starts at 0, so a Prometheus counter over
    it counts what was trained, where the position steps back after a kill."""
    from operant.shared.reader import MetricsReader
    from operant.trainer.services.telemetry import Publisher

    replayed = [make_record(updates=1, global_step=2048), make_record(updates=2)]
    publisher = Publisher(
        tmp_path / "metrics.bin", "run", "CartPole-v1", "native", "cpu", 10_000,
        prepare=lambda first: first.resume(replayed, {"updates": 2, "global_step": 4096,
                                                      "episodes": 9}),
    )  # fmt: skip
    try:
        with MetricsReader(tmp_path / "metrics.bin") as reader:
            counters = reader.snapshot().counters
            assert (counters["global_step"], counters["process_steps"]) == (4096, 0)
            publisher.publish(make_record(updates=3, global_step=4352, episodes=20))
            counters = reader.snapshot().counters
            assert counters["global_step"] == 4352 and counters["process_steps"] == 256
            assert (counters["process_episodes"], counters["process_updates"]) == (11, 1)
    finally:
        publisher.close()


def test_trained_steps_continue_from_the_file_a_resume_replaces(tmp_path):
    """trained_steps counts every process's steps: a resumed process starts from the count
    its predecessor last published (read from the file it replaces), so the counter never
    steps back, however fast a restart comes; an unreadable predecessor starts it at 0."""
    from operant.shared.reader import MetricsReader
    from operant.trainer.services.telemetry import Publisher

    path = tmp_path / "metrics.bin"

    def publisher(resume_at: int) -> Publisher:
        counters = {"updates": resume_at, "global_step": 256 * resume_at, "episodes": 0}
        return Publisher(
            path, "run", "CartPole-v1", "native", "cpu", 10_000,
            prepare=lambda first: first.set_counters(counters) if resume_at else None,
        )  # fmt: skip

    def trained() -> tuple[int, int]:
        with MetricsReader(path) as reader:
            counters = reader.snapshot().counters
        return counters["trained_steps"], counters["process_steps"]

    first = publisher(0)
    for update in (1, 2, 3):  # killed after update 3; its checkpoint was update 2
        first.publish(make_record(updates=update, global_step=256 * update))
    first.close()
    assert trained() == (768, 768)
    second = publisher(2)
    assert trained() == (768, 0)  # before it trained: its predecessor's count, not 0
    second.publish(make_record(updates=3, global_step=768))  # update 3 redone
    second.close()
    assert trained() == (1024, 256)
    path.write_bytes(b"\0" * 4096)  # a lost predecessor: the counter starts again
    publisher(3).close()
    assert trained() == (0, 0)


REFUSED_WRITE = """
import io, resource, signal, sys
from pathlib import Path
from operant.trainer.services.progress import ProgressLog
from test_record import make_record

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead
path = Path(sys.argv[1])
log = ProgressLog(path, io.StringIO(), "plain", 1, 10, quiet=True)
log(make_record(updates=1))
resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + 100, resource.RLIM_INFINITY))
try:
    log(make_record(updates=2))  # the disk takes 100 bytes of it
except OSError as error:
    print(error.errno)
"""


def test_a_progress_line_the_disk_refuses_part_of_is_cut_off(tmp_path):
    """A full disk that took part of a line (here a file size limit: the write stops short,
    then fails) leaves progress.jsonl whole lines: the torn part is cut before the error goes
    on, so readers never meet it while the run is down."""
    from operant.trainer.services.progress import progress_tail

    path = tmp_path / "progress.jsonl"
    tests = Path(__file__).resolve().parent
    done = subprocess.run(
        [sys.executable, "-c", REFUSED_WRITE, str(path)],
        capture_output=True, text=True, cwd=tests, timeout=60,
        env={**os.environ, "PYTHONPATH": str(tests)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(errno.EFBIG)]
    content = path.read_bytes()
    assert content.endswith(b"\n") and content.count(b"\n") == 1
    assert [record.updates for record in progress_tail(path, 10)] == [1]
