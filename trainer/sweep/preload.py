"""What the sweep's fork server imports once, so that each trial's process starts training at
once instead of importing torch (operant.trainer.sweep.trials). No torch op runs here: the
forked trials must not inherit torch's thread pools."""

import torch._dynamo  # noqa: F401  (torch.optim imports it when the first optimizer is built)

import operant.envs  # noqa: F401
import operant.trainer.main  # noqa: F401
import operant.trainer.session  # noqa: F401
import operant.trainer.telemetry  # noqa: F401
import operant.trainer.train  # noqa: F401
