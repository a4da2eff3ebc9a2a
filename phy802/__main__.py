"""``python -m phy802``: the same entry point as the ``phy802`` console script."""

import sys

from phy802.cli import main

sys.exit(main())
