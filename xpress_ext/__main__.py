"""`python -m xpress_ext`: the package's main job (for now the op self-check)."""

import sys

from .selfcheck import main

sys.exit(main())
