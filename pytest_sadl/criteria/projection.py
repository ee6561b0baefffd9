"""Principal-component projection of wide layers, for LSA and MDSA on few dimensions.

A KDE over the 2,048 neurons of a ResNet-50 penultimate layer needs more than 2,048
training traces in every class (ImageNet has ~1,280), and one 2,048 x 2,048 matrix per
class; MDSA needs the same matrices. :class:`Projection` fits the first ``components``
principal axes of the training traces (over all classes, a chunk at a time, so a
memory-mapped set is never copied whole) and maps traces onto them; LSA, DSA and MDSA are
then built on the projected training traces and score projected inputs::

    pca = Projection.fit(train_ats, components=64)
    lsa = LSA(pca(train_ats), train_pred)
    scores = lsa(pca(ats), pred)
    arrays = pca.to_arrays()          # mean, axes, variances: store them with the profile
    pca = Projection.from_arrays(arrays)

The projection changes what is measured (the density or distance within the leading
principal subspace, not the whole layer), so its scores are not comparable with those of
the unprojected layer. The plugin and ``sadl`` project with ``--sadl-sa-components=N``
(ini ``sadl_sa_components``): the engine fits the axes on the whole training set's SA
traces, keeps them with the profile, and sets LSA, MDSA, MLSA and MMDSA up on the
projected traces, each wrapped in :class:`Projected` so that it scores unprojected
inputs.

Neither TensorFlow nor pytest is imported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from pytest_sadl.criteria.checks import as_traces, as_train_traces, one_blas_thread

__all__ = ["Projected", "Projection"]


class Projection:
    """``x -> (x - mean) @ axes``: the first ``components`` principal axes of the training
    traces (eigenvectors of their covariance, largest variance first, each signed so that
    its largest-magnitude entry is positive, so a refit gives the same axes)."""

    def __init__(self, mean: np.ndarray, axes: np.ndarray, variances: np.ndarray) -> None:
        self.mean = np.asarray(mean, dtype=np.float64)
        self.axes = np.asarray(axes, dtype=np.float64)
        self.variances = np.asarray(variances, dtype=np.float64)
        d = self.mean.shape[0] if self.mean.ndim == 1 else -1
        if self.axes.ndim != 2 or self.axes.shape[0] != d or self.variances.shape != (self.axes.shape[1],):
            raise ValueError("projection arrays have inconsistent shapes: mean (d,), axes (d, k), variances (k,)")

    @property
    def components(self) -> int:
        return int(self.axes.shape[1])

    @classmethod
    def fit(cls, train_ats: object, components: int, *, chunk_bytes: int = 16 * 2**20) -> Projection:
        """The first ``components`` principal axes of ``train_ats`` ``(n, d)`` (float32 or
        float64, a memmap read a chunk at a time: mean, then the centred scatter matrix)."""
        x = as_train_traces("train_ats", train_ats, chunk_bytes=chunk_bytes)
        n, d = x.shape
        if isinstance(components, bool) or not isinstance(components, (int, np.integer)) or not 1 <= components <= d:
            raise ValueError(
                f"components must be an integer from 1 to the {d} neurons of the traces, got {components!r}"
            )
        if n < 2:
            raise ValueError("a projection needs at least two training traces")
        step = max(1, chunk_bytes // (8 * d))
        with one_blas_thread():
            total = np.zeros(d)
            for s in range(0, n, step):
                total += np.asarray(x[s : s + step], dtype=np.float64).sum(axis=0)
            mean = total / n
            scatter = np.zeros((d, d))
            for s in range(0, n, step):
                centred = np.asarray(x[s : s + step], dtype=np.float64) - mean
                scatter += centred.T @ centred
            values, vectors = np.linalg.eigh(scatter / (n - 1))
        order = np.argsort(values)[::-1][: int(components)]
        axes = vectors[:, order]
        signs = np.sign(axes[np.abs(axes).argmax(axis=0), np.arange(axes.shape[1])])
        signs[signs == 0] = 1.0
        return cls(mean, axes * signs, np.maximum(values[order], 0.0))

    def __call__(self, ats: object, *, chunk_bytes: int = 16 * 2**20) -> np.ndarray:
        """The projected traces ``(n, components)``, float64; a memmap is read a chunk at a time."""
        d = self.mean.shape[0]
        if (
            isinstance(ats, np.ndarray)
            and ats.dtype in (np.float32, np.float64)
            and ats.ndim == 2
            and ats.shape[1] == d
        ):
            x = as_train_traces("ats", ats, chunk_bytes=chunk_bytes)
        else:
            x = as_traces("ats", ats, dims=d, allow_empty=True)
        out = np.empty((len(x), self.components))
        step = max(1, chunk_bytes // (8 * d))
        for s in range(0, len(x), step):
            out[s : s + step] = (np.asarray(x[s : s + step], dtype=np.float64) - self.mean) @ self.axes
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean, "axes": self.axes, "variances": self.variances}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Projection:
        return cls(arrays["mean"], arrays["axes"], arrays["variances"])


class Projected:
    """A per-input score set up on projected training traces, scoring unprojected inputs:
    ``Projected(LSA(pca(train), pred), pca)(ats, pred) == LSA(...)(pca(ats), pred)``."""

    def __init__(self, scorer: Callable[..., np.ndarray], projection: Projection) -> None:
        self.scorer = scorer
        self.projection = projection

    def __call__(self, ats: object, pred: object = None) -> np.ndarray:
        return self.scorer(self.projection(ats), pred)
