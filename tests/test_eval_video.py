"""`operant eval RUN --video FILE`: a trained CartPole policy's episodes written to a video
file, read back frame by frame; and its refusals (one line, exit 2)."""

import json
import os
import sys

import numpy as np
import pytest
from user_runs import run

pytest.importorskip("pygame", reason="--video draws with pygame (the video extra)")
imageio = pytest.importorskip("imageio.v3", reason="--video writes with imageio (the video extra)")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A runs root holding run "v": a tiny CartPole run (2 updates). Its greedy episodes last
    about 40 steps (8 updates' lasted 361): every frame is drawn and encoded, and no test here
    needs a long episode, only one of more than a frame."""
    root = tmp_path_factory.mktemp("runs")
    result = run(
        "operant",
        "train",
        "--total-steps",
        "1024",
        "--seed",
        "1",
        "--run-id",
        "v",
        "--quiet",
        "--runs-dir",
        str(root),
        "--set",
        "env.num_envs=8",
        "--set",
        "ppo.num_steps=64",
    )
    assert result.returncode == 0, result.stderr
    return root


def _eval_video(root, video, *extra):
    result = run(
        "operant", "eval", "v", "--runs-dir", str(root), "--video", str(video), "--json", *extra
    )
    assert result.returncode == 0, result.stderr
    # Nothing on stderr that reads like a failure (SDL's XDG_RUNTIME_DIR complaint included).
    assert "error" not in result.stderr.lower(), result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("suffix", [".gif", ".mp4", ".webm", ".avi", ".mkv", ".mov"])
def test_eval_writes_the_episode_to_a_video(root, tmp_path, suffix):
    video = tmp_path / f"cartpole{suffix}"
    report = _eval_video(root, video, "--episodes", "1")
    frames = imageio.imread(video, index=None)
    if suffix == ".gif":  # pillow reads GIF frames back as RGBA
        frames = frames[..., :3]
    assert frames.shape[1:] == (400, 600, 3) and frames.dtype == np.uint8
    # One frame after the reset and one per step, the terminal one included: CartPole's
    # return is its episode's length.
    assert report["episodes"] == 1 and report["video"] == str(video)
    assert report["video_frames"] == int(report["return_mean"]) + 1 > 1
    if suffix == ".gif":  # pillow folds identical consecutive frames into a longer one
        assert 1 < len(frames) <= report["video_frames"]
    else:
        assert len(frames) == report["video_frames"]
    assert not all(np.array_equal(frames[0], frame) for frame in frames[1:])
    if suffix == ".gif":  # lossless: the first frame is Gymnasium's drawing of a cart
        assert (frames[0] == 255).mean() > 0.5 and (frames[0] == 0).any()


def test_episodes_follow_each_other_in_one_video(root, tmp_path):
    video = tmp_path / "two.mp4"
    report = _eval_video(root, video, "--episodes", "2", "--seed", "4")
    assert report["episodes"] == 2
    # Both episodes' steps, the first frame and the NEXT_STEP reset frame in between.
    assert report["video_frames"] == round(2 * report["return_mean"]) + 2
    assert len(imageio.imread(video, index=None)) == report["video_frames"]


@pytest.mark.parametrize(
    "video, message",
    [
        ("clip.mpx", r"--video .*clip.mpx: write a .gif or one of .mp4"),
        ("no-such-folder/clip.gif", r"--video .*clip.gif: no folder"),
    ],
)
def test_a_video_it_cannot_write_is_one_line_and_exit_2(root, tmp_path, video, message):
    result = run("operant", "eval", "v", "--runs-dir", str(root), "--video", str(tmp_path / video))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("operant eval:")]
    assert len(lines) == 1 and __import__("re").search(message, lines[0]), result.stderr
    assert not (tmp_path / video).exists()


@pytest.mark.parametrize("module", ["imageio", "imageio_ffmpeg"])
def test_without_the_video_extra_it_names_the_extra(root, tmp_path, monkeypatch, capsys, module):
    from operant.trainer.eval import evaluate

    monkeypatch.setitem(sys.modules, module, None)
    if module == "imageio":
        monkeypatch.setitem(sys.modules, "imageio.v2", None)
    code = evaluate.main(["v", "--runs-dir", str(root), "--video", str(tmp_path / "a.mp4")])
    assert code == 2
    assert capsys.readouterr().err == (
        f'operant eval: --video needs {module}: pip install "operant-rl[video]"\n'
    )


def test_without_pygame_it_names_the_extra_not_the_env(root, tmp_path):
    # imageio there, pygame not (imageio came with another package): it said "CartPole-v1
    # draws no frames to record". A pygame that fails to import as an absent one does.
    stub = tmp_path / "stub" / "pygame"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pygame'\", name='pygame')\n"
    )
    environ = {**os.environ, "PYTHONPATH": str(tmp_path / "stub")}
    result = run(
        "operant", "eval", "v", "--runs-dir", str(root), "--video", str(tmp_path / "a.gif"),
        env=environ,
    )  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith('operant eval: --video: render_mode="rgb_array" draws with ')
    assert 'needs pygame: pip install "operant-rl[render]" (or "operant-rl[video]"' in line


def test_a_writer_that_fails_is_one_line_naming_the_file(tmp_path):
    # (a codec the container refused broke ffmpeg's pipe: a traceback, exit 1)
    from operant.trainer.eval.load import EvalInputError
    from operant.trainer.eval.video import VideoFile

    class Broken:
        def append_data(self, frame):
            raise BrokenPipeError(32, "Broken pipe")

        def close(self):
            raise BrokenPipeError(32, "Broken pipe")

    video = VideoFile(tmp_path / "v.webm", Broken())
    for attempt in (lambda: video.append_data(np.zeros((4, 4, 3), np.uint8)), video.close):
        with pytest.raises(EvalInputError) as failed:
            attempt()
        assert (
            str(failed.value)
            == f"--video {tmp_path / 'v.webm'}: writing it failed ([Errno 32] Broken pipe)"
        )
