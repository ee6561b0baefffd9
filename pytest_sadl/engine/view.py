"""What the engine needs of a training profile: :class:`ProfileView`, the per-input scores set up on it.

Every per-input surprise score (LSA, DSA, MDSA, MLSA, MMDSA) is set up by one route, its
criterion's ``fit`` (:data:`~pytest_sadl.criteria.registry.SCORES`); a fit may reuse what
the profile keeps (``TrainingProfile.lsa()`` caches the stored LSA), the engine names no
score's set-up. A score set up elsewhere (a test's own, a Dask cluster's) is ``given``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pytest_sadl.criteria.neurons import NeuronRanges
from pytest_sadl.criteria.projection import Projected, Projection
from pytest_sadl.criteria.registry import BY_NAME, SA_LABELS, SCORES, choose
from pytest_sadl.criteria.shape import Training
from pytest_sadl.engine.bounds import held_out_sa, stored_held_out_sa


def score_keys(metrics: Sequence[str]) -> list[str]:
    """The per-input scores ``metrics`` need, in report order."""
    keys = (BY_NAME[m].sa for m in metrics if BY_NAME[m].sa in SCORES)
    return [k for k in dict.fromkeys(keys) if k is not None]


@dataclass
class ProfileView:
    """What the engine needs of a training profile (see :mod:`pytest_sadl.profile`).

    ``row_keys``: one integer per training trace that depends on the input's content
    only (:func:`pytest_sadl.fingerprint.row_keys`); the held-out sample is the traces
    with the smallest keys, so the same inputs in any order give the same bounds.

    The per-input surprise scores are set up when first needed, each by its criterion's
    ``fit``, on ``profile`` when there is one (made by :meth:`of`: the fit may reuse what
    the profile keeps), else on ``sa_traces``; one that cannot be set up is in
    ``unavailable`` with its one-line reason, and the others are still computed.
    ``given``: scorers set up elsewhere (a test's, a Dask cluster's), by score key, used as
    they are (``None``: this view has none). ``given_held_out``: the held-out scores, when
    given (else :meth:`held_out` stores them with the profile, or computes them).
    """

    ranges: NeuronRanges
    sa_traces: np.ndarray
    sa_pred: np.ndarray | None
    var_threshold: float
    row_keys: np.ndarray | None = None
    near_singular: str = "drop"
    var_rule: str = "class"
    profile: Any = None
    #: the metrics of the run (``--sadl-metrics``); ``None``: the default ones
    metrics: tuple[str, ...] | None = None
    options: Any = None  # the run's SadlOptions, for a criterion's own parameters
    sa_layers: list[str] = field(default_factory=list)
    given: dict[str, Any] = field(default_factory=dict)
    given_held_out: Callable[..., dict[str, np.ndarray]] | None = None
    #: score key -> why it cannot be set up on this profile
    unavailable: dict[str, str] = field(default_factory=dict, init=False)
    _fitted: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _pca: Any = field(default=None, init=False, repr=False)  # (Projection, projected SA traces)

    @classmethod
    def of(cls, profile: Any, metrics: Sequence[str] | None = None, options: Any = None) -> ProfileView:
        return cls(
            ranges=profile.ranges,
            sa_traces=profile.sa_traces,
            sa_pred=profile.sa_pred if profile.classifier else None,
            var_threshold=profile.options.var_threshold,
            row_keys=getattr(profile, "row_keys", None),
            near_singular=profile.options.lsa_near_singular,
            var_rule=profile.options.var_rule,
            profile=profile,
            metrics=None if metrics is None else tuple(metrics),
            options=options,
            sa_layers=list(getattr(profile, "sa_layers", [])),
        )

    def for_run(self, metrics: Sequence[str], options: Any) -> ProfileView:
        """A copy for one run's ``metrics`` (its own set-ups and reasons; this view is not
        changed), with ``options`` where this view has none."""
        return replace(
            self,
            metrics=tuple(metrics),
            options=self.options if self.options is not None else options,
            given=dict(self.given),
        )

    @property
    def classifier(self) -> bool:
        return self.sa_pred is not None

    def chosen(self) -> tuple[str, ...]:
        """The metrics of the run, in report order."""
        return choose(self.metrics)

    def score_keys(self) -> list[str]:
        """The per-input scores the run's metrics need, in report order (``"lsa"``...)."""
        return score_keys(self.chosen())

    def use(self, key: str, scorer: Any) -> None:
        """Score ``key`` with ``scorer``, set up elsewhere (a Dask cluster's), from now on."""
        self.given[key] = scorer
        self._fitted.pop(key, None)

    def scorer(self, key: str) -> Any:
        """The set-up scorer of ``key``; ``None`` when it does not apply (DSA of a
        regression model) or cannot be set up (then ``unavailable[key]`` says why)."""
        if key in self.given:
            return self.given[key]
        if key not in self._fitted:
            self._fitted[key] = self._fit(key)
        return self._fitted[key]

    def training(self) -> Training:
        """The criteria's view of the whole training set (with the profile, whose fits it may reuse)."""
        return Training(
            self.sa_traces,
            self.sa_pred,
            self.var_threshold,
            self.near_singular,
            self.options,
            self.profile,
            var_rule=self.var_rule,
        )

    def projects(self, key: str) -> bool:
        """Whether score ``key`` is measured on principal axes (``--sadl-sa-components``):
        its criterion says it is :attr:`~pytest_sadl.criteria.shape.Criterion.projected`."""
        return self.components is not None and key in SCORES and SCORES[key].projected

    def fit(self, key: str, training: Training, rows: np.ndarray | None = None) -> Any:
        """Score ``key`` set up by its criterion's ``fit`` on ``training`` (on principal
        axes when the run projects it: ``rows``, the training rows ``training`` holds;
        ``None``: all). Raises ``ValueError`` when it cannot be set up."""
        fit = SCORES[key].fit
        assert fit is not None  # SCORES holds only criteria with a fit
        if not self.projects(key):
            return fit(training)
        projection, projected = self.projection()
        # set up afresh on the projected traces (the profile's own LSA is of every neuron)
        traces = projected if rows is None else projected[rows]
        scorer = fit(replace(training, traces=traces, profile=None))
        return None if scorer is None else Projected(scorer, projection)

    def _fit(self, key: str) -> Any:
        try:
            return self.fit(key, self.training())
        except ValueError as exc:  # this measure only: the others are still computed
            where = f" on SA layers {self.sa_layers}" if self.sa_layers else ""
            self.unavailable[key] = f"{SA_LABELS[key]} cannot be set up{where}: {' '.join(str(exc).split())}"
            return None

    @property
    def components(self) -> int | None:
        """``--sadl-sa-components``: LSA, MDSA, MLSA and MMDSA on this many principal axes."""
        value = getattr(self.options, "sa_components", None)
        return None if value is None else int(value)

    def projection(self) -> tuple[Projection, np.ndarray]:
        """The principal axes of the SA traces (fitted once per profile and kept in it, as
        ``pca<N>-mean``/``-axes``/``-variances``) and the projected training traces.
        Raises ``ValueError`` (the projected measures' reason) when N is more than the neurons."""
        if self._pca is None:
            projection = Projection.from_arrays(self._projection_arrays())
            self._pca = (projection, projection(self.sa_traces))
        pca: tuple[Projection, np.ndarray] = self._pca
        return pca

    def _projection_arrays(self) -> Mapping[str, np.ndarray]:
        k = self.components
        assert k is not None
        d = int(self.sa_traces.shape[1])
        if k > d:
            raise ValueError(
                f"--sadl-sa-components={k} is more than the SA layers' {d} neurons; "
                f"choose at most {d}, or leave it out to measure every neuron"
            )
        fitted: list[dict[str, np.ndarray]] = []

        def part(name: str) -> np.ndarray:
            if not fitted:
                fitted.append(Projection.fit(self.sa_traces, k).to_arrays())
            return fitted[0][name]

        names = ("mean", "axes", "variances")
        if self.profile is not None:
            return {n: self.profile.cached_array(f"pca{k}-{n}", lambda n=n: part(n)) for n in names}
        return {n: part(n) for n in names}

    def scorers(self) -> dict[str, Any]:
        """The surprise measures the run's metrics need that this profile has, by results key."""
        out = {key: self.scorer(key) for key in self.score_keys()}
        return {k: v for k, v in out.items() if v is not None}

    def score(self, sa: np.ndarray, pred: np.ndarray) -> dict[str, np.ndarray]:
        """Every surprise measure of traces ``sa`` (``pred``: predicted classes; ignored for a
        regression model), by results key; DSA only for a classifier."""
        classes = pred if self.classifier else None
        out = {}
        for key, scorer in self.scorers().items():
            out[key] = scorer(sa, classes) if len(sa) else np.zeros(0)
        return out

    def held_out(
        self, keys: Sequence[str] | None = None, errors: dict[str, str] | None = None
    ) -> dict[str, np.ndarray]:
        """Each surprise measure of the held-out training traces scored against the others
        (the default SC bounds' data), by key: given, stored with the profile (computed the
        first time), or computed (a view with no profile). ``keys``: which (default
        :func:`~pytest_sadl.engine.bounds.held_out_keys`); one that cannot be set up on the
        rest is left out, its reason in ``errors``."""
        if self.given_held_out is not None:
            return self.given_held_out(keys, errors)
        if self.profile is not None:
            return stored_held_out_sa(self.profile, lambda: self, keys, errors)
        return held_out_sa(self, keys=keys, errors=errors)
