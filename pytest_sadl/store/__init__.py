"""The on-disk store of profiles.

* :mod:`~pytest_sadl.store.entry` — one entry: its format (a folder of ``.npy`` files
  and a ``meta.json`` with their sha256s), the validation of what is read back;
* :mod:`~pytest_sadl.store.locks` — locks that name their holder and never hang;
* :mod:`~pytest_sadl.store.cycle` — the lock-build-load cycle;
* :mod:`~pytest_sadl.store.history` — which data each profile came from;
* :mod:`~pytest_sadl.store.location` — where the cache lives.
"""
