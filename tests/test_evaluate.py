"""operant eval on what a user has: a finished run, a run stopped by SIGTERM (checkpoints, no
model.pt), a checkpoint file, best.pt; and its refusals of everything else (one line, exit 2)."""

import json
import shutil
import signal

import pytest
import torch
from user_runs import ENDLESS, SMALL, last_record, run, start_trainer, stop, wait_for_updates


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def trained(root):
    """A run that finished: model.pt and a final checkpoint at the same update."""
    result = run(
        "operant",
        "train",
        "--total-steps",
        "40960",
        "--seed",
        "1",
        "--run-id",
        "m",
        "--quiet",
        "--runs-dir",
        str(root),
    )
    assert result.returncode == 0, result.stderr
    return root / "m"


@pytest.fixture(scope="module")
def stopped(root, tmp_path_factory):
    """A run stopped by SIGTERM: checkpoints (every 3 updates, and one at the stop), no
    model.pt and no best.pt."""
    log = tmp_path_factory.mktemp("log") / "train.out"
    trainer = start_trainer(
        "--runs-dir",
        str(root),
        "--run-id",
        "s",
        *SMALL,
        *ENDLESS,
        "--set",
        "checkpoint.every_updates=3",
        "--set",
        "checkpoint.keep=1000",
        "--quiet",
        log=log,
    )
    wait_for_updates(root / "s", 8)
    assert stop(trainer, signal.SIGTERM) == 0, log.read_text()
    assert not (root / "s" / "model.pt").exists()
    # A stopped run keeps a best.pt once it has seen 100 episodes, which a fast trainer may
    # reach before the signal lands (about 8 updates of this size): the tests here make the
    # best.pt they need, so the fixture holds none, whatever the machine's speed.
    (root / "s" / "best.pt").unlink(missing_ok=True)
    return root / "s"


def evaluate(*args, root):
    result = run(
        "operant", "eval", *map(str, args), "--episodes", "4", "--json", "--runs-dir", str(root)
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def checkpoints(run_dir):
    return sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))


def test_evaluates_a_trained_model_greedily(trained, root):
    result = run("operant", "eval", "m", "--episodes", "8", "--json", "--runs-dir", str(root))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["episodes"] == 8 and report["env_id"] == "CartPole-v1" and report["greedy"]
    assert (report["model"], report["kind"]) == (str(trained / "model.pt"), "model")
    assert report["global_step"] == 40960
    # 40K steps of training: far above random play (~22), a greedy policy does better still.
    assert report["return_mean"] > 100
    by_dir = evaluate(trained, root=root)
    by_file = evaluate(trained / "model.pt", root=root)
    assert by_dir["model"] == by_file["model"] == report["model"]
    assert by_dir["return_mean"] == by_file["return_mean"]  # same seed, same episodes


def test_a_run_stopped_by_sigterm_is_evaluated_from_its_newest_checkpoint(stopped, root):
    newest = checkpoints(stopped)[-1]
    for target in ("s", stopped, stopped / "checkpoints"):
        report = evaluate(target, root=root)
        assert (report["model"], report["kind"]) == (str(newest), "checkpoint")
        assert report["global_step"] == last_record(stopped)["global_step"]
    plain = run("operant", "eval", "s", "--episodes", "2", "--runs-dir", str(root))
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.startswith("CartPole-v1: 2 episodes, return ")
    assert f"; checkpoint {newest} at step " in plain.stdout


def test_a_checkpoint_file_is_evaluated_as_its_policy(stopped, root):
    oldest = checkpoints(stopped)[0]
    report = evaluate(oldest, root=root)
    assert (report["model"], report["kind"]) == (str(oldest), "checkpoint")
    assert report["global_step"] == 3 * 256  # the first periodic checkpoint: update 3


def test_the_report_names_the_limit_the_episodes_were_cut_at(trained, root):
    # "max_episode_steps": null beside "episodes_cut": 20 (CartPole's own limit, unsaid)
    report = evaluate(trained, root=root)
    assert report["max_episode_steps"] == 500


