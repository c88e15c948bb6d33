"""operant eval on the newer families' runs: a MinAtar run's episodes that never end are cut at
a step limit (MinAtar's games have none), `--video` draws MinAtar's frames, enlarged; the grid
world, which draws no frames, is refused `--video` in one line."""

import json

import numpy as np
import pytest
import torch
from user_runs import run

from operant.envs import make_env
from operant.envs.minatar.env import rgb_frame
from operant.trainer.checkpoint.file_format import content_digest
from operant.trainer.eval import evaluate
from operant.trainer.eval.video import MIN_VIDEO_SIDE, enlarged


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny Seaquest run "sq", and "noop.pt": its model with the actor made to choose noop
    greedily, whose sub stays at the surface, where it never runs out of oxygen and no enemy
    reaches it: its episodes never end."""
    root = tmp_path_factory.mktemp("runs")
    result = run(
        "operant",
        "train",
        "--config",
        "configs/minatar/Seaquest.toml",
        "--total-steps",
        "1024",
        "--run-id",
        "sq",
        "--quiet",
        "--runs-dir",
        str(root),
        "--set",
        "env.num_envs=8",
        "--set",
        "ppo.num_steps=64",
        "--set",
        "ppo.num_minibatches=2",
        "--set",
        "policy.kind=cnn",  # (the shipped config's MLP has no actor head by that name)
    )
    assert result.returncode == 0, result.stderr
    model = torch.load(root / "sq" / "model.pt", weights_only=True)
    model["policy"]["actor.weight"].zero_()
    model["policy"]["actor.bias"].copy_(torch.tensor([1.0, 0, 0, 0, 0, 0]))
    model["digest"] = content_digest(model)  # an edited model, its digest made again
    torch.save(model, root / "noop.pt")
    return root


def _eval(runs, *args):
    result = run("operant", "eval", *map(str, args), "--json", "--runs-dir", str(runs))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_episodes_that_never_end_are_cut_at_the_limit(runs):
    report = _eval(runs, runs / "noop.pt", "--episodes", "3", "--num-envs", "2",
                   "--max-episode-steps", "40")  # fmt: skip
    assert report["episodes"] == 3 and report["episodes_cut"] == 3
    assert report["max_episode_steps"] == 40 and report["return_max"] == 0.0
    text = run("operant", "eval", runs / "noop.pt", "--episodes", "2", "--num-envs", "2",
               "--max-episode-steps", "40", "--runs-dir", runs)  # fmt: skip
    assert text.returncode == 0, text.stderr
    assert "2 of them cut at the 40-step limit (--max-episode-steps)\n" in text.stdout


def test_an_env_without_a_limit_gets_evals_and_one_with_a_limit_keeps_its_own(runs, tmp_path):
    loaded = evaluate.resolve("sq", str(runs), best=False)
    *_, env, _, _, options = evaluate.build_policy(loaded, 2)
    assert options["max_episode_steps"] == evaluate.EVAL_STEP_LIMIT == env.time_limit
    *_, env, _, _, options = evaluate.build_policy(loaded, 2, max_episode_steps=99)
    assert options["max_episode_steps"] == 99 == env.time_limit
    result = run("operant", "train", "--total-steps", "512", "--run-id", "cp", "--quiet",
                 "--runs-dir", tmp_path, "--set", "env.num_envs=8", "--set",
                 "ppo.num_steps=64")  # fmt: skip
    assert result.returncode == 0, result.stderr
    cartpole = evaluate.resolve("cp", str(tmp_path), best=False)
    *_, env, _, _, options = evaluate.build_policy(cartpole, 2)
    assert "max_episode_steps" not in options and env.max_episode_steps == 500


def test_a_bad_limit_is_one_line_and_exit_2(runs):
    result = run("operant", "eval", "sq", "--max-episode-steps", "0", "--runs-dir", runs)
    assert result.returncode == 2
    assert result.stderr == "operant eval: --max-episode-steps must be at least 1\n"


@pytest.mark.parametrize("seed", ["-1", str(2**62 + 1), "99999999999999999999"])
def test_a_seed_out_of_range_is_one_line_and_exit_2(runs, seed):
    # (they reached the envs' seeding: numpy's ValueError, Cython's OverflowError)
    result = run("operant", "eval", "sq", "--seed", seed, "--runs-dir", runs)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"operant eval: --seed must be between 0 and 2**62, got {seed}\n"
    trained = run("operant-train", "--set", f"train.seed={seed}", "--runs-dir", runs)
    assert (trained.returncode, trained.stdout) == (2, "")
    assert trained.stderr.startswith("operant-train: config (with --set): train.seed: Expected")
    assert len(trained.stderr.splitlines()) == 1


def test_the_video_draws_minatars_frames_enlarged(runs, tmp_path):
    imageio = pytest.importorskip("imageio.v3", reason="--video writes with imageio")
    video = tmp_path / "seaquest.gif"
    report = _eval(runs, runs / "noop.pt", "--episodes", "2", "--max-episode-steps", "20",
                   "--video", video, "--seed", "3")  # fmt: skip
    # the reset's frame, 20 steps, the NEXT_STEP reset's frame, 20 steps
    assert report["episodes"] == 2 and report["episodes_cut"] == 2
    assert report["video_frames"] == 42
    frames = imageio.imread(video, index=None)[..., :3]  # pillow reads GIFs back as RGBA
    assert frames.shape[1:] == (MIN_VIDEO_SIDE, MIN_VIDEO_SIDE, 3)
    env = make_env("MinAtar-Seaquest-v1", 1)
    obs, _ = env.reset(seed=3)
    np.testing.assert_array_equal(frames[0], enlarged(rgb_frame(obs[0])))
    assert enlarged(np.zeros((400, 600, 3), np.uint8)).shape == (400, 600, 3)


def test_a_video_of_an_env_that_draws_no_frames_is_one_line_and_exit_2(tmp_path):
    result = run("operant", "train", "--config", "configs/Grid-v0.toml", "--total-steps", "1024",
                 "--run-id", "g", "--quiet", "--runs-dir", tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    video = tmp_path / "grid.gif"
    result = run("operant", "eval", "g", "--runs-dir", tmp_path, "--video", video)
    assert result.returncode == 2 and not video.exists()
    assert result.stderr == (
        "operant eval: --video: Grid-v0 draws no frames to record (it has no render_mode "
        "'rgb_array' with NEXT_STEP autoreset); evaluate it without --video\n"
    )
    text = run("operant", "eval", "g", "--runs-dir", tmp_path, "--episodes", "2")
    assert text.returncode == 0 and "2 of them reached the env's time limit" in text.stdout


def test_the_videos_stack_is_the_trainers_frame_stack():
    # The video steps its env NEXT_STEP through the same frame stack (FrameStackEnv under
    # NEXT_STEP): over episode ends, its stacks are the SAME_STEP stacks the trainer's policy
    # saw, the terminal one included, and the reset's starts the next episode's.
    options = {"frame_stack": 3, "sticky_action_prob": 0.0}
    stacked = make_env("MinAtar-Breakout-v1", 1, **options)
    recorded = make_env("MinAtar-Breakout-v1", 1, autoreset_mode="next_step", **options)
    expected, _ = stacked.reset(seed=5)
    seen, _ = recorded.reset(seed=5)
    np.testing.assert_array_equal(seen, expected)
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(300):
        action = rng.integers(0, 3, 1)
        expected, _, terminated, truncated, info = stacked.step(action)
        seen, _, ended, _, _ = recorded.step(action)
        if terminated[0] or truncated[0]:
            ends += 1
            assert ended[0]
            np.testing.assert_array_equal(seen, info["final_obs"][:1])
            seen, *_ = recorded.step(action)  # NEXT_STEP: the reset, its action ignored
        np.testing.assert_array_equal(seen, expected)
    assert ends >= 5


def test_a_frame_stacked_runs_video_is_recorded(tmp_path):
    pytest.importorskip("imageio.v3", reason="--video writes with imageio")
    result = run(
        "operant", "train", "--config", "configs/minatar/Breakout.toml", "--total-steps", "512",
        "--run-id", "stacked", "--quiet", "--runs-dir", tmp_path, "--set", "env.frame_stack=2",
        "--set", "env.num_envs=8", "--set", "ppo.num_steps=64", "--set", "ppo.num_minibatches=2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    video = tmp_path / "breakout.gif"
    report = _eval(tmp_path, "stacked", "--episodes", "2", "--video", video, "--seed", "1")
    assert report["episodes"] == 2 and report["video_frames"] > 4 and video.stat().st_size


def test_a_grid_runs_newer_checkpoint_is_its_last_policy(tmp_path):
    # A grid update is num_envs x num_steps x agents rows: model.pt's update was taken as its
    # step count over num_envs x num_steps (8 times too many), so a newer checkpoint lost to it.
    result = run("operant-train", "--config", "configs/Grid-v0.toml", "--total-steps", "16384",
                 "--set", "ppo.update_epochs=1", "--run-id", "g", "--quiet", "--runs-dir",
                 tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    checkpoints = tmp_path / "g" / "checkpoints"
    assert torch.load(tmp_path / "g" / "model.pt", weights_only=True)["update"] == 2
    # (a later checkpoint, as a resumed run stopped at update 3 leaves beside model.pt)
    (checkpoints / "ckpt-000000003.pt").write_bytes(
        (checkpoints / "ckpt-000000002.pt").read_bytes()
    )
    report = _eval(tmp_path, "g", "--episodes", "1")
    assert (report["kind"], report["model"]) == (
        "checkpoint",
        str(checkpoints / "ckpt-000000003.pt"),
    )


@pytest.mark.parametrize(
    "env_id, extra",
    [
        ("MinAtar-Breakout-v1", ["--set", "policy.kind=mlp"]),  # frames through the MLP
        ("Pendulum-v1", []),  # the native Gaussian head's run
    ],
)
def test_a_frame_mlp_and_a_continuous_policy_train_and_evaluate(tmp_path, env_id, extra):
    """Issue 37's "nothing lost": an MLP over MinAtar's frames and a continuous policy, both
    trained by the native update, evaluate (and the frame MLP's run draws its video)."""
    trained = run("operant", "train", "--env", env_id, "--total-steps", "1024", "--run-id",
                  "r", "--quiet", "--runs-dir", tmp_path, "--set", "env.num_envs=8", "--set",
                  "ppo.num_steps=64", "--set", "ppo.num_minibatches=2", *extra)  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    run_json = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run_json["config"]["policy"]["kind"] == ("mlp" if extra else "auto")
    video = tmp_path / "play.gif" if env_id.startswith("MinAtar") else None
    args = ["r", "--episodes", "2", "--num-envs", "2", "--max-episode-steps", "60"]
    report = _eval(tmp_path, *args, *(["--video", video] if video else []))
    assert report["episodes"] == 2 and np.isfinite(report["return_mean"])
    if video:
        assert video.stat().st_size > 0
