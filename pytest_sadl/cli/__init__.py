"""The ``sadl`` command: :mod:`~pytest_sadl.cli.main` (``profile build/list/layers``),
:mod:`~pytest_sadl.cli.report` (``report``, ``compare``), :mod:`~pytest_sadl.cli.select`
(``select``) and the arguments they share (:mod:`~pytest_sadl.cli.args`).
"""
