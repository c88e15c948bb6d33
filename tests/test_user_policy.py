"""A user's own network as `policy.kind = "module:Name"` (operant.trainer.policies.user): a
CleanRL agent unchanged (examples/cleanrl_ppo.py's), a HeadsPolicy subclass, a continuous
agent, exact resume, and every way a network of the user's is refused. Trainers are real
`operant-train` processes started in the folder that holds the module, as a user starts them
(the module is found there, not on the installed sys.path)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from user_runs import command

from operant.envs.contract import ActSpec, ObsSpec
from operant.trainer.config import ConfigError, load_config
from operant.trainer.policies.cleanrl import CleanRLPolicy
from operant.trainer.policies.user import build_user_policy, spaces_of

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SMALL = ["--set", "env.num_envs=8", "--set", "ppo.num_steps=32", "--set", "ppo.num_minibatches=2"]

CONTINUOUS = """
import numpy as np
import torch
from torch import nn
from torch.distributions.normal import Normal


class Agent(nn.Module):  # cleanrl/ppo_continuous_action.py's shape
    def __init__(self, envs):
        super().__init__()
        n = int(np.prod(envs.single_observation_space.shape))
        a = int(np.prod(envs.single_action_space.shape))
        self.critic = nn.Sequential(nn.Linear(n, 64), nn.Tanh(), nn.Linear(64, 1))
        self.actor_mean = nn.Sequential(nn.Linear(n, 64), nn.Tanh(), nn.Linear(64, a))
        self.actor_logstd = nn.Parameter(torch.zeros(1, a))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        mean = self.actor_mean(x)
        probs = Normal(mean, torch.exp(self.actor_logstd.expand_as(mean)))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)
"""

HEADS = """
from torch import nn

from operant.trainer.policies.registry import HeadsPolicy


class Net(HeadsPolicy):
    def __init__(self, observation_space, action_space):
        super().__init__()
        self.num_actions = int(action_space.n)
        self.body = nn.Sequential(nn.Linear(observation_space.shape[0], 64), nn.Tanh())
        self.logits = nn.Linear(64, self.num_actions)
        self.critic = nn.Linear(64, 1)

    def heads(self, obs):
        hidden = self.body(obs)
        return self.logits(hidden), self.critic(hidden).squeeze(-1)
"""

BROKEN = """
import torch
from torch import nn

from agents import Agent


class ShortValues(Agent):
    def get_value(self, x):
        return self.critic(x)[:1]


class Frozen(Agent):
    def __init__(self, envs):
        super().__init__(envs)
        for parameter in self.parameters():
            parameter.requires_grad_(False)


class Plain(nn.Module):
    def __init__(self, observation_space, action_space):
        super().__init__()
        self.layer = nn.Linear(4, 2)


def three(a, b, c):
    return None


def not_a_module(observation_space, action_space):
    return "a string"


def raises(envs):
    raise RuntimeError("no GPU here")


class Double(Agent):
    def __init__(self, envs):
        super().__init__(envs)
        self.double()


class OutOfRange(Agent):  # three logits for Discrete(2)
    def __init__(self, envs):
        super().__init__(envs)
        self.actor[-1] = nn.Linear(64, 3)


class Hidden(Agent):
    def __init__(self, envs, hidden):
        super().__init__(envs)


class Normed(Agent):
    # BatchNorm in front of the critic, Dropout in front of the actor

    def __init__(self, envs):
        super().__init__(envs)
        self.norm = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)

    def get_value(self, x):
        return super().get_value(self.norm(x))

    def get_action_and_value(self, x, action=None):
        _, logprob, entropy, value = super().get_action_and_value(self.drop(x), action)
        sampled = super().get_action_and_value(self.drop(x), action)[0]
        return sampled, logprob, entropy, self.get_value(x)


class NaNLater(Agent):
    # sound for its first 200 calls (some updates), then NaN logits (a diverged network's)

    calls = 0

    def get_action_and_value(self, x, action=None):
        NaNLater.calls += 1
        if NaNLater.calls > 200:
            x = x * float("nan")
        return super().get_action_and_value(x, action)
