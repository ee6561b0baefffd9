"""Hugging Face transformers models (native PyTorch) as their users call them.

What :mod:`~pytest_sadl.capture.torch` asks of a model whose ``forward`` takes its inputs
by keyword (``model(**batch)``, ``model(input_ids=..., attention_mask=...)``,
``model(pixel_values=...)``): which heads are supported (:func:`check_supported`), a
call's tensors by ``forward``'s parameter names (:func:`bind_call`, the one function the
recorder's ``forward`` wrapper calls through ``TorchTraceModel.call_inputs``), and a
``ModelOutput``'s tensors with ``logits`` first (:func:`output_items`). transformers is
never imported: a model and its outputs are recognised by their class's module.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from pytest_sadl.errors import SadlDataError, SadlModelError

__all__ = [
    "is_transformers",
    "check_supported",
    "forward_parameters",
    "bind_call",
    "KeywordCall",
    "output_items",
    "is_hf_dataset",
    "dataset_columns",
]

# heads whose output has one row per token or per generated position, not per input
_UNSUPPORTED = (
    ("ForTokenClassification", "token classification"),
    ("ForCausalLM", "causal language modelling"),
    ("LMHeadModel", "causal language modelling"),
    ("ForMaskedLM", "masked language modelling"),
    ("ForQuestionAnswering", "question answering"),
    ("ForConditionalGeneration", "generation"),
    ("ForSeq2SeqLM", "generation"),
)
LABEL_KEYWORDS = ("labels",)


def is_transformers(obj: Any) -> bool:
    """An object of a class defined in the transformers package."""
    return any(c.__module__.startswith("transformers.") for c in type(obj).__mro__)


def check_supported(model: Any) -> None:
    """Refuse, in one line, a transformers head whose output is per token (token
    classification, language modelling, question answering, generation)."""
    if not is_transformers(model):
        return
    name = type(model).__name__
    for suffix, kind in _UNSUPPORTED:
        if name.endswith(suffix):
            raise SadlModelError(
                f"model {name!r} is a {kind} head (one output per token); pytest-sadl measures sequence and "
                "image classifiers (…ForSequenceClassification, …ForImageClassification) and regressions: "
                "see docs/library-models.md"
            )


def _signature(model: Any) -> inspect.Signature:
    """The signature of the class's ``forward`` (the instance's may be the recorder's wrapper)."""
    forward = getattr(type(model), "forward", None)
    return inspect.signature(forward.__get__(model, type(model)) if forward is not None else model.forward)


def forward_parameters(model: Any) -> list[str]:
    """The names ``model.forward`` takes by keyword, in order (none for a builtin)."""
    try:
        params = _signature(model).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in kinds]


class KeywordCall(dict):  # type: ignore[type-arg]
    """A call's measured inputs by name; ``extra`` the keywords passed along unmeasured
    (``labels``: the loss is the model's business)."""

    extra: dict[str, Any]


def bind_call(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[KeywordCall | None, str | None]:
    """A call's arguments by ``forward``'s parameter names, ``None`` values dropped:
    ``(inputs, None)`` when every one is a tensor or array, else ``(None, why)``."""
    try:
        signature = _signature(model)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        return None, f"model(...) was called with arguments forward does not take ({exc})"
    named = _named(bound.arguments, signature.parameters)
    extra = {k: named.pop(k) for k in LABEL_KEYWORDS if k in named}
    odd = [k for k, v in named.items() if not (hasattr(v, "shape") and hasattr(v, "dtype"))]
    if odd:
        return None, f"model(...) was called with {', '.join(odd)} other than tensors"
    out = KeywordCall(named)
    out.extra = extra
    return out, None


def _named(arguments: Mapping[str, Any], params: Mapping[str, inspect.Parameter]) -> dict[str, Any]:
    """Bound arguments by name, ``**kwargs`` spread out, ``None`` values dropped."""
    named: dict[str, Any] = {}
    for name, value in arguments.items():
        if params[name].kind == inspect.Parameter.VAR_KEYWORD:
            named.update({k: v for k, v in value.items() if v is not None})
        elif value is not None:
            named[name] = value
    return named


def output_items(out: Any) -> tuple[list[Any], list[str]] | None:
    """A ``ModelOutput``'s tensors and their names, ``logits`` first (``None``: not one)."""
    if not is_transformers(out) or not isinstance(out, dict):
        return None
    items = [(str(k), v) for k, v in out.items() if hasattr(v, "shape") and hasattr(v, "dtype")]
    items.sort(key=lambda kv: kv[0] != "logits")
    return [v for _, v in items], [k for k, _ in items]


def is_hf_dataset(obj: Any) -> bool:
    """A Hugging Face ``datasets.Dataset`` (not imported: recognised by its class's module)."""
    return any(c.__name__ == "Dataset" and c.__module__.startswith("datasets.") for c in type(obj).__mro__)


def dataset_columns(ds: Any, source: str) -> dict[str, np.ndarray]:
    """A ``datasets.Dataset``'s columns as arrays, read once in its order (its format and
    its selected columns, if ``set_format`` chose some): the numeric ones, by name (a
    tokenised dataset's ``input_ids``, ``attention_mask``, ...), ``label`` as ``labels``;
    text columns are left out, as the Trainer leaves out what ``forward`` does not take."""
    columns = ds.format.get("columns") or ds.column_names
    table = ds.with_format("numpy", columns=columns)
    out = _numeric_columns(table, columns, len(ds), source)
    if not out:
        raise SadlDataError(
            f"{source}: the datasets.Dataset has no numeric column (columns {ds.column_names}); "
            "tokenise it first (dataset.map(tokenizer, batched=True))"
        )
    return out


def _numeric_columns(table: Any, columns: list[str], rows: int, source: str) -> dict[str, np.ndarray]:
    """The numeric columns of a NumPy-formatted dataset by name, ``label`` as ``labels``."""
    out: dict[str, np.ndarray] = {}
    for name in columns:
        column = _numeric_column(table[name] if rows else np.empty(0), name, source)
        if column is not None:
            out["labels" if name == "label" else name] = column
    return out


def _is_text_column(column: np.ndarray) -> bool:
    """A column of strings: a string dtype, or objects (the first 16 looked at) that are strings."""
    return column.dtype.kind in "US" or (
        column.dtype == object and all(isinstance(v, (str, bytes)) for v in column[:16])
    )


def _numeric_column(raw: Any, name: str, source: str) -> np.ndarray | None:
    """A column as an array, ``None`` for text; ragged sequences refused in one line."""
    try:
        column = np.asarray(raw)
    except ValueError:  # rows of different lengths
        column = np.empty(0, dtype=object)
    else:
        if _is_text_column(column):
            return None
    if column.dtype == object:
        raise SadlDataError(
            f"{source}: column {name!r} of the datasets.Dataset holds sequences of different lengths; "
            "pad them to one length (tokenizer(..., padding='max_length', max_length=N))"
        )
    return column
