"""The pytest side: the plugin's hooks and fixtures (:mod:`~pytest_sadl.plugin.hooks`, the
``pytest11`` entry point), its options (:mod:`~pytest_sadl.plugin.options`), the recorder
of who fed which inputs (:mod:`~pytest_sadl.plugin.recorder`) and the session's end with
the pytest-xdist transport (:mod:`~pytest_sadl.plugin.session`).
"""
