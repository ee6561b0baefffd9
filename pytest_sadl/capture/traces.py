"""Activation traces of a Keras 3 model: every chosen layer, captured in the model's own
forward pass (:mod:`pytest_sadl.capture.forward`), reduced to one value per neuron.

Reduction (one rule for every layer): an output of rank > 2 is averaged over every axis
but the batch and the last, giving one value per channel or feature -- the spatial mean
of a conv map ``(n, h, w, c)``, the mean over time of a sequence ``(n, t, f)`` (an LSTM
with ``return_sequences``, a ``TimeDistributed`` dense), the mean over time and space of
``(n, t, h, w, c)`` (a ``TimeDistributed`` conv). NC scales each input's *whole* output
(every time step and position) to [0, 1] before that mean, so such layers also yield
their per-input minimum and maximum (``extrema``). The reduction happens inside the
compiled pass: one batch of full feature maps exists at a time.

Public API
----------
``TraceModel(model, sa_layers=None, coverage_layers=None, *, output=None, classifier=None, jit="auto", extrema=False)``
    ``sa_layers``/``coverage_layers``: paths, unique names or indices (see
    :func:`pytest_sadl.capture.layers.resolve_layers`); ``None`` means the defaults
    (:meth:`default_sa_layers`: the last hidden layer with neurons before the output;
    :meth:`default_coverage_layers`: every layer with neurons). ``output``: which output
    of a multi-output model gives the class (name or index; default the first).
    ``.traces(x, batch_size=256, progress=None) -> Traces`` (batched; ``x`` an array, a
    dict or list of arrays for a model with several inputs, a tensor, a
    ``tf.data.Dataset`` or :class:`~pytest_sadl.capture.data.TrainingData`);
    ``.traces_and_ranges(x, batch_size=256, progress=None) -> (Traces, NeuronRanges)``, the
    profile build's pass: the coverage traces folded into their ranges batch by batch,
    not kept (``.traces_folding(x, fit, ...)``: into a given ``RangeFit``);
    ``.call_and_trace(x, batch_size=None, **predict_kwargs) -> (output, Traces)`` for
    recording ``predict``: the model's whole output as ``predict`` returns it and the
    traces of the *same* forward pass; ``.call_tensors(x) -> (output tensors, Traces)``
    for ``model(x)`` (a compiled pass reused across calls; gradients flow on
    TensorFlow); ``.compiled_passes`` counts its traces and compilations;
    ``.unrecordable(x)`` says why a ``model(x)`` call cannot be
    recorded (``None`` when it can). Also ``.prepare(data)``, ``.predictions(output)``,
    ``.input_names``, ``.input_shapes``, ``.input_shape`` (the first input's),
    ``.output_name``, ``.output_names``, ``.sa_sizes``, ``.coverage_sizes``, ``.jit``.
``Traces``
    ``sa`` ``(n, d)`` float32 (the SA layers' traces concatenated in order), ``coverage``
    (list of ``(n, c)`` float32, one per coverage layer), ``pred`` (``(n,)`` int64 argmax
    class for a classifier, ``(n, k)`` float32 raw output for a regression model),
    ``output`` (the measured output ``(n, k)``), ``sa_layers``, ``coverage_layers``,
    ``coverage_extrema``.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

import numpy as np

from pytest_sadl.capture.arrays import Progress, Traces, resolve_output
from pytest_sadl.capture.data import TrainingData, adjust_rank, check_batch, is_text, load_training_data
from pytest_sadl.capture.failures import message
from pytest_sadl.capture.forward import (
    Forward,
    Seen,
    backend,
    has_accelerator,
    in_graph_context,
    is_symbolic,
    probe,
    to_numpy,
)
from pytest_sadl.capture.layers import (
    check_model,
    check_scope_names,
    describe_layers,
    graph_probe,
    is_activated,
    is_activation_only,
    is_pass_through,
    is_per_neuron,
    resolve_layers,
    walk,
)
from pytest_sadl.errors import SadlDataError, SadlLayerError, SadlModelError
from pytest_sadl.text import one_line

__all__ = ["TraceModel", "default_sa_layers", "default_coverage_layers", "is_classifier"]

_JIT_MIN_INPUTS = 2048
_AHEAD = 2
"""Batches a JAX run keeps in flight (dispatched, not yet brought to the host) while it
prepares the next: the host overlaps the pass, as Keras' ``predict`` does, with at most
three batches' captures held (1.04x against 0.95x ``predict``'s CPU time on the digits
ConvNet of ``benchmarks/peers.py``, none in flight against two)."""
_REGRESSION_LOSSES = (
    "mean_squared",
    "mse",
    "mae",
    "mean_absolute",
    "huber",
    "log_cosh",
    "logcosh",
    "poisson",
    "mape",
    "msle",
)


def _reduce(tensor: Any) -> Any:
    """The mean over every axis but the batch and the last, as float32 (rank 1: one neuron)."""
    import keras

    rank = len(tensor.shape)
    if rank > 2:
        tensor = keras.ops.mean(tensor, axis=tuple(range(1, rank - 1)))
    elif rank < 2:
        tensor = keras.ops.expand_dims(tensor, -1)
    if tensor.dtype != "float32":
        tensor = keras.ops.cast(tensor, "float32")
    return tensor


def _extrema(tensor: Any) -> tuple[Any, Any]:
    import keras

    axes = tuple(range(1, len(tensor.shape)))
    return keras.ops.cast(keras.ops.min(tensor, axis=axes), "float32"), keras.ops.cast(
        keras.ops.max(tensor, axis=axes), "float32"
    )


def _is_graph_model(model: Any) -> bool:
    """Sequential or functional: the layers' order is the graph's."""
    import keras

    try:
        from keras.src.models.functional import Functional
    except ImportError:  # pragma: no cover - keras internals moved
        return isinstance(model, keras.Sequential) or hasattr(model, "_nodes_by_depth")
    return isinstance(model, (Functional, keras.Sequential))


@dataclass(frozen=True)
class _Input:
    name: str
    shape: tuple[int | None, ...]  # without the batch axis
    dtype: str


def _model_inputs(model: Any) -> tuple[list[_Input], str]:
    """The model's inputs and how it takes them: ``single``, ``list`` or ``dict``."""
    struct = _graph_inputs(model)
    if struct is not None:
        return _inputs_of_struct(struct)
    return _built_inputs(model)


def _graph_inputs(model: Any) -> Any:
    """A functional (or built Sequential) model's input structure; ``None`` for another model."""
    if not _is_graph_model(model):
        return None
    struct = getattr(model, "_inputs_struct", None)
    if struct is None:
        try:
            struct = list(model.inputs)
        except (AttributeError, ValueError):  # an unbuilt Sequential
            struct = None
    return struct


