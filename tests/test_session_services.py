"""The session's composition on its own, with stand-in services and trainer: the order in which
hooks are called, what each outcome calls and exits with, and which services run on which rank."""

from __future__ import annotations

import pytest

from operant.trainer.run.console import Console
from operant.trainer.run.session import Session
from operant.trainer.run.signals import StopSignals
from operant.trainer.services import hooks as services
from operant.trainer.services.best import TrackBest
from operant.trainer.services.protocol import Outcome, Rank, Role, Service


class Recorder(Service):
    def __init__(self, name: str, calls: list, stop_at_boundary: int | None = None):
        self.name, self.calls, self.stop_at_boundary = name, calls, stop_at_boundary
        self.boundaries = 0

    def on_start(self):
        self.calls.append((self.name, "start"))

    def on_update(self, record):
        self.calls.append((self.name, "update", record["update"]))

    def on_boundary(self):
        self.boundaries += 1
        self.calls.append((self.name, "boundary"))
        return self.boundaries == self.stop_at_boundary

    def on_stopping(self, outcome):
        self.calls.append((self.name, "stopping", outcome.kind))

    def on_stop(self, outcome):
        self.calls.append((self.name, "stop", outcome.kind))

    def close(self):
        self.calls.append((self.name, "close"))


class Silent(Service):
    """Overrides nothing: the session calls none of its hooks."""


class FakeTrainer:
    def __init__(self, updates: int = 2, error: BaseException | None = None):
        self.updates, self.error, self.log = updates, error, None
        self.finished = False
        """Trained the whole budget (a stop signal during the last update stops nothing)."""

    def run(self, should_stop):
        record = {}
        for update in range(1, self.updates + 1):
            if should_stop():
                break
            record = {"update": update}
            self.log(record)
        else:
            self.finished = True
        if self.error is not None:
            raise self.error
        return record


def test_hooks_run_in_the_services_order_and_a_finished_run_exits_0():
    calls: list = []
    session = Session(
        FakeTrainer(), [Recorder("a", calls), Silent(), Recorder("b", calls)], StopSignals()
    )
    assert session.run() == 0
    assert calls == [
        ("a", "start"),
        ("b", "start"),
        ("a", "boundary"),
        ("b", "boundary"),
        ("a", "update", 1),
        ("b", "update", 1),
        ("a", "boundary"),
        ("b", "boundary"),
        ("a", "update", 2),
        ("b", "update", 2),
        ("a", "stopping", "finished"),
        ("b", "stopping", "finished"),
        ("a", "stop", "finished"),
        ("b", "stop", "finished"),
        ("a", "close"),
        ("b", "close"),
    ]


def test_the_first_service_that_stops_at_a_boundary_ends_the_round():
    calls: list = []
    session = Session(
        FakeTrainer(updates=5),
        [Recorder("a", calls, stop_at_boundary=2), Recorder("b", calls)],
        StopSignals(),
    )
    assert session.run() == 0
    boundaries = [call for call in calls if call[1] == "boundary"]
    assert boundaries == [("a", "boundary"), ("b", "boundary"), ("a", "boundary")]
    assert [call[2] for call in calls if call[1] == "update"] == [1, 1]


@pytest.mark.parametrize(
    "error, kind, status",
    [
        (FloatingPointError("non-finite values in parameter x"), "failed", 1),
        (KeyboardInterrupt(), "interrupted", 130),
    ],
)
def test_an_error_skips_on_stopping_and_ends_with_its_status(error, kind, status):
    calls: list = []
    signals = StopSignals()
    session = Session(FakeTrainer(error=error), [Recorder("a", calls)], signals)
    assert session.run() == status
    assert calls[-2:] == [("a", "stop", kind), ("a", "close")]
    assert not [call for call in calls if call[1] == "stopping"]
    # its line is out: torchrun's SIGTERM to a failed rank is not announced as a stop
    assert not signals.announce


def test_an_unexpected_error_is_announced_closed_and_raised():
    calls: list = []
    session = Session(
        FakeTrainer(error=OSError("disk full")), [Recorder("a", calls)], StopSignals()
    )
    with pytest.raises(OSError, match="disk full"):
        session.run()
    assert calls[-2:] == [("a", "stop", "crashed"), ("a", "close")]


