"""``python -m pytest_sadl``: the ``sadl`` command (see :mod:`pytest_sadl.cli.main`)."""

from pytest_sadl.cli.main import main

raise SystemExit(main())