def _inputs_of_struct(struct: Any) -> tuple[list[_Input], str]:
    """The inputs of a graph model's input structure (symbolic tensors) and how it takes them."""
    from keras import tree

    flat = tree.flatten(struct)
    return [_Input(str(t.name), tuple(t.shape[1:]), str(t.dtype)) for t in flat], _input_kind(struct, len(flat))


def _input_kind(struct: Any, count: int) -> str:
    """How a graph model takes its ``count`` inputs: ``dict``, ``list`` or ``single`` (a list of one too)."""
    if isinstance(struct, dict):
        return "dict"
    return "list" if isinstance(struct, (list, tuple)) and count != 1 else "single"


def _built_inputs(model: Any) -> tuple[list[_Input], str]:
    """The inputs of a subclassed model, from the shapes it was built with."""
    shapes = getattr(model, "_build_shapes_dict", None)
    if not model.built or not shapes:
        raise SadlModelError(
            f"model {model.name!r} is not built, so its layers have no outputs yet; give a Sequential "
            "model a keras.Input(shape=...) first layer, or call the model once on a batch (or "
            "model.build(input_shape)) before measuring it"
        )
    if len(shapes) != 1:
        raise SadlModelError(
            f"model {model.name!r} takes {len(shapes)} positional inputs ({', '.join(shapes)}); "
            "pytest-sadl calls a model with one argument: take a dict or a list of inputs instead"
        )
    shape = next(iter(shapes.values()))
    dtype = str(getattr(model, "input_dtype", None) or "float32")
    return _inputs_of_shape(shape, dtype)


def _inputs_of_shape(shape: Any, dtype: str) -> tuple[list[_Input], str]:
    """The inputs of one build shape: a dict of shapes, a list of shapes, or one shape."""
    if isinstance(shape, dict):
        return [_Input(str(k), tuple(shape[k])[1:], dtype) for k in sorted(shape)], "dict"
    if isinstance(shape, (list, tuple)) and shape and isinstance(shape[0], (list, tuple)):
        return [_Input(f"input_{i}", tuple(s)[1:], dtype) for i, s in enumerate(shape)], "list"
    return [_Input("input", tuple(shape)[1:], dtype)], "single"


def _output_names(model: Any, spec: Any) -> list[str]:
    from keras import tree

    flat = tree.flatten(spec)
    if isinstance(spec, dict):
        return sorted(spec)
    names = list(getattr(model, "output_names", None) or [])
    if len(names) == len(flat):
        return [str(n) for n in names]
    return [str(i) for i in range(len(flat))]


def _structure_key(model: Any, nodes: list[Any], inputs: list[_Input]) -> tuple[Any, ...]:
    """What a probe, and a pass traced with taps, depend on of ``model``: its layers (paths,
    objects, a ``call`` set on one or on the model) and its inputs."""
    return (  # a replaced call itself, not its id (which a later function may reuse)
        tuple((n.path, id(n.layer), n.layer.__dict__.get("call")) for n in nodes),
        model.__dict__.get("call"),
        tuple(inputs),
    )


_PROBE = "_sadl_probe"  # the attributes of a model that keep its probe and its traced passes
_PASSES = "_sadl_passes"
_MAX_PASSES = 4
_KEPT_LOCK = threading.Lock()


_T = TypeVar("_T")


def _kept(model: Any, attr: str, key: tuple[Any, ...], make: Callable[[], _T], most: int) -> _T:
    """What ``make()`` gives for ``key``, kept on ``model`` (in its attribute ``attr``, at
    most ``most`` keys, the least recently used dropped first) as Keras keeps
    ``model.predict_function``, so that later trace models of the model reuse it: its
    symbolic probe (about a third of a second for MobileNetV2; a session makes the build's
    trace model, then the recording's) and its traced passes (about a second for
    MobileNetV2's 151 taps: a second build, or ``sadl profile layers`` then a build, traces
    nothing). Kept on the model, not in a weak mapping whose values (a pass holds its
    first trace model) would keep the model alive: they are collected with it."""
    with _KEPT_LOCK:  # trace models made in several threads
        kept = model.__dict__.get(attr)
        if not isinstance(kept, dict):
            kept = {}
            try:
                object.__setattr__(model, attr, kept)  # not Keras' tracked __setattr__
            except (AttributeError, TypeError):  # pragma: no cover - a model without a __dict__
                return make()
        value: _T = kept.pop(key, None) or make()
        kept[key] = value  # the newest last
        while len(kept) > most:
            del kept[next(iter(kept))]
        return value


def _before_last_dense(candidates: list[str], by_path: dict[str, Any]) -> list[str]:
    """The candidates without their trailing activation layers and the layer before them."""
    candidates = list(candidates)
    while candidates and is_activation_only(by_path[candidates[-1]]):
        candidates.pop()
    return candidates[:-1]


def _hands_on(layer: Any, past_first: bool) -> bool:
    """Whether an activation's reach goes on back through ``layer``: an activation layer,
    or (``past_first``: past the layer it was called on) a pass-through one."""
    return is_activation_only(layer) or (past_first and is_pass_through(layer))


def _as_strings(a: np.ndarray, text: bool, name: str, label: str) -> np.ndarray:
    """Text for a string input as an object array (as Keras takes it); raises for numbers."""
    if not text:
        raise SadlDataError(
            f"{label} has dtype {a.dtype} but the model's input {name!r} takes strings; give the raw text"
        )
    return a if a.dtype == object else a.astype(object)


def _padded(batch: dict[str, np.ndarray], n: int, size: int) -> dict[str, np.ndarray]:
    """A batch of ``n`` rows padded with zero rows to ``size`` (as it is when ``size`` is ``n``)."""
    if size == n:
        return batch
    return {k: np.concatenate([v, np.zeros((size - n,) + v.shape[1:], v.dtype)]) for k, v in batch.items()}


def _measures(layer: Any, source: Any, outputs: set[int]) -> bool:
    """Whether ``layer`` (an activation or ``BatchNormalization`` layer, called on the
    output of ``source`` alone) is where ``source``'s neurons are measured: ``source``
    is not yet activated and gives no model output."""
    return is_per_neuron(layer) and not (is_activated(source) or id(source) in outputs)


def _ran_once(seen: Seen) -> bool:
    """A layer that ran once in the probe's pass and returned one tensor."""
    return seen.calls == 1 and seen.shape is not None


