"""The training profile: what the criteria need from the training set, built once, cached.

Three modules, one job each:

* :mod:`~pytest_sadl.profile.build` — :class:`ProfileOptions`, :class:`TrainingProfile`, the
  fingerprints and :func:`build_profile` (one forward pass of the training set, then the
  engine's set-up; the canonical order that makes a profile independent of data order);
* :mod:`~pytest_sadl.profile.files` — a profile as one entry of :mod:`pytest_sadl.store.entry`
  (:func:`save_profile`, :func:`load_profile` and every check a read makes);
* :mod:`~pytest_sadl.profile.lookup` — the cache: :func:`load_or_build`,
  :func:`list_profiles`, :func:`profile_path`;

and, on a Dask cluster (optional, ``pytest-sadl[dask]``): :mod:`~pytest_sadl.profile.distributed`
(the build's tracing, ``--dask``) and :mod:`~pytest_sadl.profile.cluster` (DSA, LSA, the
class moments and a pool's traces on the workers, ``sadl select --dask``).

Public API (import each name from its module; this package holds no code)
----------
``ProfileOptions(sa_layers=None, coverage_layers=None, var_threshold=1e-5,
lsa_near_singular="drop", batch_size=256, classifier=None, dsa_precompute=False, output=None)``
    :mod:`~pytest_sadl.profile.build`. What to build. ``None`` layers mean the defaults of :mod:`pytest_sadl.capture`.
    ``ProfileOptions.from_sadl(sadl_options, **overrides)``: those of a run's configuration.
``load_or_build(model, train, options=None, cache_dir=None, *, progress=None, status=None,
rebuild=False, base_dir=None) -> TrainingProfile``
    :mod:`~pytest_sadl.profile.lookup`. The cached profile when its fingerprint matches, else built (and stored when
    ``cache_dir`` is given and writable; else kept in memory with a one-line
    :class:`SadlCacheWarning`). ``model``: a ``keras.Model`` or anything
    :func:`pytest_sadl.capture.model.load_model` takes; ``train``: anything
    :func:`pytest_sadl.capture.data.load_training_data` takes.
``TrainingProfile``
    ``.lsa()`` / ``.dsa()`` (engine objects, built once per profile from the cached arrays;
    ``dsa()`` is ``None`` for a regression model, and starts from the ``dist_b`` kept so
    far), ``.keep_dsa_distances()`` (adds the ``dist_b`` this process computed to the stored
    profile), ``.mdsa()``, ``.ranges`` (:class:`NeuronRanges` of the
    coverage layers), ``.trace_model(model)``, ``.cached_array(name, compute)`` (a derived
    array stored in the profile, e.g. held-out scores for default bounds), ``.fingerprint``,
    ``.model_fingerprint``, ``.data_fingerprint``, ``.sa_traces``, ``.sa_pred``,
    ``.row_keys``, ``.sa_layers``, ``.coverage_layers``, ``.classifier``, ``.n_classes``,
    ``.n_train``, ``.path``, ``.built``...
``model_fingerprint(model) -> str``, ``profile_fingerprint(...) -> str``
    sha256 hex digests (see :func:`profile_fingerprint` for what goes in; the model's is
    :func:`pytest_sadl.capture.identity.model_fingerprint`, importable from ``build`` too).
``save_profile(profile, path)``, ``load_profile(path, fingerprint=None)``
    :mod:`~pytest_sadl.profile.files`. The store's format 2 for a profile; ``load_profile`` raises :class:`pytest_sadl.store.entry.Invalid` when the
    folder must not be trusted.
``default_cache_dir(rootdir, cache_dir=None) -> Path``
    From :mod:`pytest_sadl.store.location` (``rootdir``: pytest's).
``list_profiles(cache_dir) -> list[ProfileInfo]``
    :mod:`~pytest_sadl.profile.lookup`. The profiles stored there, newest first, each with its fingerprint, size, age and
    whether it is readable.
"""
