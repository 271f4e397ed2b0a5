"""`python -m empo2_studio …` = `empo2-studio …` (what `torchrun -m empo2_studio` / `accelerate launch -m` run)."""

import sys

from empo2_studio.cli import main

sys.exit(main())