def _loss_name(loss: Any) -> str:
    """A loss's name in lower case: the string itself, or the loss object's or function's name."""
    name = loss if isinstance(loss, str) else getattr(loss, "name", None) or getattr(loss, "__name__", "")
    return str(name).lower()


def _classifier_by_loss(loss: Any) -> bool | None:
    """Whether a loss names a classifier (cross-entropy, hinge) or a regression;
    ``None`` when there is no loss or its name says neither."""
    if loss is None:
        return None
    name = _loss_name(loss)
    if "crossentropy" in name or "hinge" in name:
        return True
    if any(k in name for k in _REGRESSION_LOSSES):
        return False
    return None


class Tracer(Protocol):
    """What the profile, the recorder, Dask workers and ``sadl`` ask of a trace model:
    :class:`TraceModel` (Keras on TensorFlow, JAX or torch) and
    :class:`~pytest_sadl.capture.torch.TorchTraceModel` (a native ``torch.nn.Module``)
    both give it; :func:`trace_model` makes the one a model needs."""

    model: Any
    records: str  # what the recorder wraps: "keras" (predict and __call__) or "forward"
    channels_first: bool  # image inputs are (n, c, h, w)
    input_names: list[str]
    name: str

    def traces(
        self, x: Any, batch_size: int = 256, *, progress: Progress | None = None, what: str = "inputs"
    ) -> Traces: ...

    def traces_and_ranges(
        self, x: Any, batch_size: int = 256, *, progress: Progress | None = None, what: str = "inputs"
    ) -> tuple[Traces, Any]: ...

    def traces_folding(
        self, x: Any, fit: Any, batch_size: int = 256, *, progress: Progress | None = None, what: str = "inputs"
    ) -> Traces: ...

    def call_and_trace(self, x: Any, batch_size: int | None = None, **kwargs: Any) -> tuple[Any, Traces]: ...

    def prepare(self, data: TrainingData) -> TrainingData: ...


def trace_model(
    model: Any,
    sa_layers: Sequence[str | int] | None = None,
    coverage_layers: Sequence[str | int] | None = None,
    **options: Any,
) -> Any:
    """The :class:`Tracer` of ``model``: a :class:`~pytest_sadl.capture.torch.TorchTraceModel`
    for a native ``torch.nn.Module``, else a :class:`TraceModel` (``options``: ``output``,
    ``classifier``, ``jit``, ``extrema``, as both take them)."""
    if _is_torch_module(model):
        from pytest_sadl.capture.torch import TorchTraceModel

        return TorchTraceModel(model, sa_layers, coverage_layers, **options)
    return TraceModel(model, sa_layers, coverage_layers, **options)