def test_the_latest_pointer_is_evaluated_as_the_checkpoint_it_names(stopped, root):
    # checkpoints/latest is the file a user finds beside the checkpoints (it was refused as
    # "not an operant model or checkpoint")
    named = stopped / "checkpoints" / (stopped / "checkpoints" / "latest").read_text().strip()
    report = evaluate(stopped / "checkpoints" / "latest", root=root)
    assert (report["model"], report["kind"]) == (str(named), "checkpoint")


def _bad_pointer(tmp_path, stopped):
    copy = tmp_path / "copied"
    shutil.copytree(stopped, copy)
    (copy / "checkpoints" / "latest").write_text("ckpt-000000999.pt\n")
    return copy / "checkpoints" / "latest"


def test_best_picks_best_pt_and_the_last_policy_is_the_default(stopped, root):
    # best.pt has model.pt's format; make one from an older checkpoint, as the trainer would
    # have saved it when that update was the best.
    payload = torch.load(checkpoints(stopped)[0], weights_only=True)
    best = stopped / "best.pt"
    torch.save(
        {
            "policy": payload["trainer"]["policy"],
            "config": payload["config"],
            "global_step": payload["trainer"]["counters"]["global_step"],
        },
        best,
    )
    try:
        report = evaluate("s", "--best", root=root)
        assert (report["model"], report["kind"], report["global_step"]) == (
            str(best),
            "model",
            3 * 256,
        )
        assert evaluate("s", root=root)["model"] == str(checkpoints(stopped)[-1])
    finally:
        best.unlink()


def test_a_model_older_than_a_checkpoint_gives_way_to_it(trained, root, tmp_path):
    # A finished run resumed with a larger budget and stopped again: model.pt is from the
    # first finish, the newest checkpoint is later.
    assert evaluate("m", root=root)["kind"] == "model"  # same update: model.pt
    copy = shutil.copytree(trained, tmp_path / "resumed")
    (final,) = checkpoints(copy)
    later = final.with_name("ckpt-000000025.pt")
    final.rename(later)
    report = evaluate(copy, root=root)
    assert (report["model"], report["kind"]) == (str(later), "checkpoint")


def _not_a_model(tmp_path):
    path = tmp_path / "some-file-that-is-not-a-model"
    path.write_bytes(b"\x80\x04 not a pickle, not a zip")
    return path


def _empty(tmp_path):
    path = tmp_path / "empty.pt"
    path.touch()
    return path


def _foreign_torch_file(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, path)
    return path


