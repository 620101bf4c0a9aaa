import sys

from oncelog.cli import run

sys.exit(run())
