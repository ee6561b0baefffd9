"""Out-of-distribution scores of the field, each exact to its paper; pure NumPy.

Every score here is oriented as surprise is: **higher means more unlike the training
data** (the papers' confidence scores, where higher means in-distribution, are the
negatives, or ``1 -`` for MSP, of these; a detection metric is unchanged by the flip).

* :class:`KNN` — Sun, Ming, Zhu and Li, "Out-of-distribution detection with deep nearest
  neighbors", ICML 2022: the features of the training set and of the input are L2
  normalised (``z / ||z||``), and the score is the Euclidean distance from the input's
  normalised feature to its ``k``-th nearest normalised training feature (the paper's
  confidence is its negative). Exact: blocked BLAS over every training row, the chosen
  neighbour's distance recomputed directly. A zero feature stays zero (its distance to
  every normalised feature is 1).
* :func:`energy` — Liu, Wang, Owens and Li, "Energy-based out-of-distribution
  detection", NeurIPS 2020: ``E(x; f) = -T * logsumexp(f(x) / T)`` of the logits ``f(x)``
  (temperature ``T``, 1 in the paper), computed stably (the maximum taken out).
* :func:`max_logit` — Hendrycks, Basart, Mazeika et al., "Scaling out-of-distribution
  detection for real-world settings", ICML 2022: ``-max_k f_k(x)``.
* :func:`msp` — Hendrycks and Gimpel, "A baseline for detecting misclassified and
  out-of-distribution examples", ICLR 2017: ``1 - max_k softmax(f(x))_k``.
* :class:`TiedMahalanobis` — Lee, Lee, Lee and Shin, "A simple unified framework for
  detecting out-of-distribution samples and adversarial attacks", NeurIPS 2018: class
  means ``mu_c`` of the training features and one covariance shared by the classes,
  ``Sigma = 1/N sum_c sum_{i in c} (x_i - mu_c)(x_i - mu_c)^T``; the score is
  ``min_c (x - mu_c)^T Sigma^+ (x - mu_c)`` (the paper's confidence ``M(x)`` is its
  negative; ``Sigma^+``, the pseudo-inverse, as scikit-learn's ``EmpiricalCovariance``
  that the authors' code uses, so a dead neuron does not make it singular). The classes
  are the training traces' predicted classes (the profile's; the paper uses the labels).

:class:`LogitScores` maps features to logits with the output layer's kernel and bias
(``logits = h @ W + b``) and gives one of the logit scores; what the output layer is comes
from :mod:`pytest_sadl.capture.logits`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pytest_sadl.criteria.checks import as_pred, as_traces, as_train_traces, class_moments, classes_of

CHUNK_BYTES = 16 * 2**20
#: Sun et al.'s k for CIFAR-10 with the whole training set
KNN_K = 50


def _normalised(x: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (a zero row stays zero), as float64."""
    x = np.asarray(x, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    out: np.ndarray = x / np.where(norms > 0, norms, 1.0)[:, None]
    return out


class KNN:
    """The k-th nearest normalised training feature's distance (Sun et al., ICML 2022).

    The training traces are kept as given (a memory map stays one) with their inverse
    norms; scoring runs over blocks of inputs and chunks of training traces, keeping each
    input's ``k`` largest cosine similarities, so memory stays within a few
    ``chunk_bytes`` whatever the training set's size."""

    def __init__(self, train_ats: object, *, k: int = KNN_K, chunk_bytes: int = CHUNK_BYTES) -> None:
        train = as_train_traces("train_ats", train_ats)
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise ValueError(f"KNN's k must be a whole number >= 1, got {k!r}")
        if k > len(train):
            raise ValueError(f"KNN's k={k} is more than the {len(train)} training traces; choose k <= {len(train)}")
        self.k = int(k)
        self.chunk_bytes = int(chunk_bytes)
        self.train = train
        step = max(1, self.chunk_bytes // (8 * train.shape[1]))
        norms = np.concatenate(
            [
                np.sqrt(np.einsum("ij,ij->i", c, c))
                for c in (np.asarray(train[s : s + step], np.float64) for s in range(0, len(train), step))
            ]
        )
        self.inverse = np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)
        self.rows = max(self.k, step)  # training traces per chunk

    def _unit(self, start: int, stop: int) -> np.ndarray:
        out: np.ndarray = np.asarray(self.train[start:stop], np.float64) * self.inverse[start:stop, None]
        return out

    def _kth(self, block: np.ndarray) -> np.ndarray:
        """The index of each row's k-th most similar (nearest) normalised training trace."""
        k = self.k
        best_sim = np.empty((len(block), 0))
        best_idx = np.empty((len(block), 0), np.int64)
        for s in range(0, len(self.train), self.rows):
            chunk = self._unit(s, s + self.rows)
            sim = np.concatenate([best_sim, block @ chunk.T], axis=1)
            idx = np.concatenate([best_idx, np.broadcast_to(np.arange(s, s + len(chunk)), (len(block), len(chunk)))], 1)
            if sim.shape[1] > k:
                top = np.argpartition(-sim, k - 1, axis=1)[:, :k]
                sim, idx = np.take_along_axis(sim, top, 1), np.take_along_axis(idx, top, 1)
            best_sim, best_idx = sim, idx
        out: np.ndarray = best_idx[np.arange(len(block)), np.argmin(best_sim, axis=1)]
        return out

    def __call__(self, ats: object, pred: object = None) -> np.ndarray:
        """Scores of ``ats`` (``pred`` ignored: the score is the same for every class)."""
        x = _normalised(as_traces("ats", ats, dims=self.train.shape[1], allow_empty=True))
        out = np.empty(len(x))
        rows = max(1, self.chunk_bytes // (8 * 2 * (self.rows + self.k)))
        for s in range(0, len(x), rows):
            block = x[s : s + rows]
            near = self._kth(block)
            diff = block - np.asarray(self.train[near], np.float64) * self.inverse[near, None]
            out[s : s + rows] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        return out


def _logits(logits: object) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] < 2:
        raise ValueError(f"logits must be (n_inputs, n_classes) with at least two classes, got shape {z.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError("logits hold NaN or inf values; check the model's output layer")
    return z


def _logsumexp(z: np.ndarray) -> np.ndarray:
    top = z.max(axis=1)
    out: np.ndarray = top + np.log(np.exp(z - top[:, None]).sum(axis=1))
    return out


def energy(logits: object, temperature: float = 1.0) -> np.ndarray:
    """``-T * logsumexp(logits / T)`` per row (Liu et al., NeurIPS 2020); higher: more OOD."""
    t = float(temperature)
    if not (t > 0 and np.isfinite(t)):
        raise ValueError(f"the energy's temperature must be a finite number > 0, got {temperature!r}")
    return -t * _logsumexp(_logits(logits) / t)


def max_logit(logits: object) -> np.ndarray:
    """``-max_k logits_k`` per row (Hendrycks et al., MaxLogit); higher: more OOD."""
    out: np.ndarray = -_logits(logits).max(axis=1)
    return out


def msp(logits: object) -> np.ndarray:
    """``1 - max_k softmax(logits)_k`` per row (Hendrycks and Gimpel); higher: more OOD.
    The top probability is ``exp(-(logsumexp(z) - max z))``, exact and stable."""
    z = _logits(logits)
    out: np.ndarray = -np.expm1(-(_logsumexp(z) - z.max(axis=1)))
    return out


#: each logit score by its key
LOGIT_SCORES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "energy": energy,
    "maxlogit": max_logit,
    "msp": msp,
}


class LogitScores:
    """One logit score of features ``h`` through the output layer: ``score(h @ W + b)``."""

    def __init__(self, kernel: object, bias: object, score: str) -> None:
        if score not in LOGIT_SCORES:
            raise ValueError(f"unknown logit score {score!r}; choose from {', '.join(LOGIT_SCORES)}")
        self.kernel = np.asarray(kernel, dtype=np.float64)
        self.bias = np.asarray(bias, dtype=np.float64).reshape(-1)
        if self.kernel.ndim != 2 or self.bias.shape != (self.kernel.shape[1],):
            raise ValueError(
                f"the output layer's kernel {self.kernel.shape} and bias {self.bias.shape} do not make logits"
            )
        self.score = score

    def logits(self, ats: object) -> np.ndarray:
        x = as_traces("ats", ats, dims=self.kernel.shape[0], allow_empty=True)
        out: np.ndarray = x @ self.kernel + self.bias
        return out

    def __call__(self, ats: object, pred: object = None) -> np.ndarray:
        z = self.logits(ats)
        return LOGIT_SCORES[self.score](z) if len(z) else np.zeros(0)


class TiedMahalanobis:
    """Lee et al.'s class-conditional Mahalanobis score with one shared covariance.

    ``train_pred``: the training traces' classes (``None``: one class, a regression
    model). ``rcond``: eigenvalues of the covariance at most ``rcond`` times the largest are
    treated as zero (the pseudo-inverse's cut-off)."""

    def __init__(
        self, train_ats: object, train_pred: object = None, *, rcond: float = 1e-10, chunk_bytes: int = CHUNK_BYTES
    ) -> None:
        x = as_train_traces("train_ats", train_ats, chunk_bytes=chunk_bytes)  # a memmap stays one
        self.classifier = train_pred is not None
        pred = as_pred("train_pred", train_pred, len(x)) if self.classifier else np.zeros(len(x), np.int64)
        self.classes, members = classes_of(pred)
        scatter = np.zeros((x.shape[1], x.shape[1]))
        means = []
        for rows in members:  # each class's mean and scatter, a chunk of rows at a time
            mean, matrix, _ = class_moments(x, rows, chunk_bytes)
            assert matrix is not None
            means.append(mean)
            scatter += matrix
        cov = scatter / len(x)
        w, v = np.linalg.eigh(cov)
        top = float(w.max()) if w.size else 0.0
        keep = w > rcond * top if top > 0 else np.zeros(w.shape, bool)
        if not keep.any():
            raise ValueError("the training traces do not vary within their classes; choose another layer")
        # Sigma^+ = W W^T with W = V_kept / sqrt(w_kept): the distance is ||(x - mu) W||^2
        self.whiten = v[:, keep] / np.sqrt(w[keep])
        self.means = np.stack(means) @ self.whiten
        self.dims = x.shape[1]
        self.chunk_bytes = int(chunk_bytes)

    def __call__(self, ats: object, pred: object = None) -> np.ndarray:
        """``min_c`` squared Mahalanobis distance of each row (``pred`` ignored: the
        minimum is over every class, as the paper's)."""
        z = as_traces("ats", ats, dims=self.dims, allow_empty=True) @ self.whiten
        out = np.full(len(z), np.inf)
        rows = max(1, self.chunk_bytes // (8 * max(1, z.shape[1])))
        for s in range(0, len(z), rows):
            block = z[s : s + rows]
            for mean in self.means:
                diff = block - mean
                np.minimum(out[s : s + rows], np.einsum("ij,ij->i", diff, diff), out=out[s : s + rows])
        return out