class TraceModel:
    """A Keras model whose chosen layers are captured in its own forward pass.

    ``classifier`` overrides :func:`is_classifier`'s rule. ``jit``: ``"auto"`` compiles
    the pass with XLA on TensorFlow for passes of at least 2048 inputs (a training set)
    when TensorFlow sees an accelerator, and runs the plain graph on a CPU-only machine
    (what Keras' own ``predict`` does there); ``True`` always, ``False`` never; on JAX
    the pass is always ``jax.jit``-compiled.
    The wrapped model is not modified (a layer's ``call`` is tapped only while the pass
    is traced).

    A ``torch.nn.Module`` is traced by :class:`~pytest_sadl.capture.torch.TorchTraceModel`
    (forward hooks); :func:`trace_model` chooses between the two.
    """

    records = "keras"  # the recorder wraps predict, predict_on_batch and __call__
    channels_first = False  # image inputs are (n, h, w, c), as Keras' default data format

    def __init__(
        self,
        model: Any,
        sa_layers: Sequence[str | int] | None = None,
        coverage_layers: Sequence[str | int] | None = None,
        *,
        output: str | int | None = None,
        classifier: bool | None = None,
        jit: bool | str = "auto",
        extrema: bool = False,
    ) -> None:
        if _is_torch_module(model):
            raise SadlModelError(
                f"{type(model).__name__} is a torch.nn.Module, not a Keras model; trace it with "
                "pytest_sadl.capture.trace_model(module, ...), which picks the torch trace model"
            )
        check_model(model)
        check_scope_names(model)

        self.model = model
        inputs, self._input_kind = _model_inputs(model)
        self._learn_inputs(inputs)
        self._nodes = walk(model)
        # Keras' functional models (and Sequential) take an input one axis short of a shape
        # ending in 1, or with one axis of 1 too many (Functional._adjust_input_rank); a
        # subclassed model takes what its call() takes
        self._adjusts_rank = _is_graph_model(model)
        layers = [n.layer for n in self._nodes]
        structure = _structure_key(model, self._nodes, inputs)
        spec, seen, owners = self._probe(inputs, layers, structure)
        self._seen = {n.path: s for n, s in zip(self._nodes, seen, strict=True)}
        self._learn_output(spec, owners, layers, output, classifier)
        self._choose_layers(sa_layers, coverage_layers, extrema)
        self._forward = self._shared_pass(structure)
        self._jit: bool | None = None  # TensorFlow: whether this trace model's XLA pass ran
        self._loop_fns: dict[Any, Any] = {}  # capture.loops: Keras' step functions with the taps
        self.jit_mode: bool | str = jit if backend() == "tensorflow" else bool(jit)
        self.name: str = str(model.name)

    def _learn_inputs(self, inputs: list[_Input]) -> None:
        """The inputs' names, shapes (without the batch axis) and dtypes."""
        self.input_names: list[str] = [i.name for i in inputs]
        self.input_shapes: dict[str, tuple[int | None, ...]] = {i.name: i.shape for i in inputs}
        self._dtypes = {i.name: i.dtype for i in inputs}
        self.input_shape: tuple[int | None, ...] = inputs[0].shape
        self.input_dtype: str = inputs[0].dtype

    def _shared_pass(self, structure: Any) -> Forward:
        """The pass with this trace model's taps, kept on the model: every trace model of
        one key computes the same flat outputs, so whichever made the pass serves them all."""
        model = self.model
        pass_key = (
            structure,
            self._input_kind,
            tuple(map(id, self._taps)),
            self._output_index,
            tuple(self._extrema_paths),
        )
        return _kept(model, _PASSES, pass_key, lambda: Forward(model, self._call, self._body), most=_MAX_PASSES)

    def _probe(self, inputs: list[Any], layers: list[Any], structure: Any) -> tuple[Any, list[Seen], Any]:
        """The probe's answer (output spec, what each layer was seen to do, the layer giving
        each output), kept on the model; a model that cannot run is one line."""
        import keras

        model = self.model
        symbolic = [keras.KerasTensor((None,) + i.shape, dtype=i.dtype, name=i.name) for i in inputs]
        try:  # the probe's answer is never changed after it: one serves every trace model
            answer: tuple[Any, list[Seen], Any] = _kept(
                model,
                _PROBE,
                structure,
                lambda: (
                    graph_probe(model, layers)
                    or probe(
                        self._call,
                        self._pack(dict(zip(self.input_names, symbolic, strict=True))),
                        layers,
                        [n.leaf for n in self._nodes],
                    )
                ),
                most=1,
            )
        except (SadlModelError, SadlLayerError):
            raise
        except Exception as exc:
            raise self._cannot_run(exc) from None
        return answer

    def _cannot_run(self, exc: Exception) -> SadlModelError:
        """The error for a model that fails on symbolic inputs: their shapes and the backend's line."""
        return SadlModelError(
            f"model {self.model.name!r} cannot be run on inputs of shape "
            f"{', '.join(f'{n}={tuple(s)}' for n, s in self.input_shapes.items())} "
            f"({one_line(message(exc))}); "
            "check that the model runs on a batch of its inputs"
        )

    def _learn_output(
        self, spec: Any, owners: Any, layers: list[Any], output: str | int | None, classifier: bool | None
    ) -> None:
        """The measured output (its name and layer), and whether the model is a classifier."""
        import keras

        self.output_names: list[str] = _output_names(self.model, spec)
        if self.output_names == ["0"] and owners[0] >= 0:
            self.output_names = [layers[owners[0]].name]
        self._output_index = self._resolve_output(output)
        self.output_name: str = self.output_names[self._output_index]
        owner = owners[self._output_index]
        self._output_layer: Any = layers[owner] if owner >= 0 else None
        self._output_layers = [layers[o] for o in owners if o >= 0]  # of every output
        self._learn_classifier(tuple(keras.tree.flatten(spec)[self._output_index].shape), classifier)

    def _learn_classifier(self, out_shape: tuple[Any, ...], classifier: bool | None) -> None:
        """Whether the model is a classifier (given, else judged by its output), checked."""
        self.classifier: bool = self._is_classifier(out_shape) if classifier is None else bool(classifier)
        if self.classifier and len(out_shape) != 2:
            raise SadlModelError(
                f"model {self.model.name!r} has output {self.output_name!r} of shape {out_shape}; a classifier "
                "needs a (batch, classes) output (pass classifier=False for a regression model)"
            )

    def _choose_layers(
        self, sa_layers: Sequence[str | int] | None, coverage_layers: Sequence[str | int] | None, extrema: bool
    ) -> None:
        """The SA and coverage layers (given, else the defaults), checked, their taps and sizes."""
        model = self.model
        self.sa_layers: list[str] = resolve_layers(model, sa_layers, purpose="SA layers") or self.default_sa_layers()
        self.coverage_layers: list[str] = (
            resolve_layers(model, coverage_layers, purpose="coverage layers") or self.default_coverage_layers()
        )
        self._set_taps(extrema)

    def _set_taps(self, extrema: bool) -> None:
        """The chosen layers checked, their taps (each once), extrema layers and sizes."""
        unique = list(dict.fromkeys(self.sa_layers + self.coverage_layers))
        for path in unique:
            self._check_tap(path)
        by_path = {n.path: n.layer for n in self._nodes}
        self._taps = [by_path[p] for p in unique]
        self._tap_index = {p: i for i, p in enumerate(unique)}
        self._set_sizes(extrema)

    def _set_sizes(self, extrema: bool) -> None:
        """The chosen layers' widths, and the coverage layers whose extrema are kept (with ``extrema``)."""
        self._extrema_paths = [p for p in self.coverage_layers if self._is_map(p)] if extrema else []
        self.sa_sizes: list[int] = [self._size(p) for p in self.sa_layers]
        self.coverage_sizes: list[int] = [self._size(p) for p in self.coverage_layers]

    @property
    def framework_version(self) -> str:
        """What the profile fingerprint holds of the framework: the Keras version (not
        the backend: TensorFlow, JAX and torch give the same traces)."""
        import keras

        return str(keras.__version__)

    # -- structure ------------------------------------------------------------------

    def _call(self, x: Any) -> Any:
        """The model's own ``__call__`` in inference mode on a batch in its structure."""
        return self.model(x, training=False)

    def _pack(self, inputs: dict[str, Any]) -> Any:
        """Inputs by name to the structure the model takes."""
        if self._input_kind == "single":
            return inputs[self.input_names[0]]
        if self._input_kind == "dict":
            return dict(inputs)
        return [inputs[n] for n in self.input_names]

    def _resolve_output(self, output: str | int | None) -> int:
        return resolve_output(output, self.output_names, self.model.name)

    def _is_classifier(self, shape: tuple[Any, ...]) -> bool:
        """See :func:`is_classifier`."""
        if len(shape) != 2:
            return False
        by_loss = _classifier_by_loss(self._output_loss())
        if by_loss is not None:
            return by_loss
        return self._classifier_by_head(shape)

    def _output_loss(self) -> Any:
        """The loss the model was compiled with for the measured output, or ``None``."""
        loss = getattr(self.model, "loss", None)
        if isinstance(loss, dict):
            return loss.get(self.output_name)
        if isinstance(loss, (list, tuple)):
            return loss[self._output_index] if self._output_index < len(loss) else None
        return loss

    def _classifier_by_head(self, shape: tuple[Any, ...]) -> bool:
        """A softmax or sigmoid output layer, else an output of two or more columns."""
        import keras

        layer = self._output_layer
        activation = getattr(layer, "activation", None)
        act_name = getattr(activation, "__name__", str(activation)).lower()
        if isinstance(layer, keras.layers.Softmax) or "softmax" in act_name or "sigmoid" in act_name:
            return True
        return shape[1] is not None and shape[1] >= 2

    def _check_tap(self, path: str) -> None:
        seen = self._seen[path]
        if seen.calls == 0:
            raise SadlLayerError(
                f"layer {path!r} of model {self.model.name!r} does not run in the model's forward pass; "
                f"choose a layer that does: {describe_layers(self.model)}"
            )
        if seen.calls > 1:
            raise SadlLayerError(
                f"layer {path!r} of model {self.model.name!r} runs {seen.calls} times in one forward pass "
                "(a shared layer, or one called in a loop), so it has no single trace; choose another layer"
            )
        if seen.structured or seen.shape is None:
            raise SadlLayerError(
                f"layer {path!r} of model {self.model.name!r} returns several tensors; choose a layer with one output"
            )

    def _is_map(self, path: str) -> bool:
        """Whether a layer's output has more axes than ``(batch, features)`` (a feature map)."""
        return len(self._seen[path].shape or ()) > 2

    def _size(self, path: str) -> int:
        shape = self._seen[path].shape or ()
        size = shape[-1] if len(shape) >= 2 else 1
        if size is None:
            raise SadlLayerError(f"layer {path!r} has an output of unknown width {shape}; choose another layer")
        return int(size)

    def _ordered(self) -> list[str]:
        """Leaves that ran once with one output: graph order for Sequential/functional
        models, call order for subclassed ones."""
        nodes = [n for n in self._nodes if n.leaf and _ran_once(self._seen[n.path])]
        if not _is_graph_model(self.model):
            nodes.sort(key=lambda n: self._seen[n.path].order)
        return [n.path for n in nodes]

    def _measured_after(self) -> dict[str, str]:
        """layer path -> the path of the activation or ``BatchNormalization`` layer called
        on its output alone, for a layer whose output is not yet activated (a linear
        Conv/Dense, a ``BatchNormalization``, an ``Add``...) and gives no model output:
        its neurons are measured after that layer (a chain Conv -> BatchNormalization ->
        ReLU once, at the ReLU), as ``Dense(64, activation="relu")`` is."""
        ordered = self._ordered()
        paths = [n.path for n in self._nodes]
        by_path = {n.path: n.layer for n in self._nodes}
        outputs = {id(layer) for layer in self._output_layers}
        out: dict[str, str] = {}
        for p in ordered:
            src = self._called_on(p, paths)
            if src is not None and src not in out and src in ordered and _measures(by_path[p], by_path[src], outputs):
                out[src] = p
        return out

    def _called_on(self, path: str, paths: list[str]) -> str | None:
        """The path of the layer whose output alone ``path``'s layer was called on, or ``None``."""
        j = self._seen[path].after
        return paths[j] if j >= 0 else None

    def _activated_by(self, path: str) -> set[str]:
        """The layers an activation layer's output activates: the one it was called on,
        and on back through activation and pass-through layers (``logits -> Reshape ->
        Activation("softmax")``, MobileNet's head) to the first layer with neurons."""
        paths = [n.path for n in self._nodes]
        by_path = {n.path: n.layer for n in self._nodes}
        out: set[str] = set()
        while _hands_on(by_path[path], bool(out)) and (j := self._seen[path].after) >= 0 and paths[j] not in out:
            path = paths[j]
            out.add(path)
        return out

    def default_coverage_layers(self) -> list[str]:
        """Every layer with neurons, each neuron once and after its activation: leaves
        that are not pass-through (Input, Flatten, Reshape, Permute, RepeatVector,
        padding/cropping/upsampling, Dropout and the other regularisers, Masking, Identity,
        Concatenate, preprocessing layers), a layer whose output an activation or
        ``BatchNormalization`` layer takes measured after it (see :meth:`_measured_after`)."""
        by_path = {n.path: n.layer for n in self._nodes}
        after = self._measured_after()
        return [p for p in self._ordered() if not is_pass_through(by_path[p]) and p not in after]

    def default_sa_layers(self) -> list[str]:
        """The last hidden layer with neurons before the measured output (and before the
        dense layer it activates, when the output layer is a bare ``Activation``/``Softmax``)."""
        by_path = {n.path: n.layer for n in self._nodes}
        candidates = self.default_coverage_layers()
        owner = next((p for p, layer in by_path.items() if layer is self._output_layer), None)
        if owner in candidates:
            candidates = self._hidden_before(owner, candidates, by_path)
        elif candidates:
            candidates = candidates[:-1]
        if not candidates:
            raise SadlLayerError(
                f"model {self.model.name!r} has no hidden layer with neurons to measure surprise on; "
                f"choose the SA layers explicitly; layers are: {describe_layers(self.model)}"
            )
        return [candidates[-1]]

    def _hidden_before(self, owner: str, candidates: list[str], by_path: dict[str, Any]) -> list[str]:
        """The candidates before the measured output's layer ``owner`` that are no other
        output's layer, without the layers a bare activation output activates."""
        candidates = [
            p
            for p in candidates[: candidates.index(owner) + 1]
            if p == owner or all(by_path[p] is not o for o in self._output_layers)
        ]
        candidates = candidates[: candidates.index(owner)]
        if is_activation_only(by_path[owner]):
            return self._not_activated_by(owner, candidates, by_path)
        return candidates

    def _not_activated_by(self, owner: str, candidates: list[str], by_path: dict[str, Any]) -> list[str]:
        """The candidates without the layers the activation output ``owner`` activates: they
        are the output's (Dense -> Softmax)."""
        activates = self._activated_by(owner)
        leaves = set(self._ordered())
        if any(p in leaves and not is_pass_through(by_path[p]) for p in activates):
            return [p for p in candidates if p not in activates]
        # the probe did not see what it was called on: the layers before it
        return _before_last_dense(candidates, by_path)

    @property
    def jit(self) -> bool | None:
        """Whether the pass is compiled (XLA / ``jax.jit``): ``None`` until a compiled pass
        was tried (with ``jit="auto"`` on a CPU-only machine, never: the plain graph runs)."""
        if backend() != "tensorflow":
            return self._forward.jit
        return False if self.jit_mode is False else self._jit  # this trace model's, not the shared pass's

    @property
    def compiled_passes(self) -> int:
        """How many times the pass has been traced or compiled so far (a handful over
        any number of calls of varying batch sizes: shapes are relaxed or padded)."""
        return self._forward.compilations()

    # -- the pass ---------------------------------------------------------------------

    def _body(self, x: Any) -> tuple[Any, list[Any]]:
        """Runs inside the compiled function: the model's output and the flat captures
        ``[measured output, tap traces..., (min, max) per extrema layer...]``."""
        from pytest_sadl.capture.forward import tapped, without_gradients

        captured: list[Any] = [None] * len(self._taps)
        me = threading.get_ident()

        def sink(i: int, out: Any) -> None:
            if threading.get_ident() == me:  # not another thread's call through a tapped layer
                captured[i] = out

        with tapped(self._taps, sink):
            output = self._call(x)
        with without_gradients():  # the output keeps its gradients; the captures go to the host
            return output, self.flat_captures(output, captured)

    def flat_captures(self, output: Any, captured: list[Any]) -> list[Any]:
        """Inside a pass: the model's ``output`` and the taps' outputs ``captured`` (in
        ``self.taps`` order) as the flat list :meth:`split` takes, reduced per neuron."""
        from keras import tree

        flat = [tree.flatten(output)[self._output_index]]
        flat += [_reduce(c) for c in captured]
        for path in self._extrema_paths:
            flat += list(_extrema(captured[self._tap_index[path]]))
        return flat

    def _use_jit(self, total: int | None) -> bool:
        """XLA for large passes on an accelerator only: compiling costs about half a
        second per batch shape, which pays on a training set and not on a test's few
        inputs; and on a CPU-only machine XLA's kernels lose to TensorFlow's own (oneDNN)
        ones on convolutions (8.3 s of CPU against 6.0 s for 60,000 MNIST inputs through
        a small ConvNet, ``benchmarks/bench_profile.py``), which is why Keras' ``predict``
        turns XLA off there too."""
        if self._jit_ruled_out():
            return False
        if self.jit_mode is True:
            return True
        return (total is None or total >= _JIT_MIN_INPUTS) and has_accelerator()

    def _jit_ruled_out(self) -> bool:
        """XLA turned off, known to fail for this model, or unable to take its string inputs."""
        return self.jit_mode is False or self._forward.jit is False or "string" in self._dtypes.values()

    def _run(self, batch: dict[str, np.ndarray], jit: bool, pad_to: int = 0) -> tuple[Any, list[np.ndarray]]:
        """One batch (inputs by name) through the pass, as NumPy."""
        return self._start(batch, jit, pad_to)()

    def _start(
        self, batch: dict[str, np.ndarray], jit: bool, pad_to: int = 0
    ) -> Callable[[], tuple[Any, list[np.ndarray]]]:
        """:meth:`_run` begun (:meth:`Forward.start`): a function that finishes it.

        A compiled pass (XLA on TensorFlow, ``jax.jit``) compiles once per batch shape, so
        rows are padded (with zeros, dropped from the result) up to ``pad_to`` or the next
        power of two: a handful of shapes over many calls rather than one per size.
        """
        n = int(next(iter(batch.values())).shape[0])
        compiled = backend() == "jax" or (jit and self._forward.jit is not False and backend() == "tensorflow")
        if compiled:
            batch = _padded(batch, n, max(pad_to, 1 << max(0, (n - 1).bit_length())))
        pending = self._forward.start(self._pack(batch), jit)
        if jit:  # XLA ran (True) or failed for this model (False)
            self._jit = self._forward.jit
        if not compiled:
            return pending

        def finish() -> tuple[Any, list[np.ndarray]]:
            from keras import tree

            output, flat = pending()
            return tree.map_structure(lambda a: a[:n], output), [a[:n] for a in flat]

        return finish

    # -- inputs -------------------------------------------------------------------------

    def prepare(self, data: TrainingData) -> TrainingData:
        """``data`` bound to this model's inputs (by name) with their shapes checked."""
        bound = _preprocessed(self.model, data).bind(self.input_names)
        expected = self.input_shapes if len(self.input_names) > 1 else self.input_shape
        if self._adjusts_rank:  # column arrays (n,) for Input((1,)), as Keras' functional models take them
            bound = bound.adjusted(expected)
        bound.check_shape(expected)
        return bound

    def _as_batch(self, x: Any, what: str, offset: int) -> dict[str, np.ndarray]:
        """One batch as validated, cast arrays by input name."""
        arrays = x if isinstance(x, dict) else {self.input_names[0]: x}
        out = {}
        for name in self.input_names:
            a = np.asarray(arrays[name])
            if self._adjusts_rank:
                a = adjust_rank(a, self.input_shapes[name])
            label = what if len(self.input_names) == 1 else f"{what} (input {name!r})"
            check_batch(a, self.input_shapes[name], what=label, offset=offset)
            out[name] = self._cast(a, name, label)
        return out

    def _cast(self, a: np.ndarray, name: str, label: str) -> np.ndarray:
        """One input as the model's input dtype; strings (a ``TextVectorization`` or
        ``StringLookup`` first layer) as an object array of ``str``/``bytes``, as Keras
        takes them."""
        dtype, text = self._dtypes[name], is_text(a)
        if dtype == "string":
            return _as_strings(a, text, name, label)
        if text:
            raise SadlDataError(
                f"{label} holds strings but the model's input {name!r} takes {dtype}; give numbers "
                "(token ids), or make a TextVectorization or StringLookup layer the model's first layer"
            )
        return a if a.dtype == dtype else a.astype(dtype)

    def predictions(self, output: np.ndarray) -> np.ndarray:
        """Predicted classes (int64 argmax; threshold 0.5 for one sigmoid unit) or the raw output."""
        if not self.classifier:
            return np.asarray(output, dtype=np.float32)
        if output.shape[-1] == 1:
            return (output[:, 0] > 0.5).astype(np.int64)
        classes: np.ndarray = np.argmax(output, axis=1)
        return classes.astype(np.int64)

    @property
    def taps(self) -> list[Any]:
        """The layers whose outputs a pass captures (SA and coverage layers, each once)."""
        return list(self._taps)

    def split(self, flat: list[np.ndarray]) -> Traces:
        """:class:`Traces` from a pass's flat captures (:meth:`flat_captures`) as NumPy."""
        return self._split(flat)

    def _split(self, flat: list[Any], coverage: bool = True) -> Traces:
        out = np.asarray(flat[0])
        taps = flat[1 : 1 + len(self._taps)]
        sa_parts = [taps[self._tap_index[p]] for p in self.sa_layers]
        sa = sa_parts[0] if len(sa_parts) == 1 else np.concatenate(sa_parts, axis=1)
        return Traces(
            sa=np.asarray(sa, dtype=np.float32),
            coverage=[taps[self._tap_index[p]] for p in self.coverage_layers] if coverage else [],
            pred=self.predictions(out),
            output=out,
            sa_layers=list(self.sa_layers),
            coverage_layers=list(self.coverage_layers),
            coverage_extrema=self._extrema_of(flat[1 + len(self._taps) :]),
        )

    def _extrema_of(self, rest: list[Any]) -> list[Any] | None:
        """``(min, max)`` per coverage layer whose extrema are kept (``None`` for the others),
        from the flat captures after the taps; ``None`` when none is kept."""
        if not self._extrema_paths:
            return None
        values = iter(rest)
        pairs = {p: (next(values), next(values)) for p in self._extrema_paths}
        return [pairs.get(p) for p in self.coverage_layers]

    def _run_all(
        self, x: Any, batch_size: int, progress: Progress | None, what: str, fit: Any = None
    ) -> tuple[list[Any], Traces]:
        """Every batch of ``x`` through the pass. ``fit`` (a
        :class:`~pytest_sadl.criteria.neurons.RangeFit` of the coverage layers): their
        traces are folded into it batch by batch instead of kept, and the ``Traces``
        returned have no ``coverage``."""
        if batch_size < 1:
            raise SadlDataError(f"batch_size must be >= 1, got {batch_size}")
        data = x if isinstance(x, TrainingData) else load_training_data(_numpy_if_tensor(x), what=what)
        data = self.prepare(data)
        rows = self._rows(data.n, fit)
        outputs = self._run_batches(data, batch_size, rows, progress)
        if rows.done == 0:
            raise SadlDataError(f"{data.source} is empty (0 inputs); give at least one input")
        return outputs, self._split(rows.arrays(), coverage=fit is None)

    def _rows(self, n: int | None, fit: Any) -> _Rows:
        """Where a run's traces go: arrays of ``n`` rows, the coverage layers' folded into ``fit``."""
        folded = {} if fit is None else {1 + self._tap_index[p]: i for i, p in enumerate(self.coverage_layers)}
        # an SA layer's rows are kept, whether or not it is a coverage layer too
        dropped = set(folded) - {1 + self._tap_index[p] for p in self.sa_layers}
        return _Rows(n, folded, dropped, fit)

    def _run_batches(self, data: TrainingData, batch_size: int, rows: _Rows, progress: Progress | None) -> list[Any]:
        """The outputs of every batch of ``data``, their traces into ``rows``. An interrupted
        run (a timeout, Ctrl-C, SystemExit) carries the batches done as ``sadl_partial``."""
        what = data.source
        jit = self._use_jit(data.n)
        outputs: list[Any] = []
        pending: collections.deque[Callable[[], tuple[Any, list[np.ndarray]]]] = collections.deque()
        ahead = _AHEAD if backend() == "jax" else 0  # the other backends' passes are done when they return

        def finish_one() -> None:
            output, flat = pending.popleft()()
            outputs.append(output)
            rows.add(flat)
            if progress is not None:
                progress(rows.done, data.n)

        try:
            with self._forward.holding_state():
                offset = 0
                for batch in data.batches(batch_size):
                    b = self._as_batch(batch, what, offset)
                    offset += len(next(iter(b.values())))
                    pending.append(self._start(b, jit, pad_to=batch_size))
                    if len(pending) > ahead:
                        finish_one()
                while pending:
                    finish_one()
        except Exception:
            raise
        except BaseException as exc:  # a timeout, Ctrl-C, SystemExit: the batches done go with it
            if rows.done:
                exc.sadl_partial = self._split(  # type: ignore[attr-defined]
                    [None if a is None else a[: rows.done] for a in rows.arrays()], coverage=rows.fit is None
                )
            raise
        return outputs

    def traces(
        self, x: Any, batch_size: int = 256, *, progress: Progress | None = None, what: str = "inputs"
    ) -> Traces:
        """Traces of every input of ``x``, ``batch_size`` at a time, one pass per batch.

        For arrays (or memmaps) the result arrays are allocated once and filled batch by
        batch, so peak memory is the traces plus one batch of feature maps. A dataset is
        streamed. Bad inputs raise :class:`SadlDataError` naming the input index.
        """
        return self._run_all(x, batch_size, progress, what)[1]

    def traces_and_ranges(
        self, x: Any, batch_size: int = 256, *, progress: Progress | None = None, what: str = "inputs"
    ) -> tuple[Traces, Any]:
        """What a profile build needs of one pass: the traces without ``coverage`` (empty)
        and the coverage layers' :class:`~pytest_sadl.criteria.neurons.NeuronRanges`,
        equal to ``fit_ranges(traces(x).coverage)`` (the same error for NaN or inf), the
        coverage traces folded into running minima and maxima batch by batch rather than
        kept: no ``inputs x neurons`` array (365 MB for 1,764 inputs through
        MobileNetV2's 51,739 coverage neurons) to allocate and fill."""
        from pytest_sadl.criteria.neurons import RangeFit

        fit = RangeFit(self.coverage_sizes, self.coverage_layers)
        traces = self.traces_folding(x, fit, batch_size, progress=progress, what=what)
        return traces, fit.result()

    def traces_folding(
        self, x: Any, fit: Any, batch_size: int = 256, *, progress: Progress | None = None, what: str = "inputs"
    ) -> Traces:
        """The traces without ``coverage`` (empty), the coverage layers' traces folded into
        ``fit`` (a :class:`~pytest_sadl.criteria.neurons.RangeFit` of :attr:`coverage_sizes`)
        batch by batch instead: :meth:`traces_and_ranges`' pass, and a Dask worker's, whose
        fits the driver merges."""
        return self._run_all(x, batch_size, progress, what, fit)[1]

    def call_and_trace(self, x: Any, batch_size: int | None = None, **predict_kwargs: Any) -> tuple[Any, Traces]:
        """Run the model on ``x`` once; return ``(output, traces)`` from that one pass.

        ``output`` is what ``model.predict(x)`` returns (NumPy: an array, or a list/dict
        of arrays for a model with several outputs). ``model.predict``'s other keyword
        arguments (``verbose``, ``callbacks``, ``steps``) are accepted and ignored, so a
        wrapped ``predict`` can forward its arguments unchanged.
        """
        unknown = set(predict_kwargs) - {"verbose", "callbacks", "steps", "training", "mask"}
        if unknown:
            raise TypeError(f"call_and_trace() got unexpected keyword arguments {sorted(unknown)}")
        outputs, t = self._run_all(x, batch_size or 256, None, "inputs")
        if len(self.output_names) == 1 and not isinstance(outputs[0], (list, tuple, dict)):
            return t.output, t
        from keras import tree

        return tree.map_structure(lambda *a: np.concatenate(a), *outputs), t

    def unrecordable(self, x: Any) -> str | None:
        """Why ``model(x)`` cannot be recorded (``None``: it can)."""
        if is_symbolic(x):
            return "model(x) was called on symbolic tensors (inside tf.function or jax.jit/grad)"
        if in_graph_context():
            return "model(x) was called inside a tf.function (symbolic tensors)"
        return None

    def call_tensors(self, x: Any, *, training: bool = False) -> tuple[Any, Traces]:
        """``model(x)`` with traces: the output as the backend's tensors and the traces
        of that same pass. ``x`` is one batch in any structure ``model(x)`` takes.

        The pass is compiled once and reused (a ``tf.function`` on TensorFlow, which a
        ``GradientTape`` around the call differentiates as it would an eager
        ``model(x)``; ``jax.jit`` on JAX), so a test's many small calls cost about what
        a compiled ``model(x)`` costs: see :meth:`Forward.eager`."""
        output, flat = self._forward.eager(self._canonical_call_input(x))
        return output, self._split(flat)

    def _canonical_call_input(self, x: Any) -> Any:
        """A batch for ``model(x)``: single input as it is; several inputs by name."""
        if len(self.input_names) == 1:
            return x
        if isinstance(x, dict):
            return self._pack({n: x[n] for n in self.input_names})
        return self._pack(dict(zip(self.input_names, x, strict=True)))

    def describe_layers(self) -> list[dict[str, Any]]:
        """Every layer with its path, class, output shape and whether it is a default."""
        sa, cov = set(self.sa_layers), set(self.coverage_layers)
        out = []
        for n in self._nodes:
            s = self._seen[n.path]
            out.append(
                {
                    "path": n.path,
                    "class": type(n.layer).__name__,
                    "output_shape": None if s.shape is None else list(s.shape),
                    "calls": s.calls,
                    "sa": n.path in sa,
                    "coverage": n.path in cov,
                }
            )
        return out


