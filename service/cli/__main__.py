"""``python -m service.cli``: the same as the ``entrabot-fleet`` console script."""

import sys

from service.cli import main

sys.exit(main())
