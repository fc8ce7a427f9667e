"""`python -m sf.breakdown -- <training flags>`: the same as `python -m sf.profile breakdown -- <training flags>`."""

import sys

from sf.breakdown.command import main

sys.exit(main())
