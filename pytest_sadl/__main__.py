"""``python -m pytest_sadl``: the ``sadl`` command (see :mod:`pytest_sadl.cli`)."""

from pytest_sadl.cli import main

raise SystemExit(main())
