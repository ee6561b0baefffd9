"""The model's own forward pass, with the chosen layers' outputs captured on the way:
the only backend-specific code of pytest-sadl.

Capture works by *tapping*: while the model's ``__call__`` runs, each chosen layer's
``call`` is replaced (on the layer object, restored afterwards) by a wrapper that hands
the layer's output to a sink and returns it unchanged. The model runs its own code, so
Sequential, functional, subclassed and nested models are all captured the same way, in
one forward pass. Tapping is active only while the Python body runs: under
``tf.function`` and ``jax.jit`` that is while the function is traced, after which the
compiled function holds the extra outputs and no wrapper remains.

Backends (``keras.backend.backend()``):

* TensorFlow: ``tf.function``, the plain graph traced once with the batch size unknown
  (every batch size, the last smaller one included, runs it), compiled by XLA
  (``jit_compile=True``) when asked (large
  passes with an accelerator; on a CPU-only machine the tapped plain graph costs what
  ``predict`` costs and XLA more), with a fallback to the plain graph when XLA cannot
  compile the model; the eager call
  keeps gradients for ``model(x)`` under a ``tf.GradientTape``.
* JAX: ``jax.jit`` of a stateless call (the variables are arguments, read in a
  ``keras.StatelessScope``), as Keras' own ``predict`` does on JAX.
* PyTorch (tested in CI: ``scripts/test.sh``'s third pass): the eager call, without
  compilation, under ``torch.no_grad()`` for :meth:`Forward.run` (a training set's pass)
  and with gradients for :meth:`Forward.eager` (a test's ``model(x)``).

Public API
----------
``tapped(layers, sink)``
    Context manager: ``sink(i, output)`` gets the output of ``layers[i]`` at each call.
``Forward(model, call, post)``
    ``call(x)`` runs the model on one batch (a backend tensor structure); ``post(output,
    captured)`` turns the model's output and the captured outputs into a flat list of
    tensors. ``.run(x, jit) -> (output, flat)`` as NumPy; ``.start(x, jit)`` the same
    begun, a function that finishes it (JAX: dispatched, not waited for); ``.eager(x) ->
    (output tensors, flat NumPy)``; ``.jit`` says whether XLA/jit is in use.
``without_gradients()``
    Context manager: ``torch.no_grad()`` on torch, nothing elsewhere.
``probe(call, inputs, layers) -> (output spec, list of Seen)``
    Runs ``call`` on symbolic inputs (no data, nothing compiled) with every layer of
    ``layers`` tapped: which ran, in which order, how often, with which output shape.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "tapped",
    "Forward",
    "probe",
    "Seen",
    "backend",
    "has_accelerator",
    "to_numpy",
    "is_symbolic",
    "without_gradients",
]

Sink = Callable[[int, Any], None]


def backend() -> str:
    """The Keras backend in use: ``tensorflow``, ``jax``, ``torch``..."""
    import keras

    return str(keras.backend.backend())


@functools.lru_cache(maxsize=1)
def has_accelerator() -> bool:
    """Whether TensorFlow sees a device other than the CPU (a GPU or TPU). Keras'
    ``jit_compile="auto"`` turns XLA off without one, and so does
    :class:`~pytest_sadl.capture.traces.TraceModel` (other backends: ``False``)."""
    if backend() != "tensorflow":
        return False
    import tensorflow as tf

    return any(d.device_type != "CPU" for d in tf.config.list_physical_devices())


@contextlib.contextmanager
def tapped(
    layers: Sequence[Any], sink: Sink, enter: Callable[[int, tuple[Any, ...], dict[str, Any]], None] | None = None
) -> Iterator[None]:
    """Wrap each layer's ``call`` so that ``sink(i, output)`` sees its outputs (and
    ``enter(i, args, kwargs)`` its arguments, when given); restore after."""
    saved: list[tuple[Any, bool, Any]] = []
    try:
        for i, layer in enumerate(layers):
            own = "call" in layer.__dict__
            original = layer.__dict__.get("call") if own else None
            inner = layer.call

            def call(*args: Any, _i: int = i, _inner: Any = inner, **kwargs: Any) -> Any:
                if enter is not None:
                    enter(_i, args, kwargs)
                out = _inner(*args, **kwargs)
                sink(_i, out)
                return out

            object.__setattr__(layer, "call", call)
            saved.append((layer, own, original))
        yield
    finally:
        for layer, own, original in reversed(saved):
            if own:
                object.__setattr__(layer, "call", original)
            else:
                object.__delattr__(layer, "call")


def to_numpy(value: Any) -> np.ndarray:
    """A backend tensor (or array) as a NumPy array."""
    if isinstance(value, np.ndarray):
        return value
    if getattr(value, "requires_grad", False):  # torch: not through .numpy()'s exception
        value = value.detach()
    if hasattr(value, "numpy") and callable(value.numpy):
        try:
            return np.asarray(value.numpy())
        except Exception:  # a torch tensor that needs detaching, for example
            pass
    if hasattr(value, "detach"):
        return np.asarray(value.detach().cpu().numpy())
    return np.asarray(value)


def without_gradients() -> contextlib.AbstractContextManager[Any]:
    """torch: ``torch.no_grad()``, for what is computed of a pass only to be brought to
    the host (the captures' reductions of a ``model(x)`` that keeps its own gradients);
    other backends record no gradients outside a tape: nothing."""
    if backend() != "torch":
        return contextlib.nullcontext()
    import torch

    return torch.no_grad()


def is_symbolic(value: Any) -> bool:
    """Whether ``value`` is a tensor being traced (inside ``tf.function``, ``jax.jit``,
    ``jax.grad``...): no concrete values to record."""
    import keras
    from keras import tree

    flat = tree.flatten(value)
    for v in flat:
        if isinstance(v, keras.KerasTensor):
            return True
        name = type(v).__module__
        if name.startswith("jax") and "Tracer" in type(v).__name__:
            return True
        if name.startswith("tensorflow") and hasattr(v, "graph") and not hasattr(v, "numpy"):
            return True
    return False


def in_graph_context() -> bool:
    """Whether TensorFlow is building a graph here (a ``model(x)`` inside a ``tf.function``)."""
    if backend() != "tensorflow":
        return False
    import tensorflow as tf

    return not tf.executing_eagerly()


class Forward:
    """One model's forward pass with captured outputs, compiled for the backend."""

    def __init__(self, model: Any, call: Callable[[Any], Any], post: Callable[[Any], tuple[Any, list[Any]]]) -> None:
        self.model = model
        self._call = call
        self._post = post  # runs inside the body: (x) -> (output, flat list of tensors)
        self._fns: dict[str, Any] = {}
        self.backend = backend()
        self.jit: bool | None = None
        """``True`` once a compiled (XLA) pass ran, ``False`` after XLA failed or for
        a backend without compilation, ``None`` before either."""
        self._graph_calls: bool | None = None
        """TensorFlow, :meth:`eager`: ``True`` once the graph ran a ``model(x)`` call,
        ``False`` after the model could not be traced (eager calls from then on)."""
        self._held: tuple[list[Any], list[Any]] | None = None
        """JAX, inside :meth:`holding_state`: the variables' values, read once for a run's batches."""
        self._layouts: dict[bytes, list[tuple[bool, tuple[int, ...], int]]] = {}
        """JAX: the layouts of :func:`_packed` arrays seen, by their header's bytes."""

    # -- the compiled functions -------------------------------------------------

    def _tf(self, jit: bool, x: Any) -> Any:
        """The ``tf.function`` of the pass for inputs of ``x``'s ranks: one per rank, as
        ``reduce_retracing`` relaxes inputs of two ranks to an unknown shape, on which
        layers such as ``TextVectorization`` cannot be traced (``model(x)`` on a column of
        strings ``(n,)``, then the profile's ``(n, 1)``)."""
        from keras import tree

        ranks = ",".join(str(len(getattr(a, "shape", ()))) for a in tree.flatten(x))
        key = f"{'tf-jit' if jit else 'tf'}:{ranks}"
        fn = self._fns.get(key)
        if fn is None:
            import tensorflow as tf

            fn = self._fns[key] = tf.function(self._post, jit_compile=jit, reduce_retracing=True)
            if not jit:
                _prime(fn, x)
        return fn

    def _jax(self) -> Any:
        fn = self._fns.get("jax")
        if fn is None:
            import jax
            import keras

            model, post = self.model, self._post

            def stateless(trainable: list[Any], non_trainable: list[Any], x: Any) -> Any:
                mapping = list(zip(model.trainable_variables, trainable, strict=True)) + list(
                    zip(model.non_trainable_variables, non_trainable, strict=True)
                )
                with keras.StatelessScope(state_mapping=mapping):
                    output, flat = post(x)
                return output, _packed(flat)

            fn = self._fns["jax"] = jax.jit(stateless)
        return fn

    # -- running ----------------------------------------------------------------

    def run(self, x: Any, jit: bool) -> tuple[Any, list[np.ndarray]]:
        """One batch through the model: ``(output, flat)`` as NumPy; on TensorFlow ``flat``
        holds read-only views of the pass's tensors, which nothing else holds (its
        outputs are folded or copied into the caller's arrays: no copy per tensor).

        TensorFlow: ``jit`` compiles with XLA (falling back to the plain graph for good
        when XLA cannot compile this model); JAX always compiles (``jax.jit``); other
        backends run eagerly.
        """
        from keras import tree

        if self.backend == "tensorflow":
            output, flat = self._run_tf(x, jit)
            # views, not copies (EagerTensor.numpy() copies)
            return tree.map_structure(to_numpy, output), [np.asarray(v) for v in flat]
        if self.backend == "jax":
            return self.start(x, jit)()
        output, flat = self._eager_body(x)
        self.jit = False
        return tree.map_structure(to_numpy, output), [to_numpy(v) for v in flat]

    def start(self, x: Any, jit: bool) -> Callable[[], tuple[Any, list[np.ndarray]]]:
        """:meth:`run` begun: a function that finishes it. JAX dispatches the batch and
        returns at once (the host does not wait for the pass until the function is
        called, so it can prepare and dispatch the next batch meanwhile, as Keras'
        ``predict`` does); the captures come to the host as one array (:func:`_packed`).
        Other backends run the batch now."""
        if self.backend != "jax":
            done = self.run(x, jit)
            return lambda: done
        from keras import tree

        output, packed = self._jax()(*(self._held or self._jax_state()), x)
        self.jit = True
        return lambda: (tree.map_structure(to_numpy, output), self._unpacked(packed))

    def _unpacked(self, arrays: list[Any]) -> list[np.ndarray]:
        """JAX: the flat captures as NumPy from :func:`_packed`'s arrays, the float32 ones
        views of the one array brought to the host."""
        buf = np.asarray(arrays[0])
        size = int(buf[0])
        key = buf[:size].tobytes()
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = _layout(buf[:size])
        out: list[np.ndarray] = []
        rest = iter(arrays[1:])
        offset = size
        for joined, shape, count in layout:
            if joined:
                out.append(buf[offset : offset + count].reshape(shape))
                offset += count
            else:
                out.append(to_numpy(next(rest)))
        return out

    def _run_tf(self, x: Any, jit: bool) -> Any:
        """:meth:`run` on TensorFlow: XLA when asked and not known to fail, else the plain graph."""
        if jit and self.jit is not False:
            try:
                out = self._tf(True, x)(x)
                self.jit = True
                return out
            except Exception:  # XLA could not compile (or run) this graph
                if self.jit:  # it worked before: a genuine error, not XLA's
                    raise
                self.jit = False
        return self._tf(False, x)(x)

    @contextlib.contextmanager
    def holding_state(self) -> Iterator[None]:
        """JAX: the model's variables read once for the batches run inside (one call's
        batches: nothing changes the weights between them), not once a batch (75 us each
        on a small ConvNet); other backends read nothing."""
        if self.backend != "jax" or self._held is not None:
            yield
            return
        self._held = self._jax_state()
        try:
            yield
        finally:
            self._held = None

    def _jax_state(self) -> tuple[list[Any], list[Any]]:
        """The model's trainable and non-trainable variables' values, as the ``jax.jit`` pass takes them."""
        model = self.model
        return [v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables]

    def _eager_body(self, x: Any) -> Any:
        if self.backend == "torch":
            import torch

            with torch.no_grad():
                return self._post(x)
        return self._post(x)

    def eager(self, x: Any) -> tuple[Any, list[np.ndarray]]:
        """``model(x)`` as a test calls it: the output as the backend's tensors and the
        captured values as NumPy, for a small batch called many times.

        TensorFlow: the plain-graph ``tf.function`` (no XLA), traced once per input
        signature and then reused (``reduce_retracing`` relaxes the batch size after the
        second size, so a handful of traces over any number of calls); a
        ``GradientTape`` around the call sees it, as it sees an eager ``model(x)``. A
        model whose Python cannot be traced runs the eager call instead, for good.
        JAX: the ``jax.jit`` pass with the rows padded to the next power of two (a few
        compiled shapes, not one per batch size) and the outputs cut back.
        """
        if self.backend == "tensorflow":
            return self._eager_tf(x)
        if self.backend == "jax":
            return self._eager_jax(x)
        output, flat = self._post(x)
        return output, [to_numpy(v) for v in flat]

    def _eager_tf(self, x: Any) -> tuple[Any, list[np.ndarray]]:
        """:meth:`eager` on TensorFlow: the plain graph, or the eager call for good when the
        model's Python cannot be traced."""
        failed = False
        if self._graph_calls is not False:
            try:
                output, flat = self._tf(False, x)(x)
                self._graph_calls = True
                return output, [to_numpy(v) for v in flat]
            except Exception:  # untraceable Python, or a bad input: the eager call says which
                failed = True
        output, flat = self._post(x)  # a bad input raises here, as a plain model(x) would
        if failed and not self._graph_calls:
            self._graph_calls = False  # the graph failed where eager works: untraceable
        return output, [to_numpy(v) for v in flat]

    def _eager_jax(self, x: Any) -> tuple[Any, list[np.ndarray]]:
        """:meth:`eager` on JAX: the ``jax.jit`` pass on rows padded to a power of two."""
        from keras import tree

        n = _leading_rows(tree.flatten(x))
        size = 1 << max(0, (n - 1).bit_length())
        if n and size != n:
            x = tree.map_structure(lambda a: _pad_rows(a, size - n), x)
        output, packed = self._jax()(*self._jax_state(), x)
        flat = self._unpacked(packed)
        if n and size != n:
            output = tree.map_structure(lambda a: a[:n], output)
            return output, [v[:n] for v in flat]
        return output, flat

    def compilations(self) -> int:
        """How many times the pass has been traced or compiled so far, over every
        compiled function (TensorFlow graph and XLA, ``jax.jit``): stays bounded when
        calls of many batch sizes reuse a few compiled shapes."""
        total = 0
        for fn in self._fns.values():
            if hasattr(fn, "experimental_get_tracing_count"):
                total += int(fn.experimental_get_tracing_count())
            elif hasattr(fn, "_cache_size"):
                total += int(fn._cache_size())
        return total


def _packed(flat: list[Any]) -> list[Any]:
    """Inside the ``jax.jit`` pass: the float32 tensors of ``flat`` (a pass's captures:
    the reduced taps, the extrema, the measured output) raveled into one 1-D array,
    headed by the layout of ``flat`` as float32 numbers (:func:`_layout` reads it), then
    the tensors of other dtypes as they are. The host then takes one array a batch, not
    one per capture (13 on a small ConvNet: 40% of a recorded ``predict``'s time)."""
    import jax.numpy as jnp

    header: list[int] = [0]
    joined: list[Any] = []
    others: list[Any] = []
    for v in flat:
        is_f32 = v.dtype == jnp.float32
        header += [int(is_f32), len(v.shape), *v.shape]
        if is_f32:
            joined.append(jnp.ravel(v))
        else:
            others.append(v)
    header[0] = len(header)  # exact in float32 below 2**24: a header's length, a capture's dimensions
    return [jnp.concatenate([jnp.asarray(header, jnp.float32), *joined]), *others]


def _layout(header: np.ndarray) -> list[tuple[bool, tuple[int, ...], int]]:
    """:func:`_packed`'s header read: ``(joined, shape, size)`` per capture, in order."""
    values = [int(v) for v in header[1:]]
    out = []
    i = 0
    while i < len(values):
        joined, rank = bool(values[i]), values[i + 1]
        shape = tuple(values[i + 2 : i + 2 + rank])
        out.append((joined, shape, int(np.prod(shape, dtype=np.int64))))
        i += 2 + rank
    return out


def _leading_rows(leaves: list[Any]) -> int:
    """The number of rows of a batch's first leaf (0: none, or no batch axis)."""
    return int(leaves[0].shape[0]) if leaves and len(leaves[0].shape) else 0


def _batch_spec(x: Any) -> Any:
    """The ``tf.TensorSpec`` structure of ``x`` with the batch axis unknown, or ``None``
    when a leaf has no batch axis or no TensorFlow dtype."""
    import tensorflow as tf
    from keras import tree

    def spec(a: Any) -> Any:
        shape = tuple(getattr(a, "shape", ()))
        if not shape:
            raise ValueError("no batch axis")
        dtype = getattr(a, "dtype", None)
        text = isinstance(dtype, np.dtype) and dtype.kind in "OSU"
        return tf.TensorSpec((None,) + tuple(shape[1:]), tf.string if text else tf.as_dtype(dtype))

    try:
        return tree.map_structure(spec, x)
    except (TypeError, ValueError):
        return None


def _prime(fn: Any, x: Any) -> None:
    """Trace the plain-graph ``fn`` once for inputs like ``x`` with the batch size left
    unknown, so that every batch size, the training set's smaller last batch included,
    runs that one graph: ``reduce_retracing`` alone traces the first size, then again
    relaxed at the second, and a trace of a model with every layer tapped costs about a
    second (MobileNetV2, 151 taps). A graph that cannot be traced so (a layer that needs
    a known batch size) is left to the ordinary per-shape tracing of the call."""
    spec = _batch_spec(x)
    if spec is None:
        return
    with contextlib.suppress(Exception):  # the call itself traces (and reports) it with the batch's shape
        fn.get_concrete_function(spec)


def _pad_rows(a: Any, rows: int) -> Any:
    """``a`` with ``rows`` rows of zeros appended, as the same kind of array (NumPy stays
    NumPy: a jitted function caches per argument kind as well as shape)."""
    if isinstance(a, np.ndarray):
        return np.concatenate([a, np.zeros((rows,) + a.shape[1:], a.dtype)])
    import jax.numpy as jnp

    return jnp.concatenate([a, jnp.zeros((rows,) + tuple(a.shape[1:]), a.dtype)])


def casts_input(layer: Any, producer: Any, tensor: Any) -> bool:
    """Whether Keras' autocast converts ``tensor``, an output of ``producer``, on its way
    into ``layer`` (a ``mixed_float16`` layer's output into a ``float32`` one): by the
    tensor's dtype or the producer's compute dtype (Keras on torch may compute a float16
    layer in float32 on the CPU), so both probes refuse the same calls on every backend."""
    import keras

    if not getattr(layer, "autocast", True):
        return False
    std = keras.backend.standardize_dtype
    wanted = std(getattr(layer, "input_dtype", None) or tensor.dtype)
    dtypes = (getattr(tensor, "dtype", None), getattr(producer, "compute_dtype", None))
    return any(_other_float(keras, dtype, wanted) for dtype in dtypes)


def _other_float(keras: Any, dtype: Any, wanted: str) -> bool:
    """Whether ``dtype`` is a float dtype other than ``wanted`` (``None``: no dtype)."""
    if dtype is None:
        return False
    std = keras.backend.standardize_dtype(dtype)
    return bool(keras.backend.is_float_dtype(std) and std != wanted)


@dataclass
class Seen:
    """What the probe saw of one layer: calls, order of the first call, output shape, and
    the layer whose output was its one input."""

    calls: int = 0
    order: int = -1
    shape: tuple[int | None, ...] | None = None
    structured: bool = False  # the layer returned several tensors (a list, dict, state)
    after: int = -1  # the index of the leaf whose output this layer was called on alone, or -1
    output: Any = field(default=None, repr=False)


def _static(shape: Any) -> tuple[int | None, ...]:
    return tuple(d if isinstance(d, int) else None for d in shape)


def probe(
    call: Callable[[Any], Any], inputs: Any, layers: Sequence[Any], leaves: Sequence[bool] | None = None
) -> tuple[Any, list[Seen], Any]:
    """Run ``call`` on symbolic ``inputs`` (``keras.KerasTensor`` structure) with every
    layer tapped; return ``(output spec, seen per layer, index of the layer whose output
    is each flat model output or -1)``. A layer called on one tensor names in
    ``Seen.after`` the leaf (``leaves[i]``; every layer when not given) that returned that
    tensor last: a Dropout or Identity handing its input back is the layer it was called
    on, as the model's graph says."""
    from keras import tree
    from keras.src.backend import compute_output_spec

    seen: list[Seen] = []
    owners: list[int] = []
    counter = [0]
    # Keras on torch runs ``body`` on real tensors, twice when a dimension is unknown (its
    # batch filled with 83, then 89): a dimension that differs between the rounds is unknown.
    rounds: list[list[tuple[int | None, ...] | None]] = []

    def sink(i: int, out: Any) -> None:
        s = seen[i]
        s.calls += 1
        if s.order < 0:
            s.order = counter[0]
            counter[0] += 1
        flat = tree.flatten(out)
        s.structured = len(flat) != 1 or isinstance(out, (list, tuple, dict))
        s.shape = None if s.structured else _static(flat[0].shape)
        s.output = None if s.structured else flat[0]

    def enter(i: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        flat = tree.flatten(args[0] if args else kwargs.get("inputs"))
        if len(flat) != 1:
            seen[i].after = -1
            return
        match = [
            j
            for j, s in enumerate(seen)
            if s.output is not None and s.output is flat[0] and (leaves is None or leaves[j])
        ]
        j = max(match, key=lambda j: seen[j].order) if match else -1
        seen[i].after = -1 if j < 0 or casts_input(layers[i], layers[j], flat[0]) else j

    def body(x: Any) -> Any:
        if seen:
            rounds.append([s.shape for s in seen])
        seen[:] = [Seen() for _ in layers]
        counter[0] = 0
        with tapped(layers, sink, enter):
            out = call(x)
        owners[:] = []
        for o in tree.flatten(out):
            match = [i for i, s in enumerate(seen) if s.output is o]
            owners.append(min(match, key=lambda i: seen[i].order) if match else -1)  # the leaf, not its containers
        for s in seen:
            s.output = None
        return out

    spec = compute_output_spec(body, inputs)
    for shapes in rounds:
        for s, before in zip(seen, shapes, strict=True):
            if s.shape is not None and before is not None and len(before) == len(s.shape):
                s.shape = tuple(a if a == b else None for a, b in zip(s.shape, before, strict=True))
    return spec, list(seen), list(owners)