def _corrupt_checkpoint(tmp_path, stopped):
    """One flipped bit in a weight of the policy: the file still loads, its digest fails."""
    source = checkpoints(stopped)[0]
    weights = torch.load(source, weights_only=True)["trainer"]["policy"]
    tensor = max(weights.values(), key=lambda value: value.numel())
    data = bytearray(source.read_bytes())
    at = data.find(tensor.numpy().tobytes()[:64])
    assert at > 0
    data[at] ^= 0x01
    path = tmp_path / source.name
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    "make_target, extra, message",
    [
        (lambda tmp, stopped: "nosuchrun", [], "no run 'nosuchrun' under "),
        (lambda tmp, stopped: _not_a_model(tmp), [], "is not an operant model or checkpoint"),
        (lambda tmp, stopped: _empty(tmp), [], "is not an operant model or checkpoint"),
        (
            lambda tmp, stopped: "/etc/hostname",
            [],
            "is not an operant model or checkpoint (not a file torch.save wrote); give model.pt",
        ),
        (lambda tmp, stopped: _foreign_torch_file(tmp), [], "holds no policy and config"),
        (lambda tmp, stopped: _corrupt_checkpoint(tmp, stopped), [], "is corrupt (its content"),
        (lambda tmp, stopped: "missing/model.pt", [], "missing/model.pt: no such file"),
        (lambda tmp, stopped: tmp, [], "holds no model.pt and no checkpoint"),
        (lambda tmp, stopped: "s", ["--best"], "run 's' has no best.pt"),
        (lambda tmp, stopped: _bad_pointer(tmp, stopped), [], "names ckpt-000000999.pt, which"),
        (lambda tmp, stopped: checkpoints(stopped)[0], ["--best"], "--best picks a run's best.pt"),
        (lambda tmp, stopped: "s", ["--episodes", "0"], "--episodes and --num-envs must be"),
        (  # a MemoryError traceback (train and bench refused the same size)
            lambda tmp, stopped: "s",
            ["--num-envs", "1000000000000"],
            "--num-envs 1000000000000: this machine has not the memory for so many envs",
        ),
    ],
)
def test_what_names_no_policy_is_one_line_and_exit_2(
    tmp_path, stopped, root, make_target, extra, message
):
    target = make_target(tmp_path, stopped)
    result = run("operant", "eval", str(target), *extra, "--runs-dir", str(root))
    assert (result.returncode, result.stdout) == (2, "")
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_damaged_model_is_refused_by_its_digest(trained, root, tmp_path):
    # model.pt and best.pt had no digest: a flipped bit in a weight was evaluated as it was
    model = torch.load(trained / "model.pt", weights_only=True)
    tensor = max(model["policy"].values(), key=lambda value: value.numel())
    data = bytearray((trained / "model.pt").read_bytes())
    at = data.find(tensor.numpy().tobytes()[:64])
    assert at > 0 and "digest" in model
    data[at] ^= 0x01
    damaged = tmp_path / "model.pt"
    damaged.write_bytes(bytes(data))
    result = run("operant", "eval", str(damaged), "--runs-dir", str(root))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"operant eval: {damaged} is corrupt (its content does not match its digest); evaluate "
        "another model (best.pt, model.pt) or a checkpoint of the run\n"
    )
    # a model.pt without one (written before it had a digest) is evaluated as before
    del model["digest"]
    older = tmp_path / "older.pt"
    torch.save(model, older)
    assert evaluate(older, root=root)["global_step"] == 40960


def test_each_env_gives_its_own_first_episodes_however_many_envs_step():
    """The first `episodes` episodes to finish over many envs are the short ones: 256 envs
    read 292 where one env read 406 for the same CartPole policy. Env i now gives its first
    (episodes + i) // num_envs, as SB3's evaluate_policy counts."""
    import torch

    from operant.envs import make_env
    from operant.trainer.eval.evaluate import play

    class Lean:  # pushes the way the pole falls: first episodes of 142 to 279 steps
        def greedy(self, obs):
            return (obs[:, 3] > 0).long()

    envs = 64
    env = make_env("CartPole-v1", envs, copy=False)
    returns, cut = play(env, Lean(), None, envs // 2, seed=7, stochastic=False)
    # each env's first episode, counted here from the same batch's rewards and flags
    batch = make_env("CartPole-v1", envs, copy=False)
    batch.reset(seed=7)
    totals, first = [0.0] * envs, [None] * envs
    while None in first:
        batch.actions[:] = Lean().greedy(torch.from_numpy(batch.obs)).numpy()
        batch.step_bound()
        for i in range(envs):
            totals[i] += float(batch.rewards[i])
            if first[i] is None and (batch.terminated[i] or batch.truncated[i]):
                first[i] = totals[i]
            if batch.terminated[i] or batch.truncated[i]:
                totals[i] = 0.0
    # half as many episodes as envs: envs 32 .. 63 give one each (not the 32 shortest)
    assert sorted(returns) == sorted(first[envs // 2 :])
    assert len(cut) == envs // 2 and max(returns) > 1.5 * min(returns)


def test_eval_runs_on_the_runs_own_torch_threads(trained, monkeypatch, capsys):
    """The trainer runs on train.torch_threads (1 by default); eval ran on torch's default of
    a thread a core, 3.7x slower on a busy machine."""
    from operant.trainer.eval import evaluate

    threads = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    assert evaluate.main([str(trained), "--episodes", "2", "--json"]) == 0
    assert threads == [1]
    assert json.loads(capsys.readouterr().out)["episodes"] == 2
