"""Image observations from a user's Python env reach the CNN as images
(operant.envs.reference.obs_rows):
a 3-D Box with Discrete actions keeps its dtype and values, channels first (a channels-last
space transposed on the copy into the row), in the trainer's process and in env workers;
byte images from 0 to 255 are scaled by 1/255 in the CNN's first layer; anything else is
flattened to float32 rows as before. A run on such an env chooses the CNN and learns."""

from __future__ import annotations

import json

import env_worker_fixtures  # noqa: F401  (registers Dot-v0 in this process)
import numpy as np
import pytest
import torch
from gymnasium import spaces
from test_user_python_envs import with_fixtures
from user_runs import run

from operant.envs import make_env
from operant.envs.reference.obs_rows import obs_rows
from operant.trainer.config import Config
from operant.trainer.policies.cnn import CNNPolicy
from operant.trainer.policies.registry import build_policy

DISCRETE = spaces.Discrete(3)


def test_which_boxes_are_images_and_how_they_are_laid_out():
    hwc = obs_rows(spaces.Box(0, 255, (84, 84, 3), np.uint8), DISCRETE)
    assert (hwc.spec.shape, hwc.spec.dtype, hwc.axes) == ((3, 84, 84), np.uint8, (2, 0, 1))
    assert hwc.spec.scale == pytest.approx(1 / 255)
    assert hwc.space == spaces.Box(0, 255, (3, 84, 84), np.uint8)
    chw = obs_rows(spaces.Box(0, 255, (4, 84, 84), np.uint8), DISCRETE)
    assert (chw.spec.shape, chw.axes) == ((4, 84, 84), None)
    # channels last only where the last dimension is smaller than both others: a cube and
    # (16, 10, 10) are channels first (SB3's smallest-dimension rule read the latter's rows
    # as its channels)
    many = obs_rows(spaces.Box(0, 255, (16, 10, 10), np.uint8), DISCRETE)
    assert (many.spec.shape, many.axes) == ((16, 10, 10), None)
    cube = obs_rows(spaces.Box(0, 1, (10, 10, 10), np.bool_), DISCRETE)
    assert (cube.spec.shape, cube.spec.dtype, cube.axes, cube.spec.scale) == (
        (10, 10, 10), np.bool_, None, 1.0
    )  # fmt: skip
    # values of 0 and 1 (MinAtar's own Gymnasium env, say) are not scaled
    minatar_like = obs_rows(spaces.Box(0, 1, (10, 10, 4), np.uint8), DISCRETE)
    assert (minatar_like.spec.shape, minatar_like.spec.scale) == ((4, 10, 10), 1.0)
    floats = obs_rows(spaces.Box(0.0, 1.0, (3, 5, 5), np.float32), DISCRETE)
    assert (floats.spec.dtype, floats.spec.scale) == (np.float32, 1.0)
    # byte frames of two dimensions (AtariPreprocessing's grayscale) and four (stacked
    # channels-last frames, FrameStackObservation over RGB) are images too
    gray = obs_rows(spaces.Box(0, 255, (84, 84), np.uint8), DISCRETE)
    assert (gray.spec.shape, gray.spec.scale) == ((1, 84, 84), pytest.approx(1 / 255))
    stacked = obs_rows(spaces.Box(0, 255, (4, 8, 9, 3), np.uint8), DISCRETE)
    assert (stacked.spec.shape, stacked.axes) == ((12, 8, 9), (0, 3, 1, 2))
    frames = np.random.default_rng(0).integers(0, 256, (4, 8, 9, 3), np.uint8)
    np.testing.assert_array_equal(
        stacked.row(frames), frames.transpose(0, 3, 1, 2).reshape(12, 8, 9)
    )
    np.testing.assert_array_equal(
        stacked.rows(frames[None], 1)[0], frames.transpose(0, 3, 1, 2).reshape(12, 8, 9)
    )
    assert stacked.space.contains(stacked.row(frames))
    # not images: with Box actions (no CNN acts in them), other boxes
    for space, actions in [
        (spaces.Box(0, 255, (8, 9, 3), np.uint8), spaces.Box(-1, 1, (2,), np.float32)),
        (spaces.Box(0.0, 1.0, (8, 9), np.float32), DISCRETE),
        (spaces.Box(-1.0, 1.0, (4,), np.float64), DISCRETE),
    ]:
        flat = obs_rows(space, actions)
        size = int(np.prod(space.shape))
        assert (flat.spec.shape, flat.spec.dtype, flat.spec.scale) == ((size,), np.float32, 1.0)
        assert flat.space.shape == (size,) and flat.space.dtype == np.float32


