import sys

from operant.cli import main

sys.exit(main())
