"""Data-parallel PPO across processes: the process group a run's ranks share under torchrun.

`operant-train` started by torchrun (`torchrun --nproc-per-node K -m operant.trainer.run.main ...`,
or `operant-train --nproc-per-node K`, which hands off to torchrun) finds torchrun's variables
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and joins one `torch.distributed`
process group: gloo on CPU, NCCL when train.device is CUDA (train.dist_backend overrides).
With WORLD_SIZE 1, or without torchrun, nothing here runs and the trainer is the
single-process one, bit for bit.

What one run of K ranks means (docs/distributed.md says it for users):

- `env.num_envs` is the run's total: each rank steps num_envs / K of them, and rank r's envs
  get the seeds train.seed + r * (num_envs / K) + i: the envs of a K-rank run are the envs of
  a 1-rank run with the same seed, dealt out to the ranks. Action sampling and minibatch
  shuffles use generators seeded from train.seed and the rank (rank 0's are a 1-rank run's).
- A batch is global: num_envs x num_steps steps, split into ppo.num_minibatches global
  minibatches, each the union of one local minibatch per rank. Gradients are averaged over
  the ranks every minibatch step (one all-reduce of the flat gradient buffer), so every rank
  applies the same step and holds identical parameters, which a CRC32 of each rank's
  parameters, all-gathered with every update's record, proves (trainer.update_record).
  Advantages are normalised with the global minibatch's mean and standard deviation (one
  all-reduce per epoch for all its minibatches); the learning-rate schedule is a function of
  the update count, which every rank shares. train.total_steps counts global steps.
- Every decision that ends or checkpoints the loop is taken together (each rank's votes ride
  on the update record's all-gather, operant.trainer.distributed.ranks.GroupCheckpoints): a SIGTERM
  that reaches one rank first stops every rank at the same update boundary.
- A collective that does not complete within train.dist_timeout_s (a rank stopped, hung or
  died) raises GroupError, which ends the run with that one line instead of a hang.
"""

from __future__ import annotations

import datetime
import os
import socket
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from operant.trainer.config import ConfigError
from operant.trainer.distributed.local_reduce import (
    LocalReduce,
    gatherable,
    open_local_reduce,
    reducible,
)
from operant.trainer.run.errors import first_line
from operant.trainer.services.protocol import GroupError

# torchrun's variables (torch.distributed.run): which process of which group this is.
_RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class Launch:
    """What torchrun told this process (rank 0 of 1 without torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    restart_count: int = 0
    run_id: str = ""
    """torchrun's rendezvous id (TORCHELASTIC_RUN_ID): the same for every rank of a job and
    across its restarts."""
    local_world_size: int = 1
    """Ranks on this machine (LOCAL_WORLD_SIZE); all of them when it equals world_size."""

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def launch_from_environ(environ: Any = None) -> Launch:
    """torchrun's variables, checked; ConfigError naming the variable if one is malformed."""
    environ = os.environ if environ is None else environ
    if not any(name in environ for name in _RANK_VARIABLES):
        return Launch()
    values = {}
    defaults = {"WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": environ.get("WORLD_SIZE", "1")}
    for name in _RANK_VARIABLES + ("TORCHELASTIC_RESTART_COUNT", "LOCAL_WORLD_SIZE"):
        text = environ.get(name, defaults.get(name, "0"))
        try:
            values[name] = int(text)
        except ValueError:
            raise ConfigError(f"${name} = {text!r} is not an integer (torchrun sets it)") from None
    rank, world = values["RANK"], values["WORLD_SIZE"]
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"$RANK = {rank} and $WORLD_SIZE = {world} do not name a process")
    return Launch(
        rank=rank,
        world_size=world,
        local_rank=values["LOCAL_RANK"],
        restart_count=values["TORCHELASTIC_RESTART_COUNT"],
        run_id=environ.get("TORCHELASTIC_RUN_ID", ""),
        local_world_size=values["LOCAL_WORLD_SIZE"],
    )


def choose_backend(requested: str, device: str) -> str:
    """gloo for a CPU policy, nccl for a CUDA one, unless train.dist_backend names one."""
    if requested != "auto":
        return requested
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def backend_problem(backend: str, local_rank: int) -> str | None:
    """Why this rank cannot join a group of `backend`, in one line; None when it can. nccl
    puts each rank on GPU `local_rank` of its node."""
    if backend != "nccl":
        return None
    if not torch.cuda.is_available():
        return (
            "train.dist_backend nccl needs CUDA GPUs, and this torch sees none "
            '(a CPU-only build, no GPU or no driver); set train.dist_backend = "gloo" and '
            'train.device = "cpu"'
        )
    count = torch.cuda.device_count()
    if local_rank >= count:
        return (
            f"this node has {count} CUDA GPU(s) and nccl puts each rank on its own: "
            f"use --nproc-per-node {count} or fewer"
        )
    return None


