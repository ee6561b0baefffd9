"""Which layers a model has, by path, and which of them pytest-sadl measures by default.

Pure Keras introspection, the same on every backend: nothing here runs the model.

A model's layers form a tree. The children of a ``keras.Model`` are ``model.layers``;
the children of a layer of the user's own (a custom block: its class is not defined by
Keras) are the layers it tracks as attributes; Keras' built-in layers are leaves
(``TimeDistributed``, ``Bidirectional`` and recurrent layers run their inner layer per
time step, so their inner layers are never taps). A layer is named by its *path*, the
names from the top joined by ``/``: ``conv1`` for a layer of the model itself,
``encoder/conv2`` for a layer inside the nested model or block ``encoder``.

Public API
----------
``walk(model) -> list[Node]``
    Every layer of the tree, parents before children, in tracking order.
``resolve_layers(model, spec, *, purpose) -> list[str]``
    Paths, unique names or indices (into ``model.layers``) to paths; an unknown one
    raises :class:`SadlLayerError` listing the paths there are.
``describe_layers(model) -> str``
    The listing that errors and ``sadl profile layers`` print.
``is_pass_through(layer)``, ``is_activation_only(layer)``, ``is_container(layer)``,
``is_per_neuron(layer)``, ``is_activated(layer)``
    The rules the defaults use (see :mod:`pytest_sadl.capture.traces`).
``graph_probe(model, layers) -> (output spec, list of Seen, owners) | None``
    What :func:`pytest_sadl.capture.forward.probe` finds by running the model
    symbolically, read from a plain functional model's graph instead (``None`` for any
    other model).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_sadl.capture.forward import Seen, backend, casts_input
from pytest_sadl.errors import SadlLayerError, SadlModelError
from pytest_sadl.text import terminal

__all__ = [
    "Node",
    "walk",
    "resolve_layers",
    "describe_layers",
    "check_model",
    "check_scope_names",
    "is_pass_through",
    "is_activation_only",
    "is_container",
    "is_per_neuron",
    "is_activated",
]

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
_NORMALIZATION_NAMES = ("BatchNormalization",)


def _keras() -> Any:
    import keras

    return keras


def check_model(model: Any) -> None:
    """Raise :class:`SadlModelError` unless ``model`` is a ``keras.Model``."""
    if not isinstance(model, _keras().Model):
        raise SadlModelError(
            f"expected a keras.Model, got {type(model).__module__}.{type(model).__qualname__}; "
            "give a Keras 3 model (a .keras file or a model object) or a torch.nn.Module"
        )


#: The names TensorFlow takes for a name scope (``_VALID_SCOPE_NAME_REGEX`` in its
#: ``framework/ops.py``): a traced pass, Keras' own ``predict`` too, enters one per layer.
_SCOPE_NAME = re.compile(r"[A-Za-z0-9_.\\/>-]*")


def check_scope_names(model: Any) -> None:
    """On TensorFlow, raise :class:`SadlLayerError` naming the first layer whose name
    TensorFlow refuses as a name scope (``Dense(32, name="hidden 2 (relu)")``): the model
    runs eagerly, but no traced pass (Keras' ``predict``, pytest-sadl's) can run it."""
    if backend() != "tensorflow":
        return
    bad = [node.path for node in walk(model) if not _SCOPE_NAME.fullmatch(str(node.layer.name))]
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise SadlLayerError(
            f"layer {terminal(repr(bad[0]))}{more} of model {terminal(repr(model.name))} has a name TensorFlow "
            "refuses as a name scope (only letters, digits and _ . / > - are allowed), so the model cannot "
            f"be traced: Keras' own model.predict fails on it too; rename the layer (e.g. name={_scope_name(bad[0])!r})"
        )


def _scope_name(path: str) -> str:
    """A name TensorFlow takes as a scope for the layer at ``path`` (its refused characters as ``_``)."""
    name = path.rsplit("/", 1)[-1]
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_.>-]", "_", name)).strip("_") or "layer"


def is_pass_through(layer: Any) -> bool:
    """A layer that moves or drops values but computes no neuron of its own."""
    if isinstance(layer, _types(_PASS_THROUGH_NAMES)):
        return True
    if isinstance(layer, _keras().layers.TimeDistributed):  # TimeDistributed(Flatten()) moves values too
        return is_pass_through(layer.layer)
    return type(layer).__module__.startswith("keras.src.layers.preprocessing")


def is_activation_only(layer: Any) -> bool:
    """An activation layer without weights (its neurons are the previous layer's)."""
    return isinstance(layer, _types(_ACTIVATION_NAMES)) and not layer.weights


def is_activated(layer: Any) -> bool:
    """Whether a layer's output is already after a non-linear activation: an activation
    layer (not ``Activation("linear")``), or a layer with an ``activation`` that is not
    linear (``Dense(64, activation="relu")``, an LSTM; a string or a function of the
    user's own counts as one)."""
    act = getattr(layer, "activation", None)
    if act is None:
        return isinstance(layer, _types(_ACTIVATION_NAMES))
    return (act if isinstance(act, str) else getattr(act, "__name__", "")) != "linear"


def is_per_neuron(layer: Any) -> bool:
    """A layer that takes another's neurons channel by channel and computes none of its
    own: an activation layer, or a ``BatchNormalization`` over the last (channel) axis (at
    inference, an affine map of each channel). The neurons of a layer it activates are
    measured after it."""
    if isinstance(layer, _types(_ACTIVATION_NAMES)):
        return True
    return isinstance(layer, _types(_NORMALIZATION_NAMES)) and _normalises_last_axis(layer)


def _normalises_last_axis(layer: Any) -> bool:
    """Whether a normalisation layer's axis is the last (channel) one."""
    axis, ndim = getattr(layer, "axis", -1), getattr(getattr(layer, "input_spec", None), "ndim", None)
    return axis == -1 or (isinstance(ndim, int) and axis == ndim - 1)


def _types(names: Sequence[str]) -> tuple[Any, ...]:
    """The classes of ``keras.layers`` named ``names`` (those this Keras has)."""
    layers = _keras().layers
    return tuple(getattr(layers, n) for n in names if hasattr(layers, n))


def is_container(layer: Any) -> bool:
    """A model, or a layer of the user's own that holds layers: walked, not a leaf."""
    if isinstance(layer, _keras().Model):
        return True
    if type(layer).__module__.startswith("keras."):
        return False
    return bool(_children(layer))


def _children(layer: Any) -> list[Any]:
    if isinstance(layer, _keras().Model):
        return list(layer.layers)
    if type(layer).__module__.startswith("keras."):
        return []
    flatten = getattr(layer, "_flatten_layers", None)
    return list(flatten(include_self=False, recursive=False)) if flatten is not None else []


@dataclass(frozen=True)
class Node:
    """One layer of the tree: its path, the layer object and whether it is a leaf."""

    path: str
    layer: Any
    leaf: bool


def walk(model: Any) -> list[Node]:
    """Every layer under ``model`` (not the model itself), parents before children."""
    out: list[Node] = []
    seen: set[int] = set()

    def visit(parent: Any, prefix: str) -> None:
        for child in _children(parent):
            if id(child) in seen:  # a layer tracked twice (shared): listed once
                continue
            seen.add(id(child))
            path = f"{prefix}{child.name}"
            container = is_container(child)
            out.append(Node(path, child, not container))
            if container:
                visit(child, path + "/")

    visit(model, "")
    return out


def describe_layers(model: Any) -> str:
    """``index:path (Class)`` for the top-level layers, ``path (Class)`` for nested ones."""
    top = {id(layer): i for i, layer in enumerate(model.layers)}
    parts = [_described(node, top.get(id(node.layer))) for node in walk(model)]
    return ", ".join(parts) or "(none: the model tracks no layers)"


def _described(node: Node, index: int | None) -> str:
    """``index:path (Class)`` for a top-level layer (``index`` in ``model.layers``), ``path (Class)`` else."""
    prefix = f"{index}:" if index is not None and "/" not in node.path else ""
    return f"{prefix}{node.path} ({type(node.layer).__name__})"


def resolve_layers(model: Any, spec: Sequence[str | int] | str | int | None, *, purpose: str) -> list[str]:
    """Resolve paths, names or indices to unique layer paths, in the order given.

    An item is a path (``encoder/conv2``), a name that is unique in the tree (``conv2``),
    or an index (negative allowed) into ``model.layers``. ``purpose`` names the option
    in errors. ``None`` or an empty list returns ``[]``: the caller applies its default.
    """
    if spec is None:
        return []
    if isinstance(spec, (str, int)):
        spec = [spec]
    nodes = walk(model)
    by_path = {n.path: n for n in nodes}
    by_name: dict[str, list[Node]] = {}
    for n in nodes:
        by_name.setdefault(n.layer.name, []).append(n)
    out: list[str] = []
    for item in spec:
        path = _layer_path(model, item, by_path, by_name, purpose)
        if path not in out:
            out.append(path)
    return out


def _layer_path(model: Any, item: Any, by_path: dict[str, Node], by_name: dict[str, list[Node]], purpose: str) -> str:
    """The path of one item: a path, a unique name, or an index (also given as digits)."""
    if isinstance(item, bool) or not isinstance(item, (str, int, np.integer)):
        raise SadlLayerError(
            f"{purpose}: {item!r} is not a layer path, name or index; layers are: {describe_layers(model)}"
        )
    if isinstance(item, str) and item.lstrip("-").isdigit() and item not in by_path:
        item = int(item)
    if isinstance(item, (int, np.integer)):
        return _indexed_layer(model, int(item), purpose)
    return _named_layer(model, item, by_path, by_name, purpose)


def _indexed_layer(model: Any, index: int, purpose: str) -> str:
    """The path of ``model.layers[index]`` (negative allowed)."""
    top = list(model.layers)
    if not -len(top) <= index < len(top):
        raise SadlLayerError(
            f"{purpose}: layer index {index} is out of range for model {model.name!r} with "
            f"{len(top)} layers: {describe_layers(model)}"
        )
    return str(top[index].name)


def _named_layer(model: Any, item: str, by_path: dict[str, Node], by_name: dict[str, list[Node]], purpose: str) -> str:
    """The path of the layer at path ``item``, or of the one layer named ``item``."""
    if item in by_path:
        return item
    named = by_name.get(item, [])
    if len(named) == 1:
        return named[0].path
    if named:
        raise SadlLayerError(
            f"{purpose}: {item!r} names {len(named)} layers ({', '.join(n.path for n in named)}); give the path"
        )
    raise SadlLayerError(f"{purpose}: model {model.name!r} has no layer {item!r}; layers are: {describe_layers(model)}")


# Keras layers that run the user's code (a function, a torch or JAX module, a SavedModel),
# which may return a structure the graph flattens or call the model's other layers
_RUNS_USER_CODE = (
    "keras.src.layers.core.lambda_layer",
    "keras.src.utils.torch_utils",
    "keras.src.utils.jax_layer",
    "keras.src.export",
)


def graph_probe(model: Any, layers: Sequence[Any]) -> tuple[Any, list[Seen], list[int]] | None:
    """The symbolic probe's answer (:func:`~pytest_sadl.capture.forward.probe`: the
    output spec, what each of ``layers`` did in one forward pass, and the index of the
    layer giving each flat output or -1) read from the graph of a plain functional model,
    the nodes its ``call`` runs in the order it runs them, instead of running the model on
    symbolic inputs: about 0.3 s for MobileNetV2 and 0.6 s for EfficientNetB0 at the start
    of every session, for the same answer (tested on every kind of graph model).

    ``None`` (run the probe) unless the model is a ``keras.Model`` built from inputs and
    outputs whose ``call`` is Keras' own, every one of ``layers`` is one of its own
    top-level Keras layers (no nested model, no layer of the user's own, whose ``call``
    may run other layers or return a structure the graph does not keep; no ``Lambda``,
    torch, JAX or SavedModel layer, which run the user's code; no wrapper of another
    top-level layer), none of them is called twice, no ``call`` of the model or a layer
    was replaced, no output is given by a layer that may return its input itself
    (``Dropout``, ``Identity``, a linear ``Activation``: the probe names the layer before
    it) and no input takes strings (the probe tells a backend without string tensors,
    JAX or torch, apart)."""
    if not _graph_readable(model, layers):
        return None
    by_id = {id(layer): i for i, layer in enumerate(layers)}
    nodes_by_depth = getattr(model, "_nodes_by_depth", None)
    if not isinstance(nodes_by_depth, dict):  # pragma: no cover - keras internals moved
        return None
    seen = [Seen() for _ in layers]
    for order, (i, node) in enumerate(_graph_calls(model, nodes_by_depth, by_id)):
        _note_call(seen, i, node, order, by_id)
    if any(s.calls > 1 for s in seen):  # a shared layer: the probe says which call gives an output
        return None
    owners = _graph_owners(model, by_id)
    if owners is None:
        return None
    return _output_spec(model), seen, owners


def _graph_calls(model: Any, nodes_by_depth: dict[int, Any], by_id: dict[int, int]) -> Iterator[tuple[int, Any]]:
    """``(index in layers, node)`` of each node of one of the layers, in the order the
    model's ``call`` runs them (as Function._run_through_graph does)."""
    available = {id(t) for t in model.inputs}
    for depth in sorted(nodes_by_depth, reverse=True):
        for node in nodes_by_depth[depth]:
            if not _runs(node, available):
                continue
            available.update(id(t) for t in node.outputs)
            i = by_id.get(id(node.operation))
            if i is not None:
                yield i, node


def _runs(node: Any, available: set[int]) -> bool:
    """Whether the model's ``call`` runs a graph node: an operation's, not an input's, on
    tensors (ids) already ``available``."""
    return bool(node.operation) and not node.is_input and all(id(t) in available for t in node.input_tensors)


def _note_call(seen: list[Seen], i: int, node: Any, order: int, by_id: dict[int, int]) -> None:
    """What layer ``i``'s call at graph node ``node`` (the ``order``-th call) did."""
    s = seen[i]
    s.calls += 1
    if s.order < 0:
        s.order = order
    s.structured = len(node.outputs) != 1
    s.shape = None if s.structured else tuple(d if isinstance(d, int) else None for d in node.outputs[0].shape)
    s.after = _called_on(node, by_id, seen)


def _output_spec(model: Any) -> Any:
    """The model's output structure as symbolic tensors, a singleton unpacked as Functional.call does."""
    keras = _keras()
    spec = keras.tree.map_structure(lambda t: keras.KerasTensor(t.shape, dtype=t.dtype), model._outputs_struct)
    if isinstance(spec, (list, tuple)) and len(spec) == 1:
        spec = spec[0]
    return spec


def _called_on(node: Any, by_id: dict[int, int], seen: list[Seen]) -> int:
    """The index of the layer whose output a graph node's layer is called on alone (its
    first argument, a mask aside), as the probe sees it, or -1: also when Keras casts that
    input on its way in (mixed precision), where the probe's ``call`` gets another tensor."""
    flat = _keras().tree.flatten(_first_argument(node))
    history = getattr(flat[0], "_keras_history", None) if len(flat) == 1 else None
    if history is None or casts_input(node.operation, history.operation, flat[0]):
        return -1
    j = by_id.get(id(history.operation), -1)
    return j if j >= 0 and seen[j].calls and not seen[j].structured else -1  # a layer that ran, with one output


def _first_argument(node: Any) -> Any:
    """A graph node's first argument (its ``inputs``), or ``None`` without arguments."""
    args = getattr(node, "arguments", None)
    if args is None:
        return None
    return args.args[0] if args.args else args.kwargs.get("inputs")


def _graph_readable(model: Any, layers: Sequence[Any]) -> bool:
    """Whether :func:`graph_probe` can answer for ``model`` (see there)."""
    try:
        from keras.src.models.functional import Functional
    except ImportError:  # pragma: no cover - keras internals moved
        return False
    if type(model) is not Functional or "call" in model.__dict__:
        return False
    if any(str(t.dtype) == "string" for t in model.inputs):  # (where the probe says what a backend refuses)
        return False
    own = {id(layer) for layer in getattr(model, "_operations", ())}
    return all(_plain_keras_layer(layer, own) for layer in layers)


def _plain_keras_layer(layer: Any, own: set[int]) -> bool:
    """Whether ``layer`` is one of the model's own top-level Keras layers (ids ``own``)
    that runs no user code, has its own ``call`` and wraps no other top-level layer."""
    module = type(layer).__module__
    return (
        id(layer) in own
        and module.startswith("keras.")
        and not module.startswith(_RUNS_USER_CODE)
        and "call" not in layer.__dict__
        and id(getattr(layer, "layer", None)) not in own  # a wrapper (TimeDistributed) of a top-level layer
    )


def _graph_owners(model: Any, by_id: dict[int, int]) -> list[int] | None:
    """The index of the layer giving each flat output of ``model`` (-1: none, a model
    input given back), or ``None`` when one may return its input itself (``Dropout``,
    ``Identity``, a linear ``Activation``: the probe names the layer before it)."""
    owners = []
    for t in model.outputs:
        op = _producer(t)
        if op is None:
            owners.append(-1)
        elif is_pass_through(op) or is_activation_only(op):
            return None
        else:
            owners.append(by_id.get(id(op), -1))
    return owners


def _producer(t: Any) -> Any:
    """The layer whose output the symbolic tensor ``t`` is; ``None`` for a model input."""
    history = getattr(t, "_keras_history", None)
    op = None if history is None else history.operation
    return None if op is None or isinstance(op, _keras().layers.InputLayer) else op
