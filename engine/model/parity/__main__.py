"""``python -m engine.model.parity FIXTURE...``: the parity runner's command line (``runner.main``)."""
import sys

from engine.model.parity.runner import main

sys.exit(main())
