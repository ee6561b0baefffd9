"""Reports of a run: HTML, Markdown (CI job summary), badge JSON, baseline comparison.

Every report renders a typed :class:`pytest_sadl.results.Results` (the engine's own
object in a run; :func:`pytest_sadl.resultsfile.read_results` of a results file, the
document of ``docs/results-schema.md``); none recomputes a metric.

- :mod:`pytest_sadl.report.html`: ``render_html`` / ``write_html`` (one self-contained file)
- :mod:`pytest_sadl.report.markdown`: ``render_markdown`` / ``write_markdown``
- :mod:`pytest_sadl.report.badge`: ``render_badge`` / ``write_badges`` (one endpoint file per metric)
- :mod:`pytest_sadl.report.compare`: ``compare``, ``parse_compare_fail``, ``compare_failures``
- :mod:`pytest_sadl.cli.report`: the ``sadl report`` and ``sadl compare`` subcommands

This package imports nothing heavy on import (Jinja2 is imported by ``html`` only).
"""