"""


def train(folder: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(["operant-train", *args]),
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def evaluate(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(["operant", "eval", *args]), cwd=folder, capture_output=True, text=True, timeout=240
    )


def trained_beside(
    folder: Path, module: str, source: str, env: str, kind: str, run_id: str, *args: str
) -> subprocess.CompletedProcess:
    """operant-train of a network of the user's, `source` written as `module`.py in `folder`
    and the trainer started there (run `run_id` under folder/runs); it must finish."""
    (folder / f"{module}.py").write_text(textwrap.dedent(source))
    done = train(
        folder, "--env", env, "--set", f"policy.kind={kind}", "--runs-dir", "runs",
        "--run-id", run_id, *args,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def test_cleanrl_example_agent_trains_unchanged_evaluates_and_loads_back(tmp_path):
    runs = tmp_path / "runs"
    done = train(
        EXAMPLES, "--env", "CartPole-v1", "--set", "policy.kind=cleanrl_ppo:Agent",
        "--runs-dir", str(runs), "--run-id", "agent",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "128 envs, cleanrl_ppo:Agent policy (9.2K parameters)" in done.stdout + done.stderr
    assert "solved at" in done.stdout, done.stdout
    last = json.loads((runs / "agent" / "progress.jsonl").read_text().splitlines()[-1])
    assert last["episode_return_mean"] >= 475

    played = evaluate(EXAMPLES, str(runs / "agent"), "--episodes", "16", "--json")
    assert played.returncode == 0, played.stderr
    result = json.loads(played.stdout)
    assert result["greedy"] and result["return_mean"] >= 475

    # The checkpoint's policy loads into the user's own class under its own names.
    sys.path.insert(0, str(EXAMPLES))
    try:
        from cleanrl_ppo import Agent
    finally:
        sys.path.remove(str(EXAMPLES))
    envs = gym.make_vec("CartPole-v1", num_envs=1)
    agent = Agent(envs)
    envs.close()
    weights = torch.load(runs / "agent" / "model.pt", weights_only=False)["policy"]
    assert set(weights) == set(agent.state_dict())
    agent.load_state_dict(weights)
    # Pole leaning right and falling right: push right (action 1), as a solved policy does.
    obs = torch.tensor([[0.0, 0.0, 0.1, 0.5]])
    logits = agent.actor(obs)
    assert int(logits.argmax()) == 1


def test_the_cleanrl_agent_reads_minatars_byte_frames_as_floats(tmp_path):
    # (CleanRL's loops hand the agent torch.Tensor(obs), float32; the rollout keeps bytes,
    # and a Linear layer refuses them)
    done = train(
        EXAMPLES, "--env", "MinAtar-Breakout-v1", "--set", "policy.kind=cleanrl_ppo:Agent",
        *SMALL, "--runs-dir", str(tmp_path), "--run-id", "frames", "--total-steps", "4096",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "cleanrl_ppo:Agent policy (" in done.stdout
    records = [json.loads(line) for line in (tmp_path / "frames/progress.jsonl").open()]
    assert len(records) == 16 and records[-1]["global_step"] == 4096


def test_eval_and_resume_elsewhere_name_the_folder_the_run_started_in(tmp_path):
    # (a run trained beside its module and evaluated from another folder said only that
    # no module named 'mynets' was on sys.path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "mynets.py").write_text(textwrap.dedent(HEADS))
    (tmp_path / "mine" / "myenvs.py").write_text(
        "import gymnasium\n"
        "gymnasium.register('Mine-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv',"
        " max_episode_steps=50)\n"
    )
    runs = str(tmp_path / "runs")
    for env, run in (("CartPole-v1", "policy"), ("myenvs:Mine-v0", "env")):
        done = train(
            tmp_path / "mine", "--env", env, "--set", "policy.kind=mynets:Net", *SMALL,
            "--runs-dir", runs, "--run-id", run, "--total-steps", "512",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    started = f"(the run was started in {tmp_path / 'mine'}: run this there)"
    for run, missing in (("policy", "no module named 'mynets'"), ("env", "'myenvs'")):
        played = evaluate(tmp_path, f"runs/{run}", "--episodes", "1")
        assert played.returncode == 2
        (line,) = played.stderr.strip().splitlines()
        assert missing in line and line.endswith(started), line
        resumed = train(tmp_path, "--runs-dir", runs, "--resume", run, "--total-steps", "1024")
        assert resumed.returncode == 2
        (line,) = resumed.stderr.strip().splitlines()
        assert missing in line and line.endswith(started), line
    # where it started, all of it works
    assert (
        evaluate(tmp_path / "mine", str(tmp_path / "runs/env"), "--episodes", "1").returncode == 0
    )


def test_the_built_in_networks_options_are_said_to_be_unread():
    from operant.trainer.run.console import unread_policy_options

    config = load_config(None, ["policy.kind=mynets:Net", "policy.hidden_sizes=[256, 256]"])
    assert unread_policy_options(config) == (
        "policy.hidden_sizes: the built-in networks' option, not read for mynets:Net, which "
        "builds its own network"
    )
    assert unread_policy_options(load_config(None, ["policy.kind=mynets:Net"])) is None
    assert unread_policy_options(load_config(None, ["policy.hidden_sizes=[256, 256]"])) is None


def test_a_heads_policy_of_the_users_learns(tmp_path):
    done = trained_beside(
        tmp_path, "mynets", HEADS, "CartPole-v1", "mynets:Net", "heads", "--total-steps", "122880"
    )
    assert "mynets:Net policy" in done.stdout + done.stderr
    records = [json.loads(line) for line in (tmp_path / "runs/heads/progress.jsonl").open()]
    # A random CartPole policy returns about 22.
    assert records[-1]["episode_return_mean"] > 100, records[-1]


def test_a_continuous_agent_trains_and_eval_asks_for_stochastic(tmp_path):
    done = trained_beside(
        tmp_path, "cont", CONTINUOUS, "Pendulum-v1", "cont:Agent", "pendulum", *SMALL,
        "--total-steps", "8192",
    )  # fmt: skip
    assert "cont:Agent policy (643 parameters)" in done.stdout + done.stderr
    greedy = evaluate(tmp_path, "runs/pendulum", "--episodes", "2")
    assert greedy.returncode == 2
    assert greedy.stderr.strip().splitlines() == [
        "operant eval: the run's policy (cont:Agent) has no greedy(obs) for its continuous "
        "actions: add --stochastic, or give it a greedy(obs) returning the mean"
    ]
    played = evaluate(tmp_path, "runs/pendulum", "--episodes", "2", "--stochastic", "--json")
    assert played.returncode == 0, played.stderr
    result = json.loads(played.stdout)
    assert result["episodes"] == 2 and -2000 < result["return_mean"] < 0


def test_sigterm_then_resume_draws_what_one_run_draws(tmp_path):
    """The agent samples from torch's global stream; act() seeds it from the trainer's
    generator, which the checkpoint keeps, so a resumed run is the uninterrupted one."""
    budget = ["--env", "CartPole-v1", "--set", "policy.kind=cleanrl_ppo:Agent", *SMALL,
              "--set", "ppo.update_epochs=2", "--total-steps", str(160 * 256), "--quiet",
              "--runs-dir", str(tmp_path)]  # fmt: skip
    assert train(EXAMPLES, *budget, "--run-id", "whole").returncode == 0
    log = (tmp_path / "split.log").open("w")
    split = subprocess.Popen(
        command(["operant-train", *budget, "--run-id", "split"]), cwd=EXAMPLES, stderr=log
    )
    progress = tmp_path / "split" / "progress.jsonl"
    deadline = time.monotonic() + 120
    while not (progress.exists() and progress.read_bytes().count(b"\n") >= 60):
        assert time.monotonic() < deadline and split.poll() is None
        time.sleep(0.01)
    split.send_signal(signal.SIGTERM)
    assert split.wait(timeout=60) == 0
    stopped = progress.read_bytes().count(b"\n")
    assert 60 <= stopped < 160
    resumed = train(EXAMPLES, "--runs-dir", str(tmp_path), "--resume", "split", "--quiet")
    assert resumed.returncode == 0, resumed.stderr

    def trained(run: str) -> list[dict]:
        lines = (tmp_path / run / "progress.jsonl").read_text().splitlines()
        timings = {"elapsed_s", "sps", "sps_mean", "phase_s"}
        return [{k: v for k, v in json.loads(line).items() if k not in timings} for line in lines]

    assert trained("split") == trained("whole")
    whole = torch.load(tmp_path / "whole" / "model.pt", weights_only=False)["policy"]
    after = torch.load(tmp_path / "split" / "model.pt", weights_only=False)["policy"]
    assert all(torch.equal(whole[name], after[name]) for name in whole)


BAD = [
    ("nowhere:Agent", "no module named 'nowhere' on sys.path or in the current folder"),
    ("agents:Nope", "module agents has no class or function 'Nope'"),
    ("broken:ShortValues", "get_value(x)'s values for 64 rows came out (1,), expected (64,)"),
    ("broken:Frozen", "Frozen has no trainable parameters"),
    ("broken:Plain", "Plain has neither act/value/evaluate/entropy/greedy"),
    ("broken:three", "it takes 3 arguments"),
    ("broken:not_a_module", "it returned a str, not a torch nn.Module"),
    ("broken:raises", "raises(envs) raised RuntimeError: no GPU here"),
    ("failing:Agent", "importing failing raised ZeroDivisionError: division by zero"),
    ("broken:Double", "Double has torch.float64 parameters; operant trains float32 networks"),
    ("broken:OutOfRange", "get_action_and_value(x)'s actions for 64 rows came out from 0 to 2"),
    ("broken:Hidden", "it takes (envs, hidden); operant calls it as CleanRL does, Name(envs): "),
    (":Agent", "a policy of yours is named module:Name"),
    # ./code.py holds the Agent, but `code` is the standard library's, found first
    ("code:Agent", "has no class or function 'Agent'; 'code' was imported from "),
    ("code:Agent", "not from ./code.py, which a module of that name earlier on sys.path hides"),
]


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """A folder with the user's modules, as the current folder; their names made unique to
    this test's folder so that no other test's import of the same name is reused."""
    (tmp_path / "agents.py").write_text((EXAMPLES / "cleanrl_ppo.py").read_text())
    (tmp_path / "broken.py").write_text(textwrap.dedent(BROKEN))
    (tmp_path / "failing.py").write_text("1 / 0\n")
    (tmp_path / "code.py").write_text((EXAMPLES / "cleanrl_ppo.py").read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    for name in ("agents", "broken", "failing"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


@pytest.mark.parametrize(("kind", "said"), BAD)
def test_a_bad_network_is_one_line(user_folder, kind, said):
    config = load_config(None, [f"policy.kind={kind}"])
    obs_spec = ObsSpec((4,), np.float32)
    with pytest.raises(ConfigError) as raised:
        build_user_policy(config, obs_spec, ActSpec((), np.dtype(np.int64), 2))
    message = str(raised.value)
    assert message.startswith(f"policy.kind = {kind!r}: ") and said in message
    assert "\n" not in message


def test_a_bad_network_stops_the_trainer_before_it_creates_anything(user_folder):
    for kind, said in (BAD[2], BAD[8]):
        # (a budget between updates: its rounding note came before the refusal, two lines)
        done = train(user_folder, "--env", "CartPole-v1", "--set", f"policy.kind={kind}",
                     "--runs-dir", "runs", "--total-steps", "1000")  # fmt: skip
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"operant-train: policy.kind = {kind!r}: ")
        assert said in lines[0]
        assert not (user_folder / "runs").exists()


def test_a_network_that_raises_mid_run_fails_the_run_as_the_users_not_operants(user_folder):
    # (a traceback through operant's update, exit 1, no failure line: read as operant's bug)
    done = train(
        user_folder, "--env", "CartPole-v1", "--set", "policy.kind=broken:NaNLater", *SMALL,
        "--runs-dir", "runs", "--run-id", "nan", "--total-steps", "8192",
        "--set", "checkpoint.every_updates=1",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "training failed" in line]
    assert line.startswith(
        f"operant-train: training failed: the policy broken:NaNLater raised at "
        f"{user_folder / 'broken.py'}:"
    )
    assert " in get_action_and_value: ValueError: Expected parameter logits" in line
    assert "; the last good checkpoint is " in line and "once the policy works, continue" in line
    assert "Traceback (most recent call last)" in done.stderr  # the user's, to read
    listed = json.loads(
        subprocess.run(
            command(["operant", "runs", "--runs-dir", "runs", "--json"]),
            cwd=user_folder, capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    assert [(entry["run_id"], entry["status"]) for entry in listed] == [("nan", "failed")]


def test_a_normed_network_is_probed_and_evaluated_in_eval_mode(user_folder):
    # (the probe's two zero rows moved BatchNorm's statistics; eval left Dropout on and
    # BatchNorm on batch statistics, which one env cannot have: a traceback)
    config = load_config(None, ["policy.kind=broken:Normed"])
    obs_spec, act_spec = ObsSpec((4,), np.float32), ActSpec((), np.dtype(np.int64), 2)
    policy = build_user_policy(config, obs_spec, act_spec)
    assert policy.training and int(policy.agent.norm.num_batches_tracked) == 0
    assert float(policy.agent.norm.running_mean.abs().sum()) == 0.0
    done = train(
        user_folder, "--env", "CartPole-v1", "--set", "policy.kind=broken:Normed", *SMALL,
        "--runs-dir", "runs", "--run-id", "normed", "--total-steps", "2048",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = []
    for _ in range(2):
        played = evaluate(
            user_folder, "runs/normed", "--episodes", "3", "--num-envs", "1", "--json"
        )
        assert played.returncode == 0, played.stderr
        results.append(json.loads(played.stdout)["return_mean"])
    assert results[0] == results[1] > 0  # greedy and deterministic: no Dropout draws


def test_weights_of_another_shape_name_the_first_that_differs(tmp_path):
    trained_beside(
        tmp_path, "mynets", HEADS, "CartPole-v1", "mynets:Net", "net", *SMALL,
        "--total-steps", "512",
    )  # fmt: skip
    (tmp_path / "mynets.py").write_text(textwrap.dedent(HEADS).replace("64", "128"))
    played = evaluate(tmp_path, "runs/net", "--episodes", "1")
    assert played.returncode == 2
    (line,) = played.stderr.strip().splitlines()
    assert (
        "its weights do not fit its own config (Error(s) in loading state_dict for Net: size "
        in line
    )
    assert "mismatch for body.0.weight: copying a param with shape torch.Size([64, 4])" in line
    resumed = train(tmp_path, "--runs-dir", "runs", "--resume", "net", "--total-steps", "1024")
    assert resumed.returncode == 2
    assert "size mismatch for body.0.weight" in resumed.stderr.strip().splitlines()[-1]


def test_cleanrl_adapter_draws_from_the_generator_and_leaves_torchs_stream(user_folder):
    config = load_config(None, ["policy.kind=agents:Agent"])
    obs_spec, act_spec = ObsSpec((4,), np.float32), ActSpec((), np.dtype(np.int64), 2)
    policy = build_user_policy(config, obs_spec, act_spec)
    assert isinstance(policy, CleanRLPolicy)
    assert not any(name.startswith("agent.") for name in policy.state_dict())
    obs = torch.randn(256, 4)
    before = torch.get_rng_state()
    draws = [policy.act(obs, torch.Generator().manual_seed(7))[0] for _ in range(2)]
    assert torch.equal(draws[0], draws[1])
    assert torch.equal(torch.get_rng_state(), before)
    other = policy.act(obs, torch.Generator().manual_seed(8))[0]
    assert not torch.equal(draws[0], other)
    # greedy: the most probable action, as the agent's own logits say
    assert torch.equal(policy.greedy(obs), policy.agent.actor(obs).argmax(-1))


def test_spaces_are_the_rows():
    frames = ObsSpec((4, 84, 84), np.uint8, scale=1 / 255)
    observation_space, action_space = spaces_of(frames, ActSpec((), np.dtype(np.int64), 6))
    assert observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert action_space == gym.spaces.Discrete(6)
    minatar = spaces_of(ObsSpec((4, 10, 10), np.uint8), ActSpec((), np.dtype(np.int64), 3))[0]
    assert (minatar.low.max(), minatar.high.min()) == (0, 1)
    low, high = np.full(1, -2.0, np.float32), np.full(1, 2.0, np.float32)
    box = spaces_of(ObsSpec((3,), np.float32), ActSpec((1,), np.dtype(np.float32), 1, low, high))
    assert box[1] == gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