class Group:
    """This process's place in the run's process group, and the collectives the run uses.

    Every method is a collective: each rank must call it, in the same order."""

    def __init__(
        self,
        launch: Launch,
        backend: str,
        timeout_s: float,
        device: str,
        shared_memory: bool = False,
    ):
        self.rank, self.world_size = launch.rank, launch.world_size
        self.local_rank = launch.local_rank
        self.node = socket.gethostname()
        self.timeout_s = timeout_s
        self.backend = backend
        if backend == "nccl":
            torch.cuda.set_device(launch.local_rank)
            self.device = torch.device("cuda", launch.local_rank)
        else:
            self.device = torch.device("cpu")
        timeout = datetime.timedelta(seconds=timeout_s)
        try:
            dist.init_process_group(
                backend,
                store=_attempt_store(launch, timeout),
                rank=launch.rank,
                world_size=launch.world_size,
                timeout=timeout,
            )
        except (RuntimeError, ValueError) as error:
            raise GroupError(
                f"rank {self.rank}: cannot join the process group ({backend}): {_first_line(error)}"
            ) from None
        # train.dist_shared_memory: float sums between ranks that all run on this machine go
        # through one shared segment (trainer/distributed/local_reduce.py), made at the first such
        # sum
        self._local_ok = (
            shared_memory and backend == "gloo" and launch.local_world_size == self.world_size
        )
        self._local: LocalReduce | None = None

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
            self._local = None
        if dist.is_initialized():
            dist.destroy_process_group()

    # -- collectives ---------------------------------------------------------------------
    def _guard(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except RuntimeError as error:
            raise self._failed(what, _first_line(error)) from None

    def _failed(self, what: str, detail: str) -> GroupError:
        return GroupError(
            f"rank {self.rank}: {what} failed, so {_what_ends()}: a rank died, or stopped "
            f"or hung for longer than train.dist_timeout_s = {self.timeout_s:g} s ({detail})"
        )

    def _on_device(self, tensor: torch.Tensor) -> tuple[torch.Tensor, bool]:
        if tensor.device == self.device:
            return tensor, False
        return tensor.to(self.device), True

    def average_(self, tensor: torch.Tensor, what: str = "the gradient all-reduce") -> None:
        """Replace `tensor` by its mean over the ranks, in place."""
        if self._local_sum(tensor, what, mean=True):
            return
        self.sum_(tensor, what)
        tensor.div_(self.world_size)

    def sum_(self, tensor: torch.Tensor, what: str = "an all-reduce") -> None:
        """Replace `tensor` by its sum over the ranks, in place."""
        if self._local_sum(tensor, what):
            return
        moved, copied = self._on_device(tensor)
        self._guard(what, dist.all_reduce, moved)
        if copied:
            tensor.copy_(moved)

    def reserve_shared(self, tensor: torch.Tensor) -> None:
        """Make the shared segment large enough for `tensor` now (the trainer passes the
        flat gradient, the largest vector it sums), so that the first smaller collective
        does not make one that the gradient's first sum would make again."""
        self._segment(tensor)

    def _segment(self, tensor: torch.Tensor) -> LocalReduce | None:
        """The shared segment, (re)made to hold `tensor`; None where ranks cannot use one."""
        if not (self._local_ok and gatherable(tensor)):
            return None
        nbytes = tensor.numel() * tensor.element_size()
        if self._local is None or self._local.slot_bytes < nbytes:
            if self._local is not None:
                self._local.close()
            self._local = open_local_reduce(
                self.rank,
                self.world_size,
                max(nbytes, 4096),
                lambda value: self.broadcast_from_zero(value, "mapping the shared segment"),
                self._agree_by_gloo,
            )
            self._local_ok = self._local is not None
        return self._local

    def _local_sum(self, tensor: torch.Tensor, what: str, mean: bool = False) -> bool:
        """Sum (or average) `tensor` through the shared segment where it can go there; False
        where not."""
        segment = self._segment(tensor) if reducible(tensor) else None
        if segment is None:
            return False
        if not segment.sum_(tensor, self.timeout_s, mean):
            raise self._failed(what, segment.failure)
        return True

    def agree(self, flags: Sequence[bool]) -> list[bool]:
        """Each flag true on any rank is true on every rank (the boundary's decisions)."""
        votes = torch.tensor([int(flag) for flag in flags], dtype=torch.int32)
        segment = self._segment(votes)
        if segment is None:
            return self._agree_by_gloo(flags)
        rows = self._gather_shared(segment, votes, "the update boundary's vote")
        return [bool(vote) for vote in rows.max(dim=0).values.tolist()]

    def _agree_by_gloo(self, flags: Sequence[bool]) -> list[bool]:
        votes = torch.tensor([int(flag) for flag in flags], dtype=torch.int32, device=self.device)
        self._guard("the update boundary's vote", dist.all_reduce, votes, op=dist.ReduceOp.MAX)
        return [bool(vote) for vote in votes.tolist()]

    def all_gather(self, row: torch.Tensor, what: str) -> torch.Tensor:
        """(world_size, *row.shape): every rank's `row`, in rank order."""
        row = row.contiguous()
        segment = self._segment(row)
        if segment is not None:
            return self._gather_shared(segment, row, what)
        moved, _ = self._on_device(row)
        rows = [torch.empty_like(moved) for _ in range(self.world_size)]
        self._guard(what, dist.all_gather, rows, moved)
        return torch.stack(rows).cpu()

    def _gather_shared(self, segment: LocalReduce, row: torch.Tensor, what: str) -> torch.Tensor:
        gathered = segment.all_gather(row, self.timeout_s)
        if gathered is None:
            raise self._failed(what, segment.failure)
        return gathered

    def gather_to_zero(self, value: Any, what: str) -> list[Any] | None:
        """Every rank's `value` (picklable) on rank 0, in rank order; None elsewhere."""
        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        self._guard(what, dist.gather_object, value, gathered, dst=0)
        return gathered

    def broadcast_from_zero(self, value: Any, what: str) -> Any:
        """Rank 0's `value` (picklable) on every rank."""
        box = [value if self.rank == 0 else None]
        self._guard(what, dist.broadcast_object_list, box, src=0)
        return box[0]

    def scatter_from_zero(self, values: list[Any] | None, what: str) -> Any:
        """Rank r receives values[r] of rank 0's list."""
        box: list[Any] = [None]
        self._guard(what, dist.scatter_object_list, box, values if self.rank == 0 else None, src=0)
        return box[0]

    def broadcast_(self, tensor: torch.Tensor, what: str) -> None:
        """Rank 0's values into `tensor` on every rank, in place."""
        moved, copied = self._on_device(tensor)
        self._guard(what, dist.broadcast, moved, src=0)
        if copied:
            tensor.copy_(moved)


def _attempt_store(launch: Launch, timeout: datetime.timedelta) -> dist.Store:
    """The key-value store the group's ranks find each other through, with keys of this
    attempt only.

    torchrun's agent hosts a TCPStore (MASTER_ADDR:MASTER_PORT) and, with --standalone, keeps
    the same one when it restarts the group: init_process_group's own env:// rendezvous then
    reads the previous attempt's addresses and waits to connect to ranks that are gone
    (measured: the restarted group never formed). Prefixing the keys with torchrun's restart
    count gives every attempt its own."""
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        port = int(os.environ.get("MASTER_PORT", ""))
    except ValueError:
        raise GroupError(
            f"rank {launch.rank}: $MASTER_PORT is not a port number (torchrun sets it)"
        ) from None
    agent_hosts = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        host,
        port,
        world_size=launch.world_size,
        is_master=not agent_hosts and launch.rank == 0,
        timeout=timeout,
        multi_tenant=not agent_hosts,
    )
    return dist.PrefixStore(f"operant/attempt-{launch.restart_count}", store)


def parameter_crc(param: torch.Tensor) -> int:
    """CRC32 of a flat parameter tensor's bytes (about 20 us for 100 K parameters)."""
    data = param.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    return zlib.crc32(data.contiguous().view(torch.uint8).numpy().data) & 0xFFFFFFFF


def _first_line(error: BaseException) -> str:
    """An error's first line, without gloo's sign-off ("Check the logs of the remote worker
    before reporting an error. GLHF!" and an emoji), which reached run reasons and the
    monitor."""
    line = first_line(error)
    return line.split(" Check the logs of the remote worker")[0].rstrip(". ") or line


def _what_ends() -> str:
    """The run, or under torchrun's --max-restarts with restarts left, this start of the
    group (torchrun then restarts it, and it resumes from its last checkpoint)."""
    restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    done = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if done < restarts:
        return f"this start of the group ends (torchrun restarts it: {done + 1} of {restarts})"
    return "the run ends"
