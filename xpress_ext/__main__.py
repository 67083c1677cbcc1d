"""`python -m xpress_ext`: the main job, XPress draft steps (see xpress_ext.draft); the op
self-check is `python -m xpress_ext.selfcheck`."""

import sys

from .draft import main

sys.exit(main())
