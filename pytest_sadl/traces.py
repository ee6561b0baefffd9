"""Activation traces of a Keras 3 model: every requested layer in one forward pass.

The model is wrapped in one multi-output ``keras.Model`` whose outputs are the model's
own output plus every requested layer's output; an output of rank > 2 (a conv or pool
feature map ``(n, h, w, c)``, or a sequence ``(n, t, c)``) is reduced per channel by
the spatial mean *inside the graph*, so the full feature maps of the training set are
never held in memory: one batch of them exists at a time, inside TensorFlow.

Public API
----------
``resolve_layers(model, spec, *, purpose) -> list[str]``
    Names or indices (negative allowed, into ``model.layers``) to layer names; an
    unknown one raises :class:`SadlLayerError` listing the layers there are.
``default_coverage_layers(model) -> list[str]``
    Every layer with neurons: all layers but pass-through ones (Input, Flatten, Reshape,
    Permute, RepeatVector, padding/cropping/upsampling, Dropout and the other
    regularisers, Masking, Identity, Concatenate, preprocessing layers).
``default_sa_layers(model) -> list[str]``
    The last hidden layer with neurons (the paper's choice for MNIST): the last layer of
    :func:`default_coverage_layers` before the output layer (and before the dense layer
    it activates, when the output layer is a bare ``Activation``/``Softmax``).
``is_classifier(model) -> bool``
    See the function for the rule; pass ``classifier=`` to :class:`TraceModel` to override.
``TraceModel(model, sa_layers=None, coverage_layers=None, *, classifier=None, jit="auto")``
    ``.traces(x, batch_size=256, progress=None) -> Traces`` (batched; ``x`` is an
    array, a tensor, a ``tf.data.Dataset`` or :class:`~pytest_sadl.data.TrainingData`);
    ``.call_and_trace(x, batch_size=None, **predict_kwargs) -> (output, Traces)`` for
    recording: the model's output (NumPy, what ``model.predict`` returns) and the traces
    from the *same* forward pass; ``.call_tensors(x, training=False) -> (output tensor,
    Traces)`` for ``model(x)``: the output stays a tensor (gradients flow through it).
    Also ``.predictions(output)``, ``.sa_layers``, ``.coverage_layers``, ``.sa_sizes``,
    ``.coverage_sizes``, ``.input_shape``, ``.classifier``, ``.model``, ``.jit``.
    Passes of 2048 inputs or more are compiled by XLA (``jit="auto"``): without it the
    multi-output graph ran 2-4x slower than the model's own ``predict`` on CPU.
``Traces``
    ``sa`` ``(n, d)`` float32 (the SA layers' traces concatenated in order), ``coverage``
    (list of ``(n, c)`` float32, one per coverage layer), ``pred`` (``(n,)`` int64 argmax
    class for a classifier, ``(n, k)`` float32 raw output for a regression model),
    ``output`` (the model's raw output ``(n, k)``), ``sa_layers``, ``coverage_layers``.

Supported models: Sequential and functional models with one input and one output.
A subclassed model has no graph of layers to tap; it gets a :class:`SadlModelError`
that says to rebuild it functionally.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_sadl.data import (
    SadlDataError,
    SadlLayerError,
    SadlModelError,
    TrainingData,
    check_batch,
    load_training_data,
)

__all__ = [
    "Traces",
    "TraceModel",
    "resolve_layers",
    "default_sa_layers",
    "default_coverage_layers",
    "is_classifier",
    "layer_names",
    "Progress",
]

_JIT_MIN_INPUTS = 2048
Progress = Callable[[int, "int | None"], None]
"""``progress(done, total)``: called after every batch; ``total`` is ``None`` when unknown."""

_PASS_THROUGH_NAMES = (
    "InputLayer",
    "Flatten",
    "Reshape",
    "Permute",
    "RepeatVector",
    "Dropout",
    "SpatialDropout1D",
    "SpatialDropout2D",
    "SpatialDropout3D",
    "GaussianNoise",
    "GaussianDropout",
    "AlphaDropout",
    "ActivityRegularization",
    "ZeroPadding1D",
    "ZeroPadding2D",
    "ZeroPadding3D",
    "Cropping1D",
    "Cropping2D",
    "Cropping3D",
    "UpSampling1D",
    "UpSampling2D",
    "UpSampling3D",
    "Masking",
    "Identity",
    "Concatenate",
)
_ACTIVATION_NAMES = ("Activation", "Softmax", "ReLU", "LeakyReLU", "ELU", "PReLU")


def _keras() -> Any:
    import keras

    return keras


def _pass_through_types() -> tuple[type, ...]:
    keras = _keras()
    return tuple(
        getattr(keras.layers, n) for n in _PASS_THROUGH_NAMES if hasattr(keras.layers, n)
    )


def _is_pass_through(layer: Any) -> bool:
    if isinstance(layer, _pass_through_types()):
        return True
    return type(layer).__module__.startswith("keras.src.layers.preprocessing")


def _is_activation_only(layer: Any) -> bool:
    keras = _keras()
    types = tuple(getattr(keras.layers, n) for n in _ACTIVATION_NAMES if hasattr(keras.layers, n))
    return isinstance(layer, types) and not layer.weights


def _check_graph_model(model: Any) -> None:
    """Raise :class:`SadlModelError` unless ``model`` is a built Sequential/functional model."""
    keras = _keras()
    if not isinstance(model, keras.Model):
        raise SadlModelError(
            f"expected a keras.Model, got {type(model).__module__}.{type(model).__qualname__}; "
            "give a Keras 3 model (a .keras file or a model object)"
        )
    if not (isinstance(model, keras.Sequential) or _is_functional(model)):
        raise SadlModelError(
            f"model {model.name!r} is a subclassed keras.Model ({type(model).__qualname__}); "
            "its layers' outputs cannot be tapped without running it twice. Build it with "
            "keras.Sequential or the functional API (keras.Model(inputs, outputs)) instead "
            "(the layers and weights can stay the same)"
        )
    try:
        inputs, outputs = model.inputs, model.outputs
    except (AttributeError, ValueError) as exc:
        raise SadlModelError(
            f"model {model.name!r} is not built, so its layers have no outputs yet ({exc}); "
            "give the Sequential model a keras.Input(shape=...) first layer, or call it once"
        ) from exc
    if not inputs or not outputs:
        raise SadlModelError(
            f"model {model.name!r} is not built; give it a keras.Input(shape=...) first layer"
        )
    if len(inputs) != 1:
        raise SadlModelError(
            f"model {model.name!r} has {len(inputs)} inputs; pytest-sadl traces single-input "
            "models only"
        )
    if len(outputs) != 1:
        raise SadlModelError(
            f"model {model.name!r} has {len(outputs)} outputs; pytest-sadl traces "
            "single-output models only (build a model with the one output to measure)"
        )


def _is_functional(model: Any) -> bool:
    try:
        from keras.src.models.functional import Functional
    except ImportError:  # pragma: no cover - keras internals moved
        return hasattr(model, "_nodes_by_depth")
    return isinstance(model, Functional)


def layer_names(model: Any) -> list[str]:
    """Names of ``model.layers`` in order."""
    return [layer.name for layer in model.layers]


def _describe_layers(model: Any) -> str:
    return ", ".join(f"{i}:{layer.name} ({type(layer).__name__})" for i, layer in enumerate(model.layers))


def resolve_layers(model: Any, spec: Sequence[str | int] | str | int | None, *, purpose: str) -> list[str]:
    """Resolve names or indices (into ``model.layers``) to unique layer names, in order.

    ``purpose`` names the option in errors (e.g. ``"--sadl-layers"``). ``None`` or an
    empty list returns ``[]``: the caller applies its default. Raises
    :class:`SadlLayerError` for an unknown name or out-of-range index, listing the
    model's layers with their indices.
    """
    if spec is None:
        return []
    if isinstance(spec, (str, int)):
        spec = [spec]
    layers = list(model.layers)
    by_name = {layer.name: layer for layer in layers}
    out: list[str] = []
    for item in spec:
        if isinstance(item, bool) or not isinstance(item, (str, int, np.integer)):
            raise SadlLayerError(
                f"{purpose}: {item!r} is not a layer name or index; layers are: "
                f"{_describe_layers(model)}"
            )
        if isinstance(item, str) and item.lstrip("-").isdigit() and item not in by_name:
            item = int(item)
        if isinstance(item, (int, np.integer)):
            if not -len(layers) <= int(item) < len(layers):
                raise SadlLayerError(
                    f"{purpose}: layer index {int(item)} is out of range for model "
                    f"{model.name!r} with {len(layers)} layers: {_describe_layers(model)}"
                )
            name = layers[int(item)].name
        else:
            if item not in by_name:
                raise SadlLayerError(
                    f"{purpose}: model {model.name!r} has no layer {item!r}; layers are: "
                    f"{_describe_layers(model)}"
                )
            name = item
        if name not in out:
            out.append(name)
    return out


def _output_layer(model: Any) -> Any:
    return model.outputs[0]._keras_history[0]


def default_coverage_layers(model: Any) -> list[str]:
    """Every layer with neurons, in model order (see the module docstring)."""
    _check_graph_model(model)
    return [layer.name for layer in model.layers if not _is_pass_through(layer)]


def default_sa_layers(model: Any) -> list[str]:
    """The last hidden layer with neurons; :class:`SadlLayerError` when there is none."""
    _check_graph_model(model)
    out_layer = _output_layer(model)
    candidates = [layer for layer in model.layers if not _is_pass_through(layer)]
    if out_layer in candidates:
        candidates = candidates[: candidates.index(out_layer)]
        if _is_activation_only(out_layer):
            # Dense(10) -> Activation("softmax"): the dense layer is the output too.
            while candidates and _is_activation_only(candidates[-1]):
                candidates.pop()
            if candidates:
                candidates.pop()
    if not candidates:
        raise SadlLayerError(
            f"model {model.name!r} has no hidden layer with neurons to measure surprise on; "
            f"choose the SA layers explicitly; layers are: {_describe_layers(model)}"
        )
    return [candidates[-1].name]


def is_classifier(model: Any) -> bool:
    """Whether the model is a classifier (predictions are argmax classes).

    The rule: a compiled loss names it (``*crossentropy*``/``hinge`` means classifier;
    ``mse``, ``mae``, ``huber``, ``log_cosh``... means regression); otherwise a softmax
    output, or a sigmoid output, is a classifier, an output of width 1 without sigmoid
    is a regression, and an output of width >= 2 (logits) is a classifier. An output of
    rank other than 2 is not a classifier.
    """
    _check_graph_model(model)
    shape = tuple(model.outputs[0].shape)
    if len(shape) != 2:
        return False
    loss = getattr(model, "loss", None)
    if loss is not None and not isinstance(loss, (list, dict, tuple)):
        name = loss if isinstance(loss, str) else getattr(loss, "name", None) or getattr(loss, "__name__", "")
        name = str(name).lower()
        if "crossentropy" in name or "hinge" in name:
            return True
        if any(k in name for k in ("mean_squared", "mse", "mae", "mean_absolute", "huber", "log_cosh", "logcosh", "poisson", "mape", "msle")):
            return False
    activation = getattr(_output_layer(model), "activation", None)
    act_name = getattr(activation, "__name__", str(activation)).lower()
    if isinstance(_output_layer(model), _keras().layers.Softmax) or "softmax" in act_name:
        return True
    if "sigmoid" in act_name:
        return True
    return shape[1] is not None and shape[1] >= 2


@dataclass
class Traces:
    """Traces of ``n`` inputs; see the module docstring."""

    sa: np.ndarray
    coverage: list[np.ndarray]
    pred: np.ndarray
    output: np.ndarray
    sa_layers: list[str] = field(default_factory=list)
    coverage_layers: list[str] = field(default_factory=list)
    # with TraceModel(extrema=True): per coverage layer, the per-input (min, max) of its whole
    # output for layers of rank > 2 (None for the others), what NC's scaling needs
    coverage_extrema: list[Any] | None = None

    def __len__(self) -> int:
        return int(self.output.shape[0])

    def layer(self, name: str) -> np.ndarray:
        """The coverage trace of the named layer."""
        try:
            return self.coverage[self.coverage_layers.index(name)]
        except ValueError:
            raise SadlLayerError(
                f"{name!r} is not a coverage layer of these traces: {self.coverage_layers}"
            ) from None

    @classmethod
    def concatenate(cls, parts: Sequence[Traces]) -> Traces:
        """Join traces of consecutive input batches (same layers) into one."""
        if not parts:
            raise ValueError("Traces.concatenate needs at least one Traces")
        first = parts[0]
        extrema = None
        if first.coverage_extrema is not None:
            extrema = [
                None if e is None else tuple(np.concatenate([p.coverage_extrema[i][j] for p in parts]) for j in (0, 1))  # type: ignore[index]
                for i, e in enumerate(first.coverage_extrema)
            ]
        return cls(
            sa=np.concatenate([p.sa for p in parts]),
            coverage=[np.concatenate([p.coverage[i] for p in parts]) for i in range(len(first.coverage))],
            pred=np.concatenate([p.pred for p in parts]),
            output=np.concatenate([p.output for p in parts]),
            sa_layers=list(first.sa_layers),
            coverage_layers=list(first.coverage_layers),
            coverage_extrema=extrema,
        )


def _reduce(tensor: Any) -> Any:
    """Spatial mean per channel for rank > 2, as float32; rank 2 as it is."""
    keras = _keras()
    rank = len(tensor.shape)
    if rank > 2:
        tensor = keras.ops.mean(tensor, axis=tuple(range(1, rank - 1)))
    elif rank < 2:
        tensor = keras.ops.expand_dims(tensor, -1)
    if tensor.dtype != "float32":
        tensor = keras.ops.cast(tensor, "float32")
    return tensor


class TraceModel:
    """A Keras model wrapped to give its output and layer traces in one forward pass.

    ``sa_layers``/``coverage_layers`` are names or indices; ``None`` (or empty) means the
    defaults (:func:`default_sa_layers`, :func:`default_coverage_layers`). ``classifier``
    overrides :func:`is_classifier`. ``jit``: ``"auto"`` compiles the forward pass with
    XLA for passes of at least 2048 inputs (a training set), ``True`` always, ``False``
    never (see :meth:`_run`).
    The wrapped model is not modified.
    """

    def __init__(
        self,
        model: Any,
        sa_layers: Sequence[str | int] | None = None,
        coverage_layers: Sequence[str | int] | None = None,
        *,
        classifier: bool | None = None,
        jit: bool | str = "auto",
        extrema: bool = False,
    ) -> None:
        _check_graph_model(model)
        keras = _keras()
        self.model = model
        self.sa_layers: list[str] = resolve_layers(model, sa_layers, purpose="SA layers") or default_sa_layers(model)
        self.coverage_layers: list[str] = (
            resolve_layers(model, coverage_layers, purpose="coverage layers") or default_coverage_layers(model)
        )
        self.classifier: bool = is_classifier(model) if classifier is None else bool(classifier)
        self.input_shape: tuple[int | None, ...] = tuple(model.inputs[0].shape[1:])
        self.input_dtype: str = str(model.inputs[0].dtype)
        model_output = model.outputs[0]
        if self.classifier and len(model_output.shape) != 2:
            raise SadlModelError(
                f"model {model.name!r} has output shape {tuple(model_output.shape)}; a classifier "
                "needs a (batch, classes) output (pass classifier=False for a regression model)"
            )
        unique = list(dict.fromkeys(self.sa_layers + self.coverage_layers))
        outputs = [model_output]
        self._index: dict[str, int] = {}
        for name in unique:
            layer = model.get_layer(name)
            try:
                tensor = layer.output
            except (AttributeError, ValueError, RuntimeError) as exc:
                raise SadlLayerError(
                    f"layer {name!r} of model {model.name!r} has no single output tensor "
                    f"({exc}); choose another layer (a layer used more than once, or a nested "
                    "model, cannot be traced)"
                ) from exc
            if isinstance(tensor, (list, tuple)):
                raise SadlLayerError(
                    f"layer {name!r} of model {model.name!r} has {len(tensor)} outputs; choose a "
                    "layer with one output"
                )
            if tensor is model_output and len(tensor.shape) == 2 and tensor.dtype == "float32":
                self._index[name] = 0
                continue
            self._index[name] = len(outputs)
            outputs.append(_reduce(tensor))
        # NC scales each input's whole layer output (the feature map, for a conv layer) to
        # [0, 1]: with ``extrema``, each such layer also yields its per-input min and max.
        self._extrema_index: dict[str, tuple[int, int]] = {}
        if extrema:
            for name in self.coverage_layers:
                tensor = model.get_layer(name).output
                rank = len(tensor.shape)
                if rank > 2:
                    axes = tuple(range(1, rank))
                    self._extrema_index[name] = (len(outputs), len(outputs) + 1)
                    outputs.append(keras.ops.cast(keras.ops.min(tensor, axis=axes), "float32"))
                    outputs.append(keras.ops.cast(keras.ops.max(tensor, axis=axes), "float32"))
        # one input tensor, not a list of one: then model(x)-style calls with a bare tensor
        # match the expected input structure (Keras warns otherwise)
        inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
        self._multi = keras.Model(inputs=inputs, outputs=outputs, name=f"{model.name}_sadl_traces")
        self.sa_sizes: list[int] = [int(outputs[self._index[n]].shape[-1]) for n in self.sa_layers]
        self.coverage_sizes: list[int] = [int(outputs[self._index[n]].shape[-1]) for n in self.coverage_layers]
        self._fns: dict[str, Any] = {}
        self.jit_mode: bool | str = jit
        self.jit: bool | None = None if jit else False
        """Whether XLA compiles this model: ``None`` until a large pass first tries it."""

    # -- forward pass --------------------------------------------------------------

    def _forward(self, jit: bool) -> Any:
        """The compiled forward pass: XLA (``jit_compile=True``) or a plain ``tf.function``."""
        key = "jit" if jit else "plain"
        fn = self._fns.get(key)
        if fn is None:
            import tensorflow as tf

            multi = self._multi

            def forward(x: Any) -> Any:
                return multi(x, training=False)

            fn = tf.function(forward, jit_compile=jit, reduce_retracing=True)
            self._fns[key] = fn
        return fn

    def _use_jit(self, total: int | None) -> bool:
        """XLA for large passes only: compiling costs about a second per batch shape,
        which pays on a training set and not on a test's few inputs."""
        if self.jit is False or self.jit_mode is False:
            return False
        if self.jit_mode is True:
            return True
        return total is None or total >= _JIT_MIN_INPUTS

    def _run(self, batch: np.ndarray, jit: bool, pad_to: int = 0) -> list[np.ndarray]:
        """One batch through the multi-output model.

        With ``jit`` the pass is compiled by XLA: a multi-output graph without it runs
        2-4x slower than the model's own ``predict`` on CPU (measured with
        ``benchmarks/bench_profile.py``). Rows are then padded (with zeros, dropped from
        the result) up to ``pad_to`` or the next power of two, so that XLA compiles one
        batch shape per pass (a handful over many calls) rather than one per size. When XLA cannot compile the model (an unsupported op),
        the plain graph is used from then on.
        """
        n = int(batch.shape[0])
        outs = None
        if jit and self.jit is not False:
            size = max(pad_to, 1 << max(0, (n - 1).bit_length()))
            padded = batch
            if size != n:
                pad = np.zeros((size - n,) + tuple(batch.shape[1:]), dtype=batch.dtype)
                padded = np.concatenate([batch, pad])
            try:
                outs = self._forward(True)(padded)
                self.jit = True
            except Exception:  # XLA could not compile (or run) this graph
                if self.jit:  # it worked before: a genuine error, not XLA's
                    raise
                self.jit = False
        if outs is None:
            outs = self._forward(False)(batch)
        return [(o.numpy() if hasattr(o, "numpy") else np.asarray(o))[:n] for o in outs]

    def _as_batch(self, x: np.ndarray, what: str, offset: int) -> np.ndarray:
        check_batch(x, self.input_shape, what=what, offset=offset)
        if x.dtype != self.input_dtype:
            x = x.astype(self.input_dtype)
        return x

    def predictions(self, output: np.ndarray) -> np.ndarray:
        """Predicted classes (int64 argmax; threshold 0.5 for one sigmoid unit) or the raw output."""
        if not self.classifier:
            return np.asarray(output, dtype=np.float32)
        if output.shape[-1] == 1:
            return (output[:, 0] > 0.5).astype(np.int64)
        return np.argmax(output, axis=1).astype(np.int64)

    def _traces(self, sa: np.ndarray, cov: list[np.ndarray], out: np.ndarray, extrema: list[Any] | None = None) -> Traces:
        return Traces(
            sa=sa,
            coverage=cov,
            pred=self.predictions(out),
            output=out,
            sa_layers=list(self.sa_layers),
            coverage_layers=list(self.coverage_layers),
            coverage_extrema=extrema,
        )

    def _extrema_of(self, outs: list[np.ndarray]) -> list[Any] | None:
        """Per coverage layer, the per-input (min, max) of its whole output, or ``None``."""
        if not self._extrema_index:
            return None
        return [
            (outs[self._extrema_index[n][0]], outs[self._extrema_index[n][1]]) if n in self._extrema_index else None
            for n in self.coverage_layers
        ]

    def _extrema_flat(self, outs: list[np.ndarray]) -> list[np.ndarray]:
        return [outs[i] for n in self.coverage_layers if n in self._extrema_index for i in self._extrema_index[n]]

    def _extrema_unflat(self, flat: list[np.ndarray]) -> list[Any] | None:
        if not self._extrema_index:
            return None
        it = iter(flat)
        return [(next(it), next(it)) if n in self._extrema_index else None for n in self.coverage_layers]

    def _split(self, outs: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
        sa_parts = [outs[self._index[n]] for n in self.sa_layers]
        sa = sa_parts[0] if len(sa_parts) == 1 else np.concatenate(sa_parts, axis=1)
        cov = [outs[self._index[n]] for n in self.coverage_layers]
        return np.asarray(sa, dtype=np.float32), cov, outs[0]

    def traces(
        self,
        x: Any,
        batch_size: int = 256,
        *,
        progress: Progress | None = None,
        what: str = "inputs",
    ) -> Traces:
        """Traces of every input of ``x``, ``batch_size`` at a time, one pass per batch.

        For an array (or memmap) the result arrays are allocated once and filled batch by
        batch, so peak memory is the traces plus one batch of feature maps. A dataset is
        streamed. Bad inputs raise :class:`SadlDataError` naming the input index.
        """
        if batch_size < 1:
            raise SadlDataError(f"batch_size must be >= 1, got {batch_size}")
        data = x if isinstance(x, TrainingData) else load_training_data(_numpy_if_tensor(x), what=what)
        what = data.source
        data.check_shape(self.input_shape)
        total = data.n
        jit = self._use_jit(total)
        filled: list[np.ndarray] | None = None
        parts: list[list[np.ndarray]] = []
        done = 0
        for batch in data.batches(batch_size):
            outs = self._run(self._as_batch(batch, what, done), jit, pad_to=batch_size)
            sa, cov, out = self._split(outs)
            row = [sa, *cov, out, *self._extrema_flat(outs)]
            if total is not None:
                if filled is None:
                    filled = [np.empty((total,) + a.shape[1:], dtype=a.dtype) for a in row]
                for dst, src in zip(filled, row):
                    dst[done : done + src.shape[0]] = src
            else:
                parts.append(row)
            done += sa.shape[0]
            if progress is not None:
                progress(done, total)
        if done == 0:
            raise SadlDataError(f"{what} is empty (0 inputs); give at least one input")
        if filled is None:
            filled = [np.concatenate([p[i] for p in parts]) for i in range(len(parts[0]))]
        sa, *rest = filled
        n_cov = len(self.coverage_layers)
        cov, out, ext = rest[:n_cov], rest[n_cov], rest[n_cov + 1 :]
        return self._traces(sa, cov, out, self._extrema_unflat(ext))

    def call_and_trace(
        self, x: Any, batch_size: int | None = None, **predict_kwargs: Any
    ) -> tuple[np.ndarray, Traces]:
        """Run the model on ``x`` once; return ``(output, traces)`` from that one pass.

        ``output`` is what ``model.predict(x)`` returns (a NumPy array). The inputs go
        through in batches of ``batch_size`` (``None``: 256; in inference mode the
        batching does not change the numbers). ``model.predict``'s other keyword
        arguments (``verbose``, ``callbacks``, ``steps``) are accepted and ignored, so a
        wrapped ``predict`` can forward its arguments unchanged.
        """
        unknown = set(predict_kwargs) - {"verbose", "callbacks", "steps", "training", "mask"}
        if unknown:
            raise TypeError(f"call_and_trace() got unexpected keyword arguments {sorted(unknown)}")
        t = self.traces(x, batch_size=batch_size or 256)
        return t.output, t


    def call_tensors(self, x: Any, *, training: bool = False) -> tuple[Any, Traces]:
        """``model(x)`` with traces: the output *tensor* (eager, so a ``GradientTape``
        around the call sees it, as with ``model(x)``) and the traces of that same pass.

        ``x`` is one batch (an array or a tensor), as ``model.__call__`` takes it; it is
        not validated here beyond what Keras itself checks.
        """
        outs = self._multi(x, training=training)
        arrays = [o.numpy() if hasattr(o, "numpy") else np.asarray(o) for o in outs]
        return outs[0], self._traces(*self._split(arrays), self._extrema_of(arrays))


def _numpy_if_tensor(x: Any) -> Any:
    """A tf/keras tensor as NumPy (other values unchanged)."""
    if isinstance(x, (np.ndarray, TrainingData)) or x is None:
        return x
    if hasattr(x, "numpy") and callable(x.numpy) and hasattr(x, "shape") and hasattr(x, "dtype"):
        try:
            return x.numpy()
        except Exception:  # a symbolic tensor: leave it to the caller's error
            return x
    return x
