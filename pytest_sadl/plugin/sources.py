"""Which model and training data a session's profile comes from, loaded once.

The configuration names a model and training data (``sadl_model``/``sadl_train``, or their
flags); a project may give its own ``sadl_model``/``sadl_train`` fixtures instead; under
pytest-xdist only the workers see a fixture's model and build its profile. :class:`Sources`
holds all four and decides, in one place (:meth:`Sources.resolve_profile`), which profile
the results use. :func:`make_recorder` makes the recorder with the trace model the
profile's layer options resolve to.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_sadl.config import SadlOptions
from pytest_sadl.plugin.outcome import Outcome
from pytest_sadl.plugin.status import Status


def usage_error(exc: Exception) -> pytest.UsageError:
    return pytest.UsageError(f"pytest-sadl: {exc}")


def make_recorder(options: SadlOptions) -> Any:
    """The session's recorder: its trace models resolve the layers as the profile does."""
    from pytest_sadl.plugin.recorder import Recorder

    def factory(model: Any) -> Any:
        from pytest_sadl.capture import trace_model
        from pytest_sadl.errors import SadlConfigError

        try:  # the same layer resolution as the profile's; no XLA: outputs equal predict's;
            # extrema: each conv map's min/max per input, for NC's scaling
            return trace_model(
                model, options.sa_layers, options.coverage_layers, output=options.output, jit=False, extrema=True
            )
        except SadlConfigError as exc:
            raise usage_error(exc) from None

    def digest(model: Any) -> str:
        from pytest_sadl.capture.identity import model_digest

        return model_digest(model)

    return Recorder(factory, digest)


