"""The shadow contract (issue 38): what the training loop reads of an env beyond BatchEnv is a
Protocol declared in envs/contract.py and tested with isinstance, never an attribute probed by
name. These tests read trainer/'s source: no getattr/hasattr on an env, and every isinstance
on an env names a runtime-checkable Protocol of operant.envs.contract."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from operant.envs import contract

REPO = Path(__file__).resolve().parent.parent

ENV = r"[\w.]*\benv\b"
"""An expression that ends in a name `env`: `env`, `self.env`, `self.trainer.env`, `env.env`."""

PROBE = re.compile(rf"\b(getattr|hasattr)\(\s*{ENV}\s*,")
CHECK = re.compile(rf"\bisinstance\(\s*{ENV}\s*,\s*(\w+)\s*\)")

USED = {
    "BindsSlots",
    "StepsInHalves",
    "DeclaresTimeLimit",
    "NamesChannels",
    "StacksFrames",
    "ProfilesStep",
    "ShadowChecked",
    "ComparesEncoders",
}
"""The capabilities the trainer reads today (trainer/loop/collect.py, trainer/loop/train.py,
trainer/services/telemetry.py, trainer/eval/evaluate.py, trainer/bench/)."""


def _trainer_lines() -> list[tuple[str, str]]:
    return [
        (f"{path.relative_to(REPO)}:{number}", line)
        for path in sorted((REPO / "trainer").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
    ]


def test_no_code_under_trainer_probes_an_env_attribute_by_name():
    probes = [where for where, line in _trainer_lines() if PROBE.search(line)]
    assert probes == [], probes


@pytest.mark.parametrize(
    "line",
    [
        'x = getattr(env, "halves", None)',
        "if hasattr(self.env, 'channels'):",
        'callable(getattr(self.trainer.env, "bind_packed", None))',
    ],
)
def test_the_probe_pattern_finds_what_it_looks_for(line):
    assert PROBE.search(line)


def test_every_capability_the_trainer_checks_is_a_protocol_of_the_contract():
    checked = {match.group(1) for _, line in _trainer_lines() for match in CHECK.finditer(line)}
    assert checked == USED, sorted(checked ^ USED)
    for name in sorted(checked):
        protocol = getattr(contract, name, None)
        assert protocol is not None, f"{name} is not declared in envs/contract.py"
        assert getattr(protocol, "_is_protocol", False), f"{name} is not a Protocol"
        assert getattr(protocol, "_is_runtime_protocol", False), f"{name}: @runtime_checkable"


def test_a_layer_does_not_forward_what_drives_the_env():
    from operant.envs import make_env
    from operant.envs.face.forwarding import EnvLayer

    class Bare(EnvLayer):
        def __init__(self, env):
            self._layer_over(env)

    env = make_env("CartPole-v1", 4, copy=False, overlap=True)
    try:
        assert isinstance(env, contract.StepsInHalves) and isinstance(env, contract.BindsSlots)
        layer = Bare(env)
        assert not isinstance(layer, contract.StepsInHalves)
        assert not isinstance(layer, contract.BindsSlots)
        assert layer.time_limit == env.time_limit  # a family's extras are forwarded
        for name in contract.DRIVING:
            assert not hasattr(layer, name), name
    finally:
        env.close()


def test_the_overlapped_collector_refuses_an_env_that_does_not_step_in_halves():
    from operant.envs import make_env
    from operant.trainer.loop.collect import OverlappedCollector

    env = make_env("CartPole-v1", 4, copy=False)
    try:
        with pytest.raises(TypeError, match="StepsInHalves"):
            OverlappedCollector(env)
    finally:
        env.close()
