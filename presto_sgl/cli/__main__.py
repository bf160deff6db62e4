"""``python -m presto_sgl.cli`` runs the command line."""

import sys

from .main import main

sys.exit(main())
