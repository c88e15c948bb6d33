"""CleanRL's ppo.py (PPO for discrete actions) on Operant's envs, through Gymnasium's vector API.

    python examples/cleanrl_ppo.py --total-timesteps 50000
    python examples/cleanrl_ppo.py --env-id operant/Acrobot-v1 --num-envs 16
    python examples/cleanrl_ppo.py --env-id operant/MinAtar-Breakout-v1 --num-envs 64

Read it next to CleanRL's cleanrl/ppo.py: the same Args, Agent with layer_init, rollout storage
shaped (num_steps, num_envs, ...), GAE, and minibatch update, with the same defaults. What
differs:

- The envs are one Operant vector env, `gymnasium.make_vec("operant/CartPole-v1",
  vectorization_mode="vector_entry_point")`, in place of a SyncVectorEnv of single envs.
- Autoreset is SAME_STEP (Operant's mode, and the old gym's that CleanRL's loop was written
  for): after a step that ends env i, `next_obs[i]` is already its next episode's first
  observation, so `next_done` marks where GAE must not bootstrap across. The observation the
  episode ended on is in `infos["final_obs"]`; for an episode cut by the time limit
  (truncated, not terminated) the loop adds `gamma * V(final_obs)` to its last reward, so
  truncation is not mistaken for failure (CleanRL's ppo.py leaves this out).
- Episode returns come from Gymnasium's vector RecordEpisodeStatistics wrapper, printed as
  CleanRL prints them: `global_step=..., episodic_return=...`. No TensorBoard or W&B here.
- Flags are parsed from the Args dataclass with argparse (CleanRL uses tyro): same names, and
  one more, `--torch-threads` (default 1: a small MLP on a busy CPU is fastest on one thread).
- Any observation shape: the MLP flattens it (MinAtar's frames, the grid's tokens), and an env
  whose rows are agents (operant/Grid-v0) gives num_envs x agents rows, each trained as an env.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from gymnasium.wrappers.vector import RecordEpisodeStatistics
from torch.distributions.categorical import Categorical

import operant.envs  # noqa: F401  (registers the operant/ env ids with Gymnasium)


@dataclass
class Args:
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=False`"""
    cuda: bool = True
    """if toggled, cuda will be enabled by default"""
    torch_threads: int = 1
    """torch's CPU threads (not CleanRL's: its 64-unit MLP runs fastest on one, and torch's
    default of one per core crawls on a busy machine); 0 keeps torch's default"""
    env_id: str = "operant/CartPole-v1"
    """the id of the environment"""
    env_impl: str = "auto"
    """Operant's implementation: auto, native or reference (numpy envs: CleanRL's
    RecordEpisodeStatistics counts in numpy)"""
    total_timesteps: int = 500000
    """total timesteps of the experiments"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 4
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


def parse_args() -> Args:
    """Args from the command line: `--total-timesteps 50000`, `--no-anneal-lr`, ..."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for field in dataclasses.fields(Args):
        if field.name in ("batch_size", "minibatch_size", "num_iterations"):
            continue
        flag = "--" + field.name.replace("_", "-")
        if field.type == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default)
        else:
            kind = {"int": int, "float": float, "str": str, "float | None": float}[field.type]
            choices = IMPLS if field.name == "env_impl" else None
            parser.add_argument(flag, type=kind, default=field.default, choices=choices)
    args = Args(**vars(parser.parse_args()))
    args.env_id = operant_id(parser, args.env_id)
    derive_sizes(args, args.num_envs)
    return args


IMPLS = ("auto", "native", "reference")


def operant_id(parser: argparse.ArgumentParser, env_id: str) -> str:
    """The operant/ id for `env_id`: CleanRL's own ids (CartPole-v1) name Operant's env of the
    same name; an id Operant does not register is refused in one line."""
    for candidate in (env_id, f"operant/{env_id}"):
        if candidate.startswith("operant/") and candidate in gym.registry:
            return candidate
    known = ", ".join(sorted(key for key in gym.registry if key.startswith("operant/")))
    parser.error(f"--env-id {env_id}: not one of Operant's envs ({known})")


