"""The pytest side: the entry point (:mod:`~pytest_sadl.plugin.hooks`: options, marker,
fixtures, the session object chosen once), the session objects (serial, xdist controller,
xdist worker: :mod:`~pytest_sadl.plugin.session`), the model and data they measure
(:mod:`~pytest_sadl.plugin.sources`), the recorder of who fed which inputs
(:mod:`~pytest_sadl.plugin.recorder`), the end (:mod:`~pytest_sadl.plugin.finish`), what
went wrong and the exit status (:mod:`~pytest_sadl.plugin.outcome`), the pytest-xdist
transport (:mod:`~pytest_sadl.plugin.transport`) and the options
(:mod:`~pytest_sadl.plugin.options`).
"""