class Sources:
    """The configured model and data (loaded on first need), what the tests used, the profiles."""

    def __init__(
        self,
        config: pytest.Config,
        options: SadlOptions,
        recorder: Any,
        outcome: Outcome,
        status: Status | None = None,
    ) -> None:
        self.config = config
        self.options = options
        self.recorder = recorder
        self.outcome = outcome
        self.status = status  # the status lines and progress bar; None: quiet (a worker)
        self._model: Any = None
        self._train: Any = None
        self._profiles: dict[tuple[int, int], Any] = {}
        self.model_seen: Any = None  # the model object the marked tests used (this process)
        self.train_seen: Any = None  # a project's own sadl_train fixture value, if any
        self.worker_profiles: list[str] = []  # profile files that workers built and used
        self.model_from_fixture = False  # a worker's tests used a project's sadl_model fixture

    # -- what the configuration names -----------------------------------------

    def model(self) -> Any:
        if self._model is None:
            if self.options.model is None:
                raise pytest.UsageError(
                    "pytest-sadl: no model configured; set sadl_model in [tool.pytest.ini_options] "
                    "or pass --sadl-model=PATH, or define a sadl_model fixture in conftest.py"
                )
            from pytest_sadl.capture.model import load_model
            from pytest_sadl.errors import SadlConfigError

            try:
                self._model = load_model(self.options.model, what="--sadl-model")
            except SadlConfigError as exc:
                raise usage_error(exc) from None
            if self.recorder is not None:  # the weights of the file the profile is made from
                self.recorder.bind(self._model)
        return self._model

    def train(self) -> Any:
        if self._train is None:
            if self.options.train is None:
                raise pytest.UsageError(
                    "pytest-sadl: no training data configured; set sadl_train in [tool.pytest.ini_options] "
                    "or pass --sadl-train=PATH, or define a sadl_train fixture in conftest.py"
                )
            from pytest_sadl.capture.data import load_training_data
            from pytest_sadl.errors import SadlConfigError

            try:
                self._train = load_training_data(self.options.train, what="--sadl-train")
            except SadlConfigError as exc:
                raise usage_error(exc) from None
        return self._train

    def is_configured(self, model: Any) -> bool:
        """Whether ``model`` is the configured model as loaded (not a project fixture's)."""
        return model is self._model and model is not None

    def from_fixture(self) -> bool:
        """Whether the tests used a project's own ``sadl_model`` (here or on a worker)."""
        return self.model_from_fixture or (self.model_seen is not None and self.model_seen is not self._model)

    def cache_dir(self) -> Path:
        """``--sadl-cache-dir`` (``~`` expanded), else ``<pytest cache_dir>/d/sadl``: the
        folder ``config.cache.mkdir("sadl")`` would make, not made here (the store makes
        it, and an unwritable one is a warning, not an INTERNALERROR)."""
        from pytest_sadl.store.location import default_cache_dir, expand_path

        if self.options.cache_dir is not None:
            return expand_path(self.options.cache_dir, self.config.rootpath)
        try:
            pytest_cache = self.config.getini("cache_dir")  # unknown with -p no:cacheprovider
        except ValueError:
            pytest_cache = None
        return default_cache_dir(self.config.rootpath, pytest_cache or None)

    # -- the training profile -------------------------------------------------

    def load_profile(self, model: Any, train: Any) -> Any:
        """The profile of ``model`` on ``train``: loaded or built, once per pair and process."""
        key = (id(model), id(train))
        if key not in self._profiles:
            self._profiles[key] = self._load_or_build(model, train)
        return self._profiles[key]

    def _load_or_build(self, model: Any, train: Any) -> Any:
        """The profile from the cache, or built (saying so on the status line); the cache's
        warnings become lines of the summary."""
        from pytest_sadl.errors import SadlCacheWarning, SadlConfigError
        from pytest_sadl.profile.build import ProfileOptions
        from pytest_sadl.profile.lookup import load_or_build

        shown = self.status
        options = ProfileOptions.from_sadl(self.options)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", SadlCacheWarning)
                return load_or_build(
                    model,
                    train,
                    options,
                    self.cache_dir(),
                    progress=None if shown is None else shown.progress(),
                    status=self._quiet_say(),
                    lock_timeout=self.options.lock_timeout,
                    dask=self.options.dask,
                    # the workers load the configured model from its path or spec
                    dask_model=self.options.model if model is self._model else None,
                )
        except SadlConfigError as exc:
            raise usage_error(exc) from None
        finally:
            self._pass_on(caught)

    def _quiet_say(self) -> Callable[[str], None] | None:
        """The status line's ``say`` of a passing message; None without a status line."""
        shown = self.status
        if shown is None:
            return None

        def say(msg: str) -> None:
            shown.say(msg, False)

        return say

    def _pass_on(self, caught: list[warnings.WarningMessage]) -> None:
        """The cache's warnings as one line each, now and in the summary; others pass on."""
        from pytest_sadl.errors import SadlCacheWarning

        for w in caught:
            if not issubclass(w.category, SadlCacheWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
                continue
            self.outcome.warnings.append(str(w.message))
            if self.status is not None:
                self.status.say(f"warning: {w.message}", True)

    def train_for_profile(self) -> Any:
        return self.train_seen if self.train_seen is not None else self.train()

    def configured_profile_covers(self, model: Any) -> bool:
        """Whether the profile built from the configured paths is the one for ``model``
        (the tests used the configured model and training data, not project fixtures)."""
        return self.is_configured(model) and self.train_seen is self._train

    def worker_profile(self) -> str | None:
        """A worker: the profile file of a project fixture's model its tests used (built now,
        once, under the cache's lock), or None when the configured profile covers them."""
        if self.model_seen is None or self.configured_profile_covers(self.model_seen):
            return None
        profile = self.load_profile(self.model_seen, self.train_for_profile())
        return None if profile.path is None else str(profile.path)

    def resolve_profile(self) -> Any:
        """The profile the results use (controller or serial run).

        1. a profile a worker built for the model its tests used (project fixtures, xdist);
        2. the profile of the model the marked tests used in this process;
        3. the profile of the configured model and data (built at session start).
        """
        if self.worker_profiles:
            from pytest_sadl.profile.files import load_profile

            if len(set(self.worker_profiles)) > 1:
                self.outcome.warnings.append(
                    "pytest-sadl: workers used different models or training data; using the first profile"
                )
            return load_profile(self.worker_profiles[0])
        if self.model_seen is not None:
            return self.load_profile(self.model_seen, self.train_for_profile())
        if self.options.model is None:
            raise pytest.UsageError(
                "pytest-sadl: no marked test ran and no model is configured (sadl_model), so there "
                "is nothing to report on; mark the tests that feed the model with @pytest.mark.sadl"
            )
        return self.load_profile(self.model(), self.train())
