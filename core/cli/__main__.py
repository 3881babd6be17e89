"""`python -m core.cli`: cairnctl from a checkout, and the form core.launch.python_command uses."""

import sys

from core.cli import main

sys.exit(main())
