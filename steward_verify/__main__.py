import sys

from steward_verify.cli import main

sys.exit(main())