class _Rows:
    """A pass's flat outputs collected batch by batch: with the number of inputs known,
    into arrays allocated at the first batch and filled (peak memory: the traces and one
    batch), else as parts joined at the end; the outputs at the indices of ``folded``
    (flat index: coverage layer) go to ``fit`` too, and those at ``dropped`` only there
    (``None`` in :meth:`arrays`)."""

    def __init__(self, total: int | None, folded: dict[int, int], dropped: set[int], fit: Any) -> None:
        self.total, self.folded, self.dropped, self.fit = total, folded, dropped, fit
        self.done = 0
        self.filled: list[np.ndarray | None] | None = None
        self.parts: list[list[np.ndarray | None]] = []

    def add(self, flat: list[np.ndarray]) -> None:
        n = int(flat[0].shape[0])
        for j, i in self.folded.items():
            self.fit.update(i, flat[j], self.done)
        kept = [None if j in self.dropped else a for j, a in enumerate(flat)]
        if self.total is None:  # joined by np.concatenate at the end: owned arrays, not the pass's views
            self.parts.append(kept)
        else:
            self._fill(kept, n)
        self.done += n

    def _fill(self, kept: list[np.ndarray | None], n: int) -> None:
        """Copy one batch's ``n`` rows into the arrays (allocated at the first batch)."""
        if self.filled is None:
            assert self.total is not None
            self.filled = [None if a is None else np.empty((self.total,) + a.shape[1:], dtype=a.dtype) for a in kept]
        for dst, src in zip(self.filled, kept, strict=True):
            if dst is not None:
                dst[self.done : self.done + n] = src

    def arrays(self) -> list[np.ndarray | None]:
        if self.filled is not None:
            return self.filled
        return [
            None if j in self.dropped else np.concatenate([p[j] for p in self.parts]) for j in range(len(self.parts[0]))
        ]


