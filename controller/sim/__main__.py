"""`python -m controller.sim --help`: the trace-driven simulator (controller/sim/cli.py)."""
import sys

from .cli import main

sys.exit(main())