def derive_sizes(args: Args, rows: int) -> None:
    """CleanRL's batch sizes, for `rows` rows a step: num_envs, or num_envs x agents for an env
    whose rows are agents (operant/Grid-v0: each agent a row of the shared policy)."""
    args.batch_size = int(rows * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size


SQRT2 = float(np.sqrt(2))


def layer_init(layer, std=SQRT2, bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        obs_size = np.array(envs.single_observation_space.shape).prod()
        # Flatten: an identity for vector observations (CleanRL's), and what lets the same MLP
        # read frames, e.g. MinAtar's uint8 (C, 10, 10) (operant/MinAtar-Breakout-v1).
        self.critic = nn.Sequential(
            nn.Flatten(),
            layer_init(nn.Linear(obs_size, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            nn.Flatten(),
            layer_init(nn.Linear(obs_size, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, envs.single_action_space.n), std=0.01),
        )

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def compute_gae(args: Args, rewards, values, dones, next_value, next_done):
    """CleanRL's GAE: `dones[t]` says obs[t] began a new episode, so t-1 does not bootstrap."""
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(args.num_steps)):
        if t == args.num_steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = (
            delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
        )
    return advantages, advantages + values


def update(
    args: Args,
    agent: Agent,
    optimizer,
    b_obs,
    b_logprobs,
    b_actions,
    b_advantages,
    b_returns,
    b_values,
) -> dict[str, float]:
    """CleanRL's PPO update: `update_epochs` passes over shuffled minibatches."""
    b_inds = np.arange(args.batch_size)
    clipfracs = []
    for _epoch in range(args.update_epochs):
        np.random.shuffle(b_inds)
        for start in range(0, args.batch_size, args.minibatch_size):
            mb_inds = b_inds[start : start + args.minibatch_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                b_obs[mb_inds], b_actions.long()[mb_inds]
            )
            logratio = newlogprob - b_logprobs[mb_inds]
            ratio = logratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]
            mb_advantages = b_advantages[mb_inds]
            if args.norm_adv:
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (
                    mb_advantages.std() + 1e-8
                )
            pg_loss1 = -mb_advantages * ratio
            pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
            pg_loss = torch.max(pg_loss1, pg_loss2).mean()
            newvalue = newvalue.view(-1)
            if args.clip_vloss:
                v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                v_clipped = b_values[mb_inds] + torch.clamp(
                    newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef
                )
                v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
            else:
                v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()
            loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
        if args.target_kl is not None and approx_kl > args.target_kl:
            break
    return {"approx_kl": approx_kl.item(), "clipfrac": float(np.mean(clipfracs))}


def step_envs(args: Args, envs, agent: Agent, action, device, global_step: int):
    """One step of every env: (next_obs, reward, next_done) as tensors on `device`, with the
    time-limit bootstrap added to the reward, and the episodes that ended printed."""
    next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
    next_done = np.logical_or(terminations, truncations)
    reward = torch.tensor(reward).to(device).view(-1)
    # SAME_STEP autoreset: an episode cut by the time limit bootstraps from the value of the
    # observation it ended on (next_obs is already the next episode's first).
    time_limited = np.flatnonzero(truncations & ~terminations)
    if time_limited.size:
        final_obs = torch.Tensor(infos["final_obs"][time_limited]).to(device)
        with torch.no_grad():
            reward[time_limited] += args.gamma * agent.get_value(final_obs).view(-1)
    if "episode" in infos:
        for i in np.flatnonzero(infos["_episode"]):
            print(f"global_step={global_step}, episodic_return={infos['episode']['r'][i]}")
    return torch.Tensor(next_obs).to(device), reward, torch.Tensor(next_done).to(device)


def main() -> None:
    args = parse_args()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    # One Operant vector env holds all num_envs envs (SAME_STEP autoreset).
    envs = RecordEpisodeStatistics(
        gym.make_vec(
            args.env_id,
            num_envs=args.num_envs,
            vectorization_mode="vector_entry_point",
            impl=args.env_impl,
        )
    )
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), (
        "only discrete action space is supported"
    )
    args.num_envs = envs.num_envs  # rows: more than asked where agents are rows
    derive_sizes(args, args.num_envs)

    agent = Agent(envs).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # ALGO Logic: Storage setup
    storage_shape = (args.num_steps, args.num_envs)
    obs = torch.zeros(storage_shape + envs.single_observation_space.shape).to(device)
    actions = torch.zeros(storage_shape + envs.single_action_space.shape).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    global_step = 0
    start_time = time.time()
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)

    for iteration in range(1, args.num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            next_obs, rewards[step], next_done = step_envs(
                args, envs, agent, action, device, global_step
            )

        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages, returns = compute_gae(args, rewards, values, dones, next_value, next_done)

        # flatten the batch
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)
        update(
            args, agent, optimizer, b_obs, b_logprobs, b_actions, b_advantages, b_returns, b_values
        )
        print("SPS:", int(global_step / (time.time() - start_time)))

    envs.close()


if __name__ == "__main__":
    main()
