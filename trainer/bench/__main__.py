"""`python -m operant.trainer.bench`: the same command as `operant bench`."""

import sys

from operant.trainer.bench.cli import main

sys.exit(main())
