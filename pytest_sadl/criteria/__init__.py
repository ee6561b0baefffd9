"""The criteria: pure NumPy/SciPy, no TensorFlow, no pytest.

* :mod:`~pytest_sadl.criteria.surprise` — ``LSA``, ``DSA``, ``surprise_coverage``,
  ``SurpriseCoverage``;
* :mod:`~pytest_sadl.criteria.mahalanobis` — ``MDSA``;
* :mod:`~pytest_sadl.criteria.neighbours` — the exact (and approximate) nearest-row
  searches DSA runs on;
* :mod:`~pytest_sadl.criteria.neurons` — ``fit_ranges`` and NC, KMNC, NBC, SNAC;
* :mod:`~pytest_sadl.criteria.mistakes` — does surprise predict the model's mistakes;
* :mod:`~pytest_sadl.criteria.selection` — choosing inputs from a pool;
* :mod:`~pytest_sadl.criteria.prioritise` — the pool's CTM and CAM orders, and their APFD;
* :mod:`~pytest_sadl.criteria.targets` — each input's coverage targets, read from the traces;
* :mod:`~pytest_sadl.criteria.checks` — the validation of arrays they share.
"""
