"""What the sweep's fork server imports once, so that each trial's process starts training at
once instead of importing torch (operant.trainer.sweep.trials). No torch op runs here: the
forked trials must not inherit torch's thread pools.

Before anything else, the fork server ignores the stop signals meant for the sweep
(operant.trainer.sweep.trials.ignore_stops): it started with them blocked."""

from operant.trainer.sweep.trials import ignore_stops

ignore_stops()

import torch._dynamo  # noqa: E402, F401  (torch.optim imports it when the first optimizer is built)

import operant.envs  # noqa: E402, F401
import operant.trainer.loop.train  # noqa: E402, F401
import operant.trainer.run.main  # noqa: E402, F401
import operant.trainer.run.session  # noqa: E402, F401
import operant.trainer.services.telemetry  # noqa: E402, F401