@pytest.mark.parametrize("env_id", ["Dot-v0", "DotCHW-v0"])
@pytest.mark.parametrize("workers", [1, 2])
def test_rows_are_the_envs_frames_channels_first(env_id, workers):
    env = make_env(f"env_worker_fixtures:{env_id}", 4, impl="reference", workers=workers)
    own = [env_worker_fixtures.Dot("hwc") for _ in range(4)]
    try:
        assert (env.obs_spec.shape, env.obs_spec.dtype) == ((3, 8, 9), np.uint8)
        assert env.single_observation_space == spaces.Box(0, 255, (3, 8, 9), np.uint8)
        obs, _ = env.reset(seed=3)
        frames = [dot.reset(seed=3 + i)[0] for i, dot in enumerate(own)]
        ends = 0
        rng = np.random.default_rng(0)
        for _ in range(20):
            assert obs.dtype == np.uint8 and env.observation_space.contains(obs)
            np.testing.assert_array_equal(obs, np.stack(frames).transpose(0, 3, 1, 2))
            actions = rng.integers(0, 3, 4)
            obs, rewards, terminated, _, info = env.step(actions)
            frames = []
            for i, dot in enumerate(own):
                frame, reward, done, _, _ = dot.step(actions[i])
                assert rewards[i] == reward and terminated[i] == done
                if done:  # SAME_STEP: the last frame is final_obs, the new episode's is obs
                    ends += 1
                    np.testing.assert_array_equal(env.final_obs[i], frame.transpose(2, 0, 1))
                    # Gymnasium's face too (the in-process env gave the env's own layout)
                    np.testing.assert_array_equal(info["final_obs"][i], env.final_obs[i])
                    frame, _ = dot.reset()
                frames.append(frame)
        assert ends == 8
    finally:
        env.close()


def test_the_cnn_reads_byte_images_scaled_in_its_first_layer():
    space = spaces.Box(0, 255, (8, 9, 3), np.uint8)
    spec = obs_rows(space, DISCRETE).spec
    act_spec = make_env("CartPole-v1", 1).act_spec
    config = Config()
    policy = build_policy(config, spec, act_spec)
    assert isinstance(policy, CNNPolicy) and policy.scale == pytest.approx(1 / 255)
    unscaled = CNNPolicy((3, 8, 9), 2, scale=1.0)
    unscaled.load_state_dict(policy.state_dict())
    frames = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (5, 3, 8, 9), np.uint8))
    logits, values = policy.heads(frames)
    expected_logits, expected_values = unscaled.heads(frames.float() / 255)
    torch.testing.assert_close(logits, expected_logits)
    torch.testing.assert_close(values, expected_values)
    # the rollout's path (im2col into a workspace, the scale as the matmul's alpha) agrees
    _, _, rollout_values = policy.act(frames, torch.Generator().manual_seed(0))
    torch.testing.assert_close(rollout_values, expected_values, rtol=1e-5, atol=1e-5)
    assert frames.dtype == torch.uint8 and int(frames.max()) > 1  # the input is not touched


def test_a_run_on_a_python_image_env_chooses_the_cnn_and_learns(tmp_path):
    # in env workers: the rows' equality with the in-process env's is tested above
    workers = 2
    result = run(
        "operant-train", "--env", "env_worker_fixtures:Dot-v0", "--set", "env.impl=reference",
        "--set", f"env.workers={workers}", "--set", "env.num_envs=16",
        "--runs-dir", str(tmp_path), "--run-id", "dot", "--total-steps", "16384",
        env=with_fixtures(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # the start line says which policy "auto" chose, and its size
    assert ", 16 envs, cnn policy (87.1K parameters), " in result.stdout.splitlines()[0]
    records = [json.loads(line) for line in (tmp_path / "dot" / "progress.jsonl").open()]
    updates = [record for record in records if "episode_return_mean" in record]
    # a random policy lands in column 4 about one time in six; the learnt one nearly always
    assert updates[-1]["episode_return_mean"] >= 0.9, updates[-1]
    checkpoint = torch.load(tmp_path / "dot" / "model.pt", weights_only=False)
    state = checkpoint.get("policy", checkpoint.get("model", checkpoint))
    assert any("convs.0.weight" in key for key in state), list(state)[:8]


def test_only_frames_of_zeros_and_ones_are_published_to_the_monitor():
    from operant.trainer.services.telemetry import frame_source

    picture = make_env("env_worker_fixtures:Dot-v0", 2, impl="reference")
    cells = make_env("env_worker_fixtures:Cells-v0", 2, impl="reference")
    try:
        assert frame_source(picture) is None  # every cell would read as set
        source = frame_source(cells)
        assert source is not None and source.spec.shape == (3, 8, 9)
    finally:
        picture.close()
        cells.close()


def test_a_stacked_frame_of_a_users_env_shows_its_newest_frame():
    # (a user's env declares no channel names: the monitor drew all k x C stacked channels)
    from operant.trainer.services.telemetry import frame_source

    env = make_env("env_worker_fixtures:Cells-v0", 2, impl="reference", frame_stack=4)
    try:
        env.reset(seed=0)
        source = frame_source(env)
        assert source is not None and source.spec.shape == (3, 8, 9)
        np.testing.assert_array_equal(source.frame(), env.obs[0, 9:].reshape(-1))
    finally:
        env.close()
