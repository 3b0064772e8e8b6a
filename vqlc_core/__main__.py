"""`python -m vqlc_core ...`: the command line (`build/cli.py`)."""

from vqlc_core.pipeline.cli import main

raise SystemExit(main())
