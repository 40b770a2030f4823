"""Entry point in the image: ``python3 -I /opt/harness/__main__.py`` (the container's PID 1).
``-I`` puts neither this directory nor the working directory on the path: add the package's
parent so ``harness`` imports as a package."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness.serve import serve  # noqa: E402

serve()