def _is_torch_module(model: Any) -> bool:
    from pytest_sadl.capture.torchdata import is_torch_module  # imports no torch

    return is_torch_module(model)


def _numpy_if_tensor(x: Any) -> Any:
    """A backend tensor as NumPy (arrays, structures and other values unchanged)."""
    if isinstance(x, (np.ndarray, TrainingData)) or x is None:
        return x
    if isinstance(x, dict):
        return {k: _numpy_if_tensor(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):  # several inputs in model.inputs order (never (x, y) here)
        return [_numpy_if_tensor(v) for v in x]
    return _eager_numpy(x)


def _eager_numpy(x: Any) -> Any:
    """An eager tensor as NumPy; a symbolic tensor, or anything that fails, unchanged
    (the caller names the problem)."""
    if hasattr(x, "shape") and hasattr(x, "dtype") and not is_symbolic(x):
        try:
            return to_numpy(x)
        except Exception:  # leave it to the caller's error
            return x
    return x


def default_coverage_layers(model: Any) -> list[str]:
    """Every layer with neurons of ``model`` (see :meth:`TraceModel.default_coverage_layers`)."""
    return TraceModel(model).coverage_layers


def default_sa_layers(model: Any) -> list[str]:
    """The last hidden layer with neurons (see :meth:`TraceModel.default_sa_layers`)."""
    return TraceModel(model).sa_layers


def is_classifier(model: Any, output: str | int | None = None) -> bool:
    """Whether the model's measured output gives classes (argmax) rather than values.

    The rule: a compiled loss names it (``*crossentropy*``/``hinge`` means classifier;
    ``mse``, ``mae``, ``huber``, ``log_cosh``... means regression); otherwise a softmax
    output, or a sigmoid output, is a classifier, an output of width 1 without sigmoid
    is a regression, and an output of width >= 2 (logits) is a classifier. An output of
    rank other than 2 is not a classifier.
    """
    return TraceModel(model, output=output).classifier


def _preprocessed(model: Any, data: TrainingData, batch_size: int = 256) -> TrainingData:
    """Raw text or images for a keras-hub task (a model with a ``preprocessor``, whose inputs
    are its backbone's) run through that preprocessor as the task's ``predict`` applies it:
    the backbone's inputs (token ids, segment ids, padding mask) as a dict of arrays by name,
    or the images as its image converter makes them (resized, scaled). Other data, and
    models without a preprocessor, as they are."""
    pre: Any = getattr(model, "preprocessor", None)
    raw = None if pre is None or data.preprocessed else _raw_inputs(pre, data.x)
    if raw is None:
        return data
    parts = [pre(raw[i : i + batch_size]) for i in range(0, len(raw), batch_size)]
    return replace(data, x=_joined_parts(parts), _fingerprint=None, _row_digests=None, preprocessed=True)


def _joined_parts(parts: list[Any]) -> Any:
    """Preprocessed batches joined: one array, or a dict of arrays by input name."""
    if isinstance(parts[0], dict):
        return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    return np.concatenate([np.asarray(p) for p in parts])


def _raw_inputs(pre: Any, x: Any) -> np.ndarray | None:
    """``x`` as an array when the preprocessor ``pre`` takes it: texts (a list or an array of
    strings), or numeric images ``(n, height, width[, channels])`` for a preprocessor with an
    image converter (a keras-hub image task's); else ``None``."""
    if _is_list_of_values(x):
        x = np.asarray(x)
    if not isinstance(x, np.ndarray) or len(x) == 0:
        return None
    return x if is_text(x) or _is_image_for(pre, x) else None


def _is_list_of_values(x: Any) -> bool:
    """A non-empty list that is not one of arrays (a list of texts, say)."""
    return isinstance(x, list) and bool(x) and not all(hasattr(v, "shape") for v in x)


def _is_image_for(pre: Any, x: np.ndarray) -> bool:
    return getattr(pre, "image_converter", None) is not None and x.ndim in (3, 4) and x.dtype.kind in "fiu"