def test_outcomes_are_named_by_what_ended_the_run():
    assert Outcome().kind == "finished"
    assert Outcome(stopped_by="SIGTERM").kind == "stopped"
    assert Outcome(stopped_by="SIGTERM", error=KeyboardInterrupt()).kind == "interrupted"
    assert Outcome(error=ValueError()).kind == "crashed"
    assert Outcome(error=OSError(28, "No space left on device")).kind == "no_space"
    assert (
        Outcome(stopped_by="SIGTERM", error=OSError(122, "Disk quota exceeded")).kind == "no_space"
    )


def test_rank_zero_runs_every_service_other_ranks_only_the_per_rank_ones():
    every = {services.StopOnSignal, services.PublishMetrics}
    rank_zero = {
        services.ContinueRecords,
        services.CutRecords,
        services.RunRecord,
        services.UpdateLatest,
        services.WriteProgress,
        services.NotifySystemd,
        services.Checkpoints,
        services.SaveModel,
        services.ReleaseRunLock,
        Console,
        TrackBest,
    }
    assert {cls for cls in every | rank_zero if cls.role is Role.EVERY_RANK} == every
    assert all(Rank().runs(cls.role) for cls in every | rank_zero)
    assert {cls for cls in every | rank_zero if Rank(rank=1, world_size=2).runs(cls.role)} == every


def test_each_rank_publishes_its_own_metrics_file(tmp_path):
    """PublishMetrics with a Rank writes metrics/rank-NNNNN.bin saying which rank it is;
    without one, metrics.bin as a single process always did."""
    import socket
    from types import SimpleNamespace

    from operant.shared.reader import MetricsReader

    config = SimpleNamespace(
        env=SimpleNamespace(id="CartPole-v1"),
        train=SimpleNamespace(device="cpu"),
    )
    plan = SimpleNamespace(run_id="cartpole-ranks", config=config)
    # The budget the metrics file shows is the one trained (the plan's Derived), not the config's.
    trainer = SimpleNamespace(
        impl="native",
        env_phases=lambda: (),
        elapsed_offset_s=0.0,
        update=0,
        derived=SimpleNamespace(world_size=1, total_steps=1024),
    )
    history = SimpleNamespace(records=[])
    found = []
    for rank, name in (
        (Rank(rank=1, world_size=2), "metrics/rank-00001.bin"),
        (None, "metrics.bin"),
    ):
        service = services.PublishMetrics(plan, tmp_path, trainer, history, rank=rank)
        service.on_start()
        service.on_stop(Outcome())
        service.close()
        with MetricsReader(tmp_path / name) as reader:
            schema = reader.schema
            found.append((schema.run_id, schema.rank, schema.world_size, schema.node))
            assert reader.snapshot().status == "finished"
            assert reader.snapshot().gauges["total_steps"] == 1024
    assert found == [
        ("cartpole-ranks", 1, 2, socket.gethostname()),
        ("cartpole-ranks", 0, 1, ""),
    ]
    # Resumed at update 7, rank 1 replays no records (rank 0 does) but numbers its next
    # record 7, as every file of the run does, and its file appears with its own counters
    # (half the run's 14,000 steps), not 0.
    trainer.update, trainer.global_step, trainer.episodes = 7, 14_000, 300
    trainer.derived = SimpleNamespace(world_size=2, total_steps=1024)
    service = services.PublishMetrics(plan, tmp_path, trainer, history, rank=Rank(1, 2))
    service.on_start()
    with MetricsReader(tmp_path / "metrics/rank-00001.bin") as reader:
        snapshot = reader.snapshot()
        assert snapshot.history_head == 7
        assert snapshot.counters == {
            "updates": 7,
            "global_step": 7_000,
            "episodes": 300,
            # What this process did: nothing yet.
            "process_updates": 0,
            "process_steps": 0,
            "process_episodes": 0,
            # No earlier file at this path: nothing trained before.
            "trained_steps": 0,
        }
    service.close()
