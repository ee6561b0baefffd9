"""One module per criterion, each defining its :class:`~pytest_sadl.criteria.shape.Criterion`
as ``CRITERION``; :mod:`pytest_sadl.criteria.registry` lists them in report order."""
