"""``python -m phy802.cli``: the same entry point as the ``phy802`` console script."""

import sys

from phy802.cli import main

sys.exit(main())
