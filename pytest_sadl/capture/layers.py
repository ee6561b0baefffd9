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
``is_pass_through(layer)``, ``is_activation_only(layer)``, ``is_container(layer)``
    The rules the defaults use (see :mod:`pytest_sadl.capture.traces`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_sadl.errors import SadlLayerError, SadlModelError

__all__ = [
    "Node",
    "walk",
    "resolve_layers",
    "describe_layers",
    "check_model",
    "is_pass_through",
    "is_activation_only",
    "is_container",
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


def is_pass_through(layer: Any) -> bool:
    """A layer that moves or drops values but computes no neuron of its own."""
    keras = _keras()
    types = tuple(getattr(keras.layers, n) for n in _PASS_THROUGH_NAMES if hasattr(keras.layers, n))
    if isinstance(layer, types):
        return True
    if isinstance(layer, keras.layers.TimeDistributed):  # TimeDistributed(Flatten()) moves values too
        return is_pass_through(layer.layer)
    return type(layer).__module__.startswith("keras.src.layers.preprocessing")


def is_activation_only(layer: Any) -> bool:
    """An activation layer without weights (its neurons are the previous layer's)."""
    keras = _keras()
    types = tuple(getattr(keras.layers, n) for n in _ACTIVATION_NAMES if hasattr(keras.layers, n))
    return isinstance(layer, types) and not layer.weights


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
    parts = []
    for node in walk(model):
        index = top.get(id(node.layer))
        prefix = f"{index}:" if index is not None and "/" not in node.path else ""
        parts.append(f"{prefix}{node.path} ({type(node.layer).__name__})")
    return ", ".join(parts) or "(none: the model tracks no layers)"


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
    top = list(model.layers)
    out: list[str] = []
    for item in spec:
        if isinstance(item, bool) or not isinstance(item, (str, int, np.integer)):
            raise SadlLayerError(
                f"{purpose}: {item!r} is not a layer path, name or index; layers are: {describe_layers(model)}"
            )
        if isinstance(item, str) and item.lstrip("-").isdigit() and item not in by_path:
            item = int(item)
        if isinstance(item, (int, np.integer)):
            if not -len(top) <= int(item) < len(top):
                raise SadlLayerError(
                    f"{purpose}: layer index {int(item)} is out of range for model {model.name!r} with "
                    f"{len(top)} layers: {describe_layers(model)}"
                )
            path = top[int(item)].name
        elif item in by_path:
            path = item
        elif len(by_name.get(item, [])) == 1:
            path = by_name[item][0].path
        elif item in by_name:
            raise SadlLayerError(
                f"{purpose}: {item!r} names {len(by_name[item])} layers "
                f"({', '.join(n.path for n in by_name[item])}); give the path"
            )
        else:
            raise SadlLayerError(
                f"{purpose}: model {model.name!r} has no layer {item!r}; layers are: {describe_layers(model)}"
            )
        if path not in out:
            out.append(path)
    return out
