"""`python -m engine.cli`: the same as the `rewind` command."""

import sys

from engine.cli.parser import main

sys.exit(main())
