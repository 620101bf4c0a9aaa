import sys

from oncelog.cli.main import main

sys.exit(main())
