"""Native PyTorch models (``torch.nn.Module``): the chosen modules' outputs captured by
forward hooks in the model's own forward pass, reduced to one value per neuron, as NumPy.

torch is imported only here, and only when a PyTorch model or PyTorch data is given
(``pip install "pytest-sadl[torch]"``). :class:`TorchTraceModel` has the interface of
:class:`~pytest_sadl.capture.traces.TraceModel` (``trace_model(module, ...)`` makes one),
so the profile, the recorder, the plugin and the ``sadl`` commands use it unchanged and
see NumPy arrays only.

Layers
------
A layer is a module, named by its ``named_modules()`` path (``features.3``,
``encoder.block1``). The defaults follow the Keras rules on the modules that ran once
in a forward pass and returned one tensor, in call order:

* coverage: every leaf module whose output has neurons, pass-through modules excluded
  (``Flatten``, ``Unflatten``, ``Identity``, dropout, padding, upsampling, pixel and
  channel shuffles);
* **a module followed directly by an activation or batch-norm module** (its input is the
  module's output, as in ``nn.Sequential(nn.Linear(...), nn.ReLU())``) is measured *after*
  it, as a Keras ``Dense(activation="relu")`` is: the pair is one layer, named by the
  activation's path (``features.1``), and the module before it is not a default of its own
  (name it to measure its pre-activation output); a chain ``Conv2d -> BatchNorm2d -> ReLU``
  is one layer, the ReLU (each neuron once, after its activation, as on Keras); a module
  that gives a model output keeps its own trace. An activation applied as a function
  (``F.relu`` in ``forward``) is no module, nor is one module called several times (one
  ``nn.ReLU`` reused in a torchvision ResNet block): the chain before it ends at the
  batch norm, measured before the activation;
* SA: the last of the coverage layers before the one that produces the measured output;
* a module whose output does not have one row per input (it runs on a reshaped batch:
  a convolution applied to ``(n * t, c, h, w)`` frames, a time-major Transformer layer)
  is no default, and naming it is an error: its rows are not inputs.

Modules that hold modules (``nn.Sequential``, blocks of your own) can be named too; their
output is their ``forward``'s.

Reductions
----------
PyTorch's layouts: a channels-first map ``(n, c, h, w)`` (``(n, c, l)``, ``(n, c, d, h,
w)``), the output of a convolution, pooling, normalisation or upsampling module, or of
an element-wise module (activations, dropout) applied to one, is averaged over the
spatial axes, giving one value per channel (axis 1); any other output of rank 4 or more
is taken as channels-first too. A sequence ``(n, t, f)`` (a ``Linear`` on sequences, a
``batch_first`` RNN, a Transformer layer) is averaged over time, one value per feature
(the last axis). An RNN (``nn.RNN``/``LSTM``/``GRU``) gives its output sequence (the
first item of what it returns), transposed to ``(n, t, f)`` when ``batch_first=False``.
NC scales each input's whole output (every position and time step) to [0, 1], as on the
Keras side (``extrema``).

Passes
------
A training set's pass runs in ``eval()`` mode under ``torch.no_grad()``, the module's
(and every submodule's) mode restored after. A recorded ``model(x)`` / ``model.forward(x)``
(:meth:`TorchTraceModel.call_tensors`) runs the call the test made, once, with the hooks
on: its output is the model's own tensor (gradients flow through it when grad mode is
on; ``no_grad``/``inference_mode`` work as without the plugin) and the traces are copies
taken in the hooks. The input shape is learned from the first inputs seen (the training
data, or a recorded call), with one two-row probe pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pytest_sadl.capture import hf
from pytest_sadl.capture.arrays import Progress, Traces, is_index, resolve_output
from pytest_sadl.capture.data import TrainingData, check_batch, load_training_data, shape_matches
from pytest_sadl.capture.torchdata import import_torch, is_torch_module, to_numpy
from pytest_sadl.errors import SadlDataError, SadlLayerError, SadlModelError

__all__ = ["TorchTraceModel", "is_pass_through", "is_activation", "is_per_neuron"]

_PASS_THROUGH = (
    "Flatten",
    "Unflatten",
    "Identity",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "AlphaDropout",
    "FeatureAlphaDropout",
    "ZeroPad1d",
    "ZeroPad2d",
    "ZeroPad3d",
    "ConstantPad1d",
    "ConstantPad2d",
    "ConstantPad3d",
    "ReflectionPad1d",
    "ReflectionPad2d",
    "ReflectionPad3d",
    "ReplicationPad1d",
    "ReplicationPad2d",
    "ReplicationPad3d",
    "CircularPad1d",
    "CircularPad2d",
    "CircularPad3d",
    "Upsample",
    "UpsamplingNearest2d",
    "UpsamplingBilinear2d",
    "PixelShuffle",
    "PixelUnshuffle",
    "ChannelShuffle",
)
_ACTIVATIONS = (
    "ReLU",
    "ReLU6",
    "LeakyReLU",
    "PReLU",
    "RReLU",
    "ELU",
    "SELU",
    "CELU",
    "GELU",
    "SiLU",
    "Mish",
    "Sigmoid",
    "Tanh",
    "Softmax",
    "LogSoftmax",
    "Softmin",
    "Softplus",
    "Softsign",
    "Hardtanh",
    "Hardswish",
    "Hardsigmoid",
    "Hardshrink",
    "Softshrink",
    "Tanhshrink",
    "Threshold",
    "LogSigmoid",
)
# per-channel affine maps at inference: the neurons of the module before them, measured after
_NORMALIZATIONS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")
# element-wise modules: their output has their input's layout
_ELEMENTWISE = _ACTIVATIONS + (
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "AlphaDropout",
    "FeatureAlphaDropout",
    "Identity",
)
# modules whose rank > 2 output is channels-first (n, c, ...)
_CHANNELS_FIRST = (
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "LPPool1d",
    "LPPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "GroupNorm",
    "LocalResponseNorm",
    "Upsample",
    "UpsamplingNearest2d",
    "UpsamplingBilinear2d",
    "PixelShuffle",
    "PixelUnshuffle",
    "ChannelShuffle",
    "ZeroPad1d",
    "ZeroPad2d",
    "ZeroPad3d",
    "ConstantPad1d",
    "ConstantPad2d",
    "ConstantPad3d",
    "ReflectionPad1d",
    "ReflectionPad2d",
    "ReflectionPad3d",
    "ReplicationPad1d",
    "ReplicationPad2d",
    "ReplicationPad3d",
    "Fold",
)
_RNNS = ("RNN", "LSTM", "GRU")


def _class_name(module: Any) -> str:
    return type(module).__name__


def _is_torch_class(module: Any, names: Sequence[str]) -> bool:
    """An instance of one of torch.nn's classes ``names`` (subclasses included)."""
    nn = import_torch().nn
    types = tuple(getattr(nn, n) for n in names if hasattr(nn, n))
    return isinstance(module, types)


def is_pass_through(module: Any) -> bool:
    return _is_torch_class(module, _PASS_THROUGH)


def is_activation(module: Any) -> bool:
    return _is_torch_class(module, _ACTIVATIONS)


def is_per_neuron(module: Any) -> bool:
    """An activation or batch-norm module: it takes another module's neurons channel by
    channel and computes none of its own."""
    return _is_torch_class(module, _ACTIVATIONS + _NORMALIZATIONS)


# ----------------------------------------------------------------------------- the trace model


@dataclass
class _Seen:
    """What the probe saw of one module."""

    calls: int = 0
    order: int = -1
    shape: tuple[int | None, ...] | None = None  # without the batch axis
    structured: bool = False
    per_input: bool = True  # one output row per input (not a reshaped batch: frames, time-major)
    layout: str = "last"  # "first" (channels-first) or "last"
    after: str | None = None  # the path of the module whose output was this one's input
    elementwise: bool = False  # a parameter-free module of no known class that acts element-wise
    fused: str | None = None  # a per-neuron container: the path of its leaf that gives its output


@contextlib.contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    """``model.eval()`` for the block; every module's own ``training`` flag restored after."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, mode in modes:
            m.training = mode


def _main_output(module: Any, out: Any, rnn: bool | None = None) -> tuple[Any, bool]:
    """The one tensor a module returned (an RNN: its output sequence, batch first), and
    whether it returned one tensor (``rnn``: whether the module is an RNN, when known)."""
    torch = import_torch()
    if rnn is None:
        rnn = _is_torch_class(module, _RNNS)
    if rnn and isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
        seq = out[0]
        if not getattr(module, "batch_first", False) and seq.dim() == 3:
            seq = seq.transpose(0, 1)
        return seq, True
    if isinstance(out, torch.Tensor):
        return out, True
    return None, False


def _reduce(t: Any, layout: str, mask: Any = None) -> Any:
    """One value per neuron, float32, detached: channels-first maps averaged over every
    axis after the channel one, features-last outputs over every axis but the batch and
    the last (a sequence over its tokens where ``mask``, the attention mask, is 1); a copy
    (an in-place activation after this module cannot change it)."""
    t = t.detach()
    if mask is not None and layout == "last" and t.dim() == 3 and tuple(mask.shape) == tuple(t.shape[:2]):
        m = mask.to(t.device, import_torch().float32)[..., None]
        return (t.float() * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)
    if t.dim() > 2:  # the mean is a new tensor: no copy needed
        axes = tuple(range(2, t.dim())) if layout == "first" else tuple(range(1, t.dim() - 1))
        return t.float().mean(dim=axes)
    if t.dim() < 2:
        t = t.reshape(-1, 1)
    return t.float().clone() if t.dtype == import_torch().float32 else t.float()


def _extrema(t: Any) -> tuple[Any, Any]:
    """Each input's minimum and maximum over its whole output (every axis but the batch),
    float32: ``amin``/``amax`` over those axes, which read a map in any memory layout
    without the copy a reshape of a channels-last map makes (and give no indices, unlike
    ``min(dim=1)``; ``torch.aminmax`` is one kernel but slower on CPU, measured: 1.7 ms
    against 2 x 0.4 ms on a 3.7 MB map)."""
    t = t.detach()
    axes = tuple(range(1, t.dim()))
    return t.amin(dim=axes).float(), t.amax(dim=axes).float()


_BLOCK_BYTES = 1 << 20  # a block of rows a core's L2 cache holds while it is read three times
_BLOCKED_FROM = 4 << 20  # smaller maps in one piece: the blocks' dispatch costs what the cache saves


def _map_stats(t: Any, layout: str) -> tuple[Any, Any, Any]:
    """A map's values per neuron (:func:`_reduce`) and per-input extrema (:func:`_extrema`),
    a map of 4 MB or more on blocks of ~1 MB of rows: each block is read from memory once
    and twice more from the cache, not the whole map three times from memory (each row's
    values are the same as on the whole map). A ResNet-like module's recorded call (the
    benchmark's compute-bound model, 4-8 MB maps): 1.03-1.16x ``model(x)`` against
    1.09-1.36x, by CPU time; on the digits ConvNet's 3.7 MB map the blocks' twelve
    dispatches cost more than they save (+0.57 ms against +0.49 ms), so it is one piece."""
    t = t.detach()
    row = max(1, t[0].numel() * t.element_size()) if len(t) else 1
    rows = len(t) if len(t) * row < _BLOCKED_FROM else max(1, _BLOCK_BYTES // row)
    if len(t) <= rows:
        return (_reduce(t, layout), *_extrema(t))
    torch = import_torch()
    parts = [(_reduce(b, layout), *_extrema(b)) for b in t.split(rows)]
    means, lows, highs = (torch.cat(p) for p in zip(*parts, strict=True))
    return means, lows, highs


class _Probe:
    """One two-row pass with a hook on every module: what each module is called on and
    returns (:class:`_Seen`), each module's output, and which parameter-free modules of no
    known class act element-wise (checked after the pass on a copy of their input)."""

    def __init__(self, modules: dict[str, Any], rows: int) -> None:
        self.modules = modules
        self.rows = rows
        self.seen = {p: _Seen() for p in modules}
        self.produced: dict[int, str] = {}  # id(output tensor) -> the path of the module that gave it
        self.layouts: dict[int, str] = {}
        self.outputs: dict[str, Any] = {}
        self.samples: dict[str, Any] = {}  # path -> a copy of its input, to test element-wise action
        self.inputs: dict[str, Any] = {}  # path -> its first call's input tensor
        self.counter = 0

    def hook(self, path: str) -> Any:
        def fn(module: Any, args: Any, out: Any) -> None:
            self.record(path, module, args, out)

        return fn

    def record(self, path: str, module: Any, args: Any, out: Any) -> None:
        torch = import_torch()
        s = self.seen[path]
        self._count_call(s)
        main, single = _main_output(module, out)
        s.structured = not single
        src = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if s.calls == 1 and src is not None:
            self._note_input(path, module, src, main if single else None)
        if single:
            self._note_output(path, module, src, main, out)

    def _count_call(self, s: _Seen) -> None:
        """One more call of a module; its first call's place in the order of first calls."""
        s.calls += 1
        if s.order < 0:
            s.order = self.counter
            self.counter += 1

    def _note_input(self, path: str, module: Any, src: Any, main: Any) -> None:
        """A module's first call's input: the module that gave it, and a copy to test
        element-wise action on when the module may act so (``main``: its one output)."""
        self.seen[path].after = self.produced.get(id(src))
        self.inputs[path] = src
        if main is not None and _may_act_elementwise(module, src, main):
            self.samples[path] = src.detach().clone()

    def _note_output(self, path: str, module: Any, src: Any, main: Any, out: Any) -> None:
        """A module's one output: its shape, whether it has a row per input, its layout."""
        s = self.seen[path]
        s.shape = (None,) + tuple(int(d) for d in main.shape[1:])
        s.per_input = main.dim() >= 1 and int(main.shape[0]) == self.rows
        s.layout = self._layout(module, main, src)
        self.layouts[id(main)] = s.layout
        self.produced.setdefault(id(out), path)
        self.outputs[path] = out

    def _layout(self, module: Any, main: Any, src: Any) -> str:
        if _is_torch_class(module, _CHANNELS_FIRST):
            return "first"
        known = self._known_layout(module, main, src)
        if known is not None:
            return known
        return "first" if main.dim() >= 4 else "last"

    def _known_layout(self, module: Any, main: Any, src: Any) -> str | None:
        """The layout an element-wise module keeps of its input, or a block's of the leaf
        whose output it returns; ``None`` when neither is known."""
        if _is_torch_class(module, _ELEMENTWISE) and src is not None and id(src) in self.layouts:
            return self.layouts[id(src)]
        return self.layouts.get(id(main))  # a block returning a leaf's output

    def run(self, tm: TorchTraceModel, firsts: tuple[Any, ...]) -> Any:
        """The model's output on ``firsts``, every module seen; a failure is one line."""
        torch = import_torch()
        handles = [m.register_forward_hook(self.hook(p)) for p, m in self.modules.items()]
        try:
            with torch.no_grad(), _eval_mode(tm.model):
                out = tm.call_model(tm.model, firsts)
        except Exception as exc:
            raise _cannot_run(tm.name, firsts, exc) from None
        finally:
            for h in handles:
                h.remove()
        with torch.no_grad(), _eval_mode(tm.model):
            self._elementwise()
        self._containers()
        return out

    def _elementwise(self) -> None:
        """Which parameter-free modules of no known class act element-wise, on their samples."""
        for path, sample in self.samples.items():
            self.seen[path].elementwise = _acts_elementwise(self.modules[path], sample)

    def _containers(self) -> None:
        """A module holding modules that computes per-neuron maps only (its own parameters
        vectors, as a batch norm's; its submodules activations, batch norms or pass-through,
        as timm's ``BatchNormAct2d``): its input's module is measured after it, at the last
        of its submodules that gave its output."""
        for path, module in self.modules.items():
            s = self.seen[path]
            if s.calls == 1 and s.after is not None and path in self.outputs:
                s.fused = self._fused_leaf(path, module)

    def _fused_leaf(self, path: str, module: Any) -> str | None:
        """The leaf that gives a per-neuron container's output (see :meth:`_containers`)."""
        children = [(p, m) for p, m in self.modules.items() if p.startswith(path + ".")]
        if not self._per_neuron_container(module, children):
            return None
        out = self.outputs[path]
        last = [p for p, _ in children if self._gives_unmoved(p, out)]
        return last[-1] if last else None

    def _gives_unmoved(self, path: str, out: Any) -> bool:
        """Whether the module at ``path`` gave ``out`` and computes (does not only move) it."""
        return self.outputs.get(path) is out and not is_pass_through(self.modules[path])

    def _per_neuron_container(self, module: Any, children: list[tuple[str, Any]]) -> bool:
        """Whether a module with submodules ``children`` computes per-neuron maps only: its
        own parameters vectors, its submodules per-neuron or pass-through."""
        if not children or any(v.dim() > 1 for v in module.parameters(recurse=False)):
            return False
        return all(self._per_neuron_or_through(p, m) for p, m in children)

    def _per_neuron_or_through(self, path: str, module: Any) -> bool:
        if _has_children(module):
            return True  # judged by its own leaves, which are in the list too
        return is_pass_through(module) or is_per_neuron(module) or self.seen[path].elementwise


def _cannot_run(name: str, firsts: tuple[Any, ...], exc: Exception) -> SadlModelError:
    """The error for a model that fails on the probe's rows: the shapes and the first line of why."""
    shapes = ", ".join(str(tuple(t.shape)) for t in firsts)
    return SadlModelError(
        f"model {name!r} cannot be run on inputs of shape {shapes} "
        f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); check that the model "
        "runs on a batch of its inputs"
    )


def _head_reads(probe: _Probe, measured: Any, owner: str | None, mask: Any) -> tuple[str, str] | None:
    """Which token of which module's sequence output ``(n, t, f)`` the head reads, found by
    value in the probe's pass: the first (the CLS token: a ViT, a BERT without pooler)
    when the module giving the measured output takes that token as its input; the last
    one kept by the attention mask (a decoder's sequence classifier) when the measured
    output is, row by row, that token of a module's output (then the module before it
    is the one measured)."""
    sequences = _sequence_outputs(probe)
    src = probe.inputs.get(owner) if owner is not None else None
    if src is not None and src.dim() == 2:
        return _reads_first(probe, sequences, src)
    if owner is not None or measured.dim() != 2:
        return None
    return _reads_last(probe, sequences, measured, mask)


def _sequence_outputs(probe: _Probe) -> list[str]:
    """The modules whose output is a sequence ``(n, t, f)``, the last called first."""
    torch = import_torch()
    order = sorted(probe.outputs, key=lambda p: -probe.seen[p].order)
    return [p for p in order if isinstance(probe.outputs[p], torch.Tensor) and probe.outputs[p].dim() == 3]


def _reads_first(probe: _Probe, sequences: list[str], src: Any) -> tuple[str, str] | None:
    torch = import_torch()
    for p in sequences:
        o = probe.outputs[p]
        if o.shape[0] == src.shape[0] and o.shape[2] == src.shape[1] and torch.equal(o[:, 0], src):
            return p, "first"
    return None


def _reads_last(probe: _Probe, sequences: list[str], measured: Any, mask: Any) -> tuple[str, str] | None:
    torch = import_torch()
    for p in sequences:
        o = probe.outputs[p]
        if not _token_shaped(o, measured):
            continue
        after = _source(probe, p)
        if after is not None and torch.equal(_token(o, "last", mask), measured.detach().float()):
            return after, "last"
    return None


def _token_shaped(sequence: Any, rows: Any) -> bool:
    """Whether ``rows`` ``(n, f)`` has the shape of one token of ``sequence`` ``(n, t, f)``."""
    return bool(sequence.shape[0] == rows.shape[0] and sequence.shape[2] == rows.shape[1])


def _source(probe: _Probe, path: str) -> str | None:
    """The module whose output ``path`` took as its input: its own tensor, or a view of it
    (a reshape between them)."""
    if probe.seen[path].after is not None:
        return probe.seen[path].after
    src = probe.inputs.get(path)
    if src is None:
        return None
    torch = import_torch()
    for q in sorted(probe.outputs, key=lambda q: -probe.seen[q].order):
        if q != path and _same_memory(probe.outputs[q], src, torch):
            return q
    return None


def _same_memory(o: Any, src: Any, torch: Any) -> bool:
    """Whether a module's output ``o`` is a tensor over the same memory as ``src`` (a view of it)."""
    return isinstance(o, torch.Tensor) and o.data_ptr() == src.data_ptr() and o.numel() == src.numel()


def _token(t: Any, kind: str, mask: Any) -> Any:
    """The one token of a sequence ``(n, t, f)`` a head reads: the first (CLS), or the
    last one the attention mask keeps (the last one without a mask)."""
    torch = import_torch()
    t = t.detach().float()
    if kind == "first" or t.dim() != 3:
        return t[:, 0].clone()
    if mask is None or tuple(mask.shape) != tuple(t.shape[:2]):
        return t[:, -1].clone()
    positions = torch.arange(t.shape[1], device=t.device)
    last = ((mask.to(t.device) != 0) * positions).argmax(dim=1)
    return t[torch.arange(t.shape[0], device=t.device), last].clone()


def _may_act_elementwise(module: Any, src: Any, main: Any) -> bool:
    """A leaf of no known class, without parameters or buffers, whose output has its input's
    shape: it may be an activation of a library (Hugging Face's ``GELUActivation``)."""
    if _has_children(module) or is_pass_through(module) or is_per_neuron(module) or _has_state(module):
        return False
    return bool(tuple(main.shape) == tuple(src.shape) and src.is_floating_point() and src.numel() >= 2)


def _has_children(module: Any) -> bool:
    return any(True for _ in module.children())


def _has_state(module: Any) -> bool:
    """Whether a module has parameters or buffers."""
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


def _acts_elementwise(module: Any, sample: Any) -> bool:
    """Whether ``module`` is one function applied to each element: shuffling the elements of
    its input (the probe's rows) shuffles its output the same way, and its first row alone
    gives that row's output (an activation; not a softmax, a norm or a reshaping)."""
    torch = import_torch()
    flat = sample.reshape(-1)
    perm = torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(0))
    try:
        a = module(flat.clone().reshape(sample.shape))
        b = module(flat[perm].clone().reshape(sample.shape))
        c = module(sample[:1].clone())
    except Exception:
        return False
    if not all(isinstance(t, torch.Tensor) for t in (a, b, c)) or a.shape != sample.shape:
        return False
    same_rows = c.shape == a[:1].shape and torch.allclose(c, a[:1], equal_nan=True)
    return bool(same_rows and torch.allclose(a.reshape(-1)[perm], b.reshape(-1), equal_nan=True))


def _gives(output: Any, measured: Any) -> bool:
    """Whether a module's output is the measured tensor (or a tuple that starts with it)."""
    return output is measured or (isinstance(output, tuple) and bool(output) and output[0] is measured)


def _flat_container(out: Any, torch: Any) -> tuple[list[Any], list[str]] | None:
    """A dict's tensors by sorted key, or a tuple's or list's by index; ``None`` for another output."""
    if isinstance(out, dict):
        keys = sorted(out)
        return [out[k] for k in keys], [str(k) for k in keys]
    if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out), [str(i) for i in range(len(out))]
    return None


def _once_per_input(s: _Seen) -> bool:
    """A module that ran once and returned one tensor of one row per input."""
    return s.calls == 1 and not s.structured and s.per_input


class TorchTraceModel:
    """A ``torch.nn.Module`` whose chosen modules are captured in its own forward pass;
    the interface of :class:`~pytest_sadl.capture.traces.TraceModel` (see the module
    docstring for the rules). ``jit`` is accepted and ignored (the pass runs eagerly)."""

    backend = "torch"
    records = "forward"  # the recorder wraps the module's forward (model(x) and model.forward(x))
    channels_first = True  # image inputs are (n, c, h, w), as torch's convolutions take them

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
        if not is_torch_module(model):
            raise SadlModelError(f"expected a torch.nn.Module, got {type(model).__qualname__}")
        self.model = model
        self.name = _class_name(model)
        self._modules = {p: m for p, m in model.named_modules() if p}
        self._sa_spec = self._check_spec(sa_layers, "SA layers")
        self._cov_spec = self._check_spec(coverage_layers, "coverage layers")
        self._output_spec = output
        self._classifier_spec = classifier
        self._extrema = extrema
        self.jit: bool | None = False
        self.jit_mode = False
        self.compiled_passes = 0
        self.input_names = positional_inputs(model)
        hf.check_supported(model)
        self._parameters = hf.forward_parameters(model)
        self.keywords = False  # inputs given to forward by keyword (Hugging Face: input_ids=...)
        self._mask: Any = None  # the attention mask of the pass running
        self._head: tuple[str, str] | None = None  # (path, "first" | "last"): the token the head reads
        self._probed = False

    # -- structure ------------------------------------------------------------------------

    @property
    def framework_version(self) -> str:
        """What goes into the profile fingerprint in place of the Keras version."""
        return f"torch-{import_torch().__version__}"

    def _check_spec(self, spec: Sequence[str | int] | None, purpose: str) -> list[str] | None:
        if not spec:
            return None
        return [self._module_path(item, purpose) for item in spec]

    def _module_path(self, item: str | int, purpose: str) -> str:
        """The path of one item: a ``named_modules()`` path, or an index (also given as
        digits) into the top-level modules."""
        if is_index(item, self._modules):
            i = int(item)
            top = [p for p in self._modules if "." not in p]
            if not -len(top) <= i < len(top):
                raise SadlLayerError(
                    f"{purpose}: index {i} is out of range; the model's modules are: {self._listing()}"
                )
            return str(top[i])
        if item in self._modules:
            return str(item)
        raise SadlLayerError(
            f"{purpose}: module {item!r} not found; name modules by their named_modules() path: {self._listing()}"
        )

    def _listing(self) -> str:
        return ", ".join(f"{p} ({_class_name(m)})" for p, m in self._modules.items()) or "(no submodules)"

    def _device_dtype(self) -> tuple[Any, Any]:
        torch = import_torch()
        for t in list(self.model.parameters()) + list(self.model.buffers()):
            if t.is_floating_point():
                return t.device, t.dtype
        return torch.device("cpu"), torch.float32

    def _to_tensor(self, a: np.ndarray) -> Any:
        torch = import_torch()
        device, dtype = self._device_dtype()
        a = np.ascontiguousarray(a)
        if not a.flags.writeable:  # a read-only memmap: torch wants writable memory
            a = a.copy()
        t = torch.from_numpy(a)
        if t.is_floating_point() or a.dtype == np.bool_:
            t = t.to(dtype)
        return t.to(device)

    def _ensure_probed(self, x: Any) -> None:
        """Learn the modules' calls, order, shapes and layouts from one two-row pass."""
        if self._probed:
            return
        torch = import_torch()
        firsts = tuple(
            t[:2] if isinstance(t, torch.Tensor) else self._to_tensor(np.asarray(t)[:2]) for t in self._parts(x)
        )
        probe = _Probe(self._modules, int(firsts[0].shape[0]))
        out = probe.run(self, firsts)
        self._seen = probe.seen
        self._settle(out, probe, firsts)

    def _settle(self, out: Any, probe: _Probe, firsts: tuple[Any, ...]) -> None:
        """The output, inputs, classifier and layers, from what the probe saw."""
        out_shape = self._learn_output(out, probe.outputs)
        mask = dict(zip(self.input_names, firsts, strict=True)).get("attention_mask") if self.keywords else None
        self._head = _head_reads(probe, self._flatten_output(out)[0][self._output_index], self._output_path, mask)
        self._learn_inputs(firsts)
        self._learn_classifier(out_shape)
        self._choose_layers()
        self._probed = True

    def _learn_inputs(self, firsts: tuple[Any, ...]) -> None:
        """The inputs' shapes (without the batch axis) and dtype, from the probe's rows."""
        first = firsts[0]
        self.input_shape: tuple[int | None, ...] = tuple(int(d) for d in first.shape[1:])
        self.input_shapes: dict[str, tuple[int | None, ...]] = {
            n: _input_shape(t, self.keywords) for n, t in zip(self.input_names, firsts, strict=True)
        }
        if self.keywords and len(self.input_names) == 1:
            self.input_shape = self.input_shapes[self.input_names[0]]
        self.input_dtype = str(first.dtype).replace("torch.", "")

    def _learn_classifier(self, out_shape: tuple[int, ...]) -> None:
        """Whether the model is a classifier (given, else judged by its output), checked."""
        self.classifier = (
            self._is_classifier(out_shape) if self._classifier_spec is None else bool(self._classifier_spec)
        )
        if self.classifier and len(out_shape) != 2:
            raise SadlModelError(
                f"model {self.name!r} has output {self.output_name!r} of shape {(None,) + out_shape[1:]}; a classifier "
                "needs a (batch, classes) output (pass classifier=False for a regression model)"
            )

    def _learn_output(self, out: Any, outputs: dict[str, Any]) -> tuple[int, ...]:
        """The measured output's name and shape, and the modules that give it."""
        seen = self._seen
        flat, names = self._flatten_output(out)
        self.output_names = names
        self._output_index = self._resolve_output(self._output_spec)
        self.output_name = names[self._output_index]
        measured = flat[self._output_index]
        owners = [p for p, o in outputs.items() if _gives(o, measured)]
        self._output_path = min(owners, key=lambda p: seen[p].order) if owners else None
        self._output_paths = {p for p, o in outputs.items() if any(o is f for f in flat)}
        return tuple(measured.shape)

    def _choose_layers(self) -> None:
        """The SA and coverage layers (given, else the defaults), checked, and their sizes."""
        self.sa_layers = self._sa_spec or self.default_sa_layers()
        self.coverage_layers = self._cov_spec or self.default_coverage_layers()
        self._taps = list(dict.fromkeys(self.sa_layers + self.coverage_layers))
        for path in self._taps:
            self._check_tap(path)
        self._tap_index = {p: i for i, p in enumerate(self._taps)}
        self._set_sizes()

    def _set_sizes(self) -> None:
        """The chosen layers' widths, and the coverage layers whose extrema are kept."""
        self._extrema_paths = [p for p in self.coverage_layers if self._is_map(p)] if self._extrema else []
        self.sa_sizes = [self._size(p) for p in self.sa_layers]
        self.coverage_sizes = [self._size(p) for p in self.coverage_layers]

    def _flatten_output(self, out: Any) -> tuple[list[Any], list[str]]:
        torch = import_torch()
        if isinstance(out, torch.Tensor):
            return [out], ["output"]
        items = hf.output_items(out)
        if items is None:
            items = _flat_container(out, torch)
        if items is not None:
            return items
        raise SadlModelError(
            f"model {self.name!r} returns {type(out).__name__}; pytest-sadl measures a tensor, or a tuple, list "
            "or dict of tensors"
        )

    def _resolve_output(self, output: str | int | None) -> int:
        return resolve_output(output, self.output_names, self.name)

    def _is_classifier(self, shape: tuple[int, ...]) -> bool:
        """Width >= 2 (logits or probabilities): a classifier; width 1: a classifier when a
        ``Sigmoid`` module produces it, else a regression; rank other than 2: not one."""
        if len(shape) != 2:
            return False
        if shape[1] >= 2:
            return True
        owner = self._modules.get(self._output_path) if self._output_path else None
        return owner is not None and _is_torch_class(owner, ("Sigmoid",))

    def _check_tap(self, path: str) -> None:
        s = self._seen[path]
        if s.calls == 0:
            raise SadlLayerError(f"module {path!r} does not run in the model's forward pass; choose one that does")
        if s.calls > 1:
            raise SadlLayerError(
                f"module {path!r} runs {s.calls} times in one forward pass (a shared module); its outputs cannot "
                "be told apart: choose another module"
            )
        if s.structured or s.shape is None:
            raise SadlLayerError(f"module {path!r} returns several tensors; choose a module that returns one")
        if not s.per_input:
            raise SadlLayerError(
                f"module {path!r} does not give one output row per input (it runs on a reshaped batch, such as "
                "frames or a time-major sequence); choose a module whose output has the batch axis first"
            )

    def _is_map(self, path: str) -> bool:
        """Whether a module's output has more axes than ``(batch, features)`` (a feature map)."""
        return len(self._seen[path].shape or ()) > 2

    def _size(self, path: str) -> int:
        s = self._seen[path]
        shape = s.shape or ()
        if len(shape) > 2 and s.layout == "first":
            return int(shape[1] or 0)
        return int(shape[-1] or 0) if len(shape) >= 2 else 1

    def _ordered(self) -> list[str]:
        """Leaf modules that ran once and returned one tensor of one row per input, in call order."""
        leaves = [p for p, m in self._modules.items() if not _has_children(m) and _once_per_input(self._seen[p])]
        return sorted(leaves, key=lambda p: self._seen[p].order)

    def _activated(self) -> dict[str, str]:
        """module path -> the path of the activation or batch-norm module applied directly
        to its output, for a module that is no activation itself and gives no model output
        (a chain Conv -> BatchNorm -> ReLU is measured once, at the ReLU); a per-neuron
        container applied to its output (timm's ``BatchNormAct2d``) counts as its last leaf."""
        out: dict[str, str] = {}
        ordered = self._ordered()
        for p in ordered:
            after = self._seen[p].after
            if after is not None and self._per_neuron(p) and self._may_activate(after):
                out.setdefault(after, p)
        self._activated_by_containers(set(ordered), out)
        return out

    def _activated_by_containers(self, leaves: set[str], out: dict[str, str]) -> None:
        """Into ``out``: a module a per-neuron container is applied to, measured after the
        container's last leaf (when that leaf is one of ``leaves``)."""
        for s in self._seen.values():
            if s.fused is not None and s.after is not None and self._fused_activates(s, leaves):
                out.setdefault(s.after, s.fused)

    def _fused_activates(self, s: _Seen, leaves: set[str]) -> bool:
        """Whether a per-neuron container's last leaf (one of ``leaves``) activates the module it is applied to."""
        return s.fused in leaves and s.after is not None and self._may_activate(s.after)

    def _hidden(self, candidates: list[str]) -> list[str]:
        """The coverage layers before the module that gives the measured output (when it is
        one of them; a block's output counts as its last leaf), and no model output."""
        owner = self._output_path
        if owner is not None and owner in candidates:
            return [p for p in candidates[: candidates.index(owner)] if p not in self._output_paths]
        return candidates[:-1]

    def _per_neuron(self, path: str) -> bool:
        """An activation or batch norm, by class or (an activation of a library) by acting
        element-wise (see :class:`_Probe`)."""
        return is_per_neuron(self._modules[path]) or self._seen[path].elementwise

    def _is_activation(self, path: str) -> bool:
        return is_activation(self._modules[path]) or self._seen[path].elementwise

    def _may_activate(self, path: str) -> bool:
        """A module that an activation after it may be measured for: no activation itself,
        not a model output."""
        return path in self._modules and not self._is_activation(path) and path not in self._output_paths

    def default_coverage_layers(self) -> list[str]:
        """Every leaf module with neurons, in call order; a module followed directly by an
        activation or batch-norm module is measured after it (the last path of the chain)."""
        activated = self._activated()
        return [p for p in self._ordered() if not is_pass_through(self._modules[p]) and p not in activated]

    def default_sa_layers(self) -> list[str]:
        """The last coverage layer before the one that produces the measured output."""
        if self._head is not None:  # a sequence model's head reads one token of this module's output
            return [self._head[0]]
        candidates = self._hidden(self.default_coverage_layers())
        if not candidates:
            raise SadlLayerError(
                f"model {self.name!r} has no hidden module with neurons to measure surprise on; choose the SA "
                f"layers explicitly; modules are: {self._listing()}"
            )
        return [candidates[-1]]

    def describe_layers(self) -> list[dict[str, Any]]:
        """Every module with its path, class, output shape and whether it is a default."""
        self._require_probe()
        sa, cov = set(self.sa_layers), set(self.coverage_layers)
        return [
            {
                "path": p,
                "class": _class_name(m),
                "output_shape": None if (shape := self._seen[p].shape) is None else list(shape),
                "calls": self._seen[p].calls,
                "sa": p in sa,
                "coverage": p in cov,
            }
            for p, m in self._modules.items()
        ]

    def _require_probe(self) -> None:
        if not self._probed:
            raise SadlModelError(
                f"model {self.name!r} is a torch.nn.Module: its input shape is learned from its first inputs; "
                "give its inputs first (sadl_train; sadl profile layers --train)"
            )

    def __getattr__(self, name: str) -> Any:
        # the layers, sizes and outputs exist once the probe ran (the first inputs seen)
        if name in (
            "sa_layers",
            "coverage_layers",
            "sa_sizes",
            "coverage_sizes",
            "classifier",
            "output_names",
            "output_name",
            "input_shape",
            "input_shapes",
            "input_dtype",
        ):
            self._require_probe()
        raise AttributeError(name)

    # -- the pass -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _hooked(self, captured: dict[str, Any]) -> Iterator[None]:
        """Forward hooks on the chosen modules for the block: each puts its reduced output
        (and a conv map's per-input min and max) into ``captured``, detached copies."""
        handles = [self._modules[p].register_forward_hook(self._hook(p, captured)) for p in self._taps]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def _hook(self, path: str, captured: dict[str, Any]) -> Any:
        """The forward hook of the module ``path``: its reduced output into ``captured``
        (what each call needs of the module decided once, here, not per call)."""
        layout = self._seen[path].layout
        extrema = path in self._extrema_paths
        rnn = _is_torch_class(self._modules[path], _RNNS)
        head = self._head[1] if self._head is not None and path == self._head[0] else None

        def fn(module: Any, args: Any, out: Any) -> None:
            main, single = _main_output(module, out, rnn)
            if not single:
                return
            if head is not None:
                captured[path + "\0token"] = _token(main, head, self._mask)
            if extrema and self._mask is None:  # the three reductions of a map, block by block
                captured[path], captured[path + "\0min"], captured[path + "\0max"] = _map_stats(main, layout)
                return
            captured[path] = _reduce(main, layout, self._mask)
            if extrema:
                captured[path + "\0min"], captured[path + "\0max"] = _extrema(main)

        return fn

    def _split(self, output: Any, captured: dict[str, Any]) -> Traces:
        flat, _ = self._flatten_output(output)
        out = to_numpy(flat[self._output_index]).astype(np.float32, copy=False)
        if out.ndim == 1:
            out = out[:, None]
        taps = self._tap_traces(captured, len(out))
        return Traces(
            sa=self._sa_traces(captured),
            coverage=[taps[p] for p in self.coverage_layers],
            pred=self.predictions(out),
            output=out,
            sa_layers=list(self.sa_layers),
            coverage_layers=list(self.coverage_layers),
            coverage_extrema=self._extrema_of(captured),
        )

    def _tap_traces(self, captured: dict[str, Any], n: int) -> dict[str, np.ndarray]:
        """Every tapped module's traces, checked: each ran, with one row per input (``n``)."""
        missing = [p for p in self._taps if p not in captured]
        if missing:
            raise SadlLayerError(f"modules {missing} did not run in this forward pass; choose modules that always run")
        taps = {p: to_numpy(captured[p]) for p in self._taps}
        uneven = [p for p, t in taps.items() if len(t) != n]
        if uneven:
            raise SadlLayerError(
                f"modules {uneven} gave {len(taps[uneven[0]])} rows for {n} inputs; choose modules whose "
                "output has one row per input"
            )
        return taps

    def _sa_traces(self, captured: dict[str, Any]) -> np.ndarray:
        """The SA layers' traces side by side (a sequence output's read token where there is one)."""
        sa_parts = [to_numpy(captured.get(p + "\0token", captured[p])) for p in self.sa_layers]
        sa = sa_parts[0] if len(sa_parts) == 1 else np.concatenate(sa_parts, axis=1)
        return np.asarray(sa, dtype=np.float32)

    def _extrema_of(self, captured: dict[str, Any]) -> list[Any] | None:
        """``(min, max)`` per coverage layer whose extrema are kept (``None`` for the others)."""
        if not self._extrema_paths:
            return None
        pairs = {p: (to_numpy(captured[p + "\0min"]), to_numpy(captured[p + "\0max"])) for p in self._extrema_paths}
        return [pairs.get(p) for p in self.coverage_layers]

    def predictions(self, output: np.ndarray) -> np.ndarray:
        """Predicted classes (argmax; for one unit, > 0.5 after its sigmoid) or the raw output."""
        if not self.classifier:
            return np.asarray(output, dtype=np.float32)
        if output.shape[-1] == 1:
            return (output[:, 0] > 0.5).astype(np.int64)
        classes: np.ndarray = np.argmax(output, axis=1)
        return classes.astype(np.int64)

    # -- inputs -------------------------------------------------------------------------------

    def call_model(self, call: Any, parts: Sequence[Any], extra: dict[str, Any] | None = None) -> Any:
        """``call`` (the model, or its original ``forward``) on one batch's inputs, in
        ``forward``'s order."""
        if not self.keywords:
            return call(*parts)
        inputs = dict(zip(self.input_names, parts, strict=True))
        self._mask = inputs.get("attention_mask")
        try:
            return call(**inputs, **(extra or {}))
        finally:
            self._mask = None

    def _parts(self, x: Any) -> tuple[Any, ...]:
        """The model's positional inputs of one batch, in ``forward``'s order: one array or
        tensor, or a tuple/list (positional) or dict (by parameter name) for several."""
        n = len(self.input_names)
        if isinstance(x, dict):
            return self._keyed_parts(x)
        parts = tuple(x) if isinstance(x, (tuple, list)) and n > 1 else (x,)
        if len(parts) != n:
            raise SadlDataError(
                f"the model's forward takes {n} inputs ({', '.join(self.input_names)}), got {len(parts)}; "
                "give one array or tensor per input"
            )
        return parts

    def _keyed_parts(self, x: dict[str, Any]) -> tuple[Any, ...]:
        """The inputs of a dict by ``forward``'s parameter names, in ``forward``'s order."""
        missing = [name for name in self.input_names if name not in x]
        if missing:
            raise SadlDataError(
                f"inputs hold {sorted(x)}; the model's forward takes {', '.join(self.input_names)}: "
                "key them by forward's parameter names"
            )
        return tuple(x[name] for name in self.input_names)

    def _first_batch(self, data: TrainingData) -> Any:
        for batch in data.batches(2):
            return batch if isinstance(batch, dict) else np.asarray(batch)
        raise SadlDataError(f"{data.source} is empty (0 inputs); give at least one input")

    def prepare(self, data: TrainingData) -> TrainingData:
        """``data`` for this model (one array, or a dict by ``forward``'s parameter names
        for several positional inputs), its shapes checked against the probed ones (the
        probe runs on its first rows when no input was seen yet)."""
        if isinstance(data.x, dict) and not self._probed:
            self._take_keywords(list(data.x))
        bound = data.bind(self.input_names)
        if not self._probed:
            self._ensure_probed(self._first_batch(bound))
        bound.check_shape(self.input_shape if len(self.input_names) == 1 else self.input_shapes)
        return bound

    def _take_keywords(self, names: Sequence[str]) -> None:
        """Inputs given to ``forward`` by keyword, as a Hugging Face model takes them
        (``input_ids``, ``attention_mask``, ``pixel_values``): when ``names`` are parameters
        of ``forward`` other than its required positional ones; they become the inputs,
        in ``forward``'s order (decided once, before the probe)."""
        if not self._takes_keywords(names):
            return
        self.keywords = True
        self.input_names = [p for p in self._parameters if p in names]

    def _takes_keywords(self, names: Sequence[str]) -> bool:
        """Whether ``names`` are inputs by keyword: not decided yet, other than the
        positional inputs, and all parameters of ``forward``."""
        if self.keywords or self._probed or not names or set(names) == set(self.input_names):
            return False
        return set(names) <= set(self._parameters)

    def call_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, str | None]:
        """The measured inputs of one call ``model(*args, **kwargs)`` (what the recorder
        records): one tensor, a tuple of the positional inputs, or a
        :class:`~pytest_sadl.capture.hf.KeywordCall` by ``forward``'s parameter names
        (``model(**batch)``, ``model(input_ids=..., attention_mask=...)``); else ``None``
        and why the call cannot be recorded."""
        n = len(self.input_names)
        if not kwargs and len(args) == n and not self.keywords:
            return (args[0] if n == 1 else tuple(args)), None
        x, why = hf.bind_call(self.model, args, kwargs)
        if x is None:
            return None, why
        self._take_keywords(list(x))
        if not self.keywords or set(x) != set(self.input_names):
            return None, (
                f"model(...) was called with several arguments or keywords ({', '.join(x) or 'no tensors'}) "
                f"other than the measured inputs ({', '.join(self.input_names)}: forward's positional ones or "
                "the training data's keys)"
            )
        return x, None

    def _as_tensors(self, batch: Any, what: str, offset: int) -> tuple[Any, ...]:
        out = []
        for name, part in zip(self.input_names, self._parts(batch), strict=True):
            a = np.asarray(part)
            label = what if len(self.input_names) == 1 else f"{what} (input {name!r})"
            check_batch(a, self.input_shapes[name], what=label, offset=offset)
            out.append(self._to_tensor(a))
        return tuple(out)

    def traces(
        self, x: Any, batch_size: int = 256, *, progress: Progress | None = None, what: str = "inputs"
    ) -> Traces:
        """Traces of every input of ``x`` (an array, a tensor, a ``Dataset``/``DataLoader``
        or :class:`TrainingData`), ``batch_size`` at a time, in ``eval()`` mode under
        ``no_grad`` (the module's modes restored after)."""
        torch = import_torch()
        if batch_size < 1:
            raise SadlDataError(f"batch_size must be >= 1, got {batch_size}")
        data = x if isinstance(x, TrainingData) else load_training_data(x, what=what)
        data = self.prepare(data)
        with torch.no_grad(), _eval_mode(self.model):
            parts = self._batch_traces(data, batch_size, progress)
        if not any(len(t) for t in parts):
            raise SadlDataError(f"{data.source} is empty (0 inputs); give at least one input")
        return parts[0] if len(parts) == 1 else Traces.concatenate(parts)

    def _batch_traces(self, data: TrainingData, batch_size: int, progress: Progress | None) -> list[Traces]:
        """The traces of each batch of ``data``, one hooked pass per batch."""
        parts: list[Traces] = []
        done = 0
        for batch in data.batches(batch_size):
            ts = self._as_tensors(batch, data.source, done)
            captured: dict[str, Any] = {}
            with self._hooked(captured):
                output = self.call_model(self.model, ts)
            parts.append(self._split(output, captured))
            done += len(parts[-1])
            if progress is not None:
                progress(done, data.n)
        return parts

    def traces_and_ranges(
        self, x: Any, batch_size: int = 256, *, progress: Progress | None = None, what: str = "inputs"
    ) -> tuple[Traces, Any]:
        """What a profile build needs of one pass, as the Keras trace model's method gives
        it: :meth:`traces_folding` into a ``RangeFit`` of the coverage layers (their sizes
        known once :meth:`prepare` probed the module on the first inputs), and its ranges."""
        from pytest_sadl.criteria.neurons import RangeFit

        data = self.prepare(x if isinstance(x, TrainingData) else load_training_data(x, what=what))
        fit = RangeFit(self.coverage_sizes, self.coverage_layers)
        return self.traces_folding(data, fit, batch_size, progress=progress, what=what), fit.result()

    def traces_folding(
        self, x: Any, fit: Any, batch_size: int = 256, *, progress: Progress | None = None, what: str = "inputs"
    ) -> Traces:
        """The traces without ``coverage`` (empty), the coverage traces folded into ``fit``
        (a :class:`~pytest_sadl.criteria.neurons.RangeFit` of :attr:`coverage_sizes`, known
        once the module was probed: :meth:`prepare`), as the Keras trace model's method
        does for a Dask worker."""
        traces = self.traces(x, batch_size, progress=progress, what=what)
        for i, layer in enumerate(traces.coverage):
            fit.update(i, layer, 0)
        return replace(traces, coverage=[])

    def call_and_trace(self, x: Any, batch_size: int | None = None, **kwargs: Any) -> tuple[Any, Traces]:
        """``(output, traces)`` of one pass over ``x`` (NumPy output)."""
        t = self.traces(x, batch_size or 256)
        return t.output, t

    def unrecordable(self, x: Any) -> str | None:
        """Why ``model(x)`` (``x`` a tuple for several positional inputs) cannot be recorded
        now (``None``: it can)."""
        torch = import_torch()
        why = _tracing(torch) or _not_tensors(torch, x)
        if why is None and self.model.training:
            return "model(x) was called in train() mode (dropout and batch statistics on); call model.eval() to record"
        return why

    def host(self, x: Any) -> Any:
        """The inputs of a call as NumPy (what the recorder digests): one array, or a dict
        by ``forward``'s parameter names for several positional inputs (as the training
        data is bound, so that the digests of both agree)."""
        if len(self.input_names) == 1:
            return to_numpy(x[self.input_names[0]] if isinstance(x, dict) else x)
        return {n: to_numpy(p) for n, p in zip(self.input_names, self._parts(x), strict=True)}

    def call_tensors(self, x: Any, *, forward: Any = None, training: bool = False) -> tuple[Any, Traces]:
        """``forward(x)`` (default ``model(x)``; ``forward(*x)`` for a tuple of several
        positional inputs) once, with the hooks on: the model's own output (gradients flow
        when grad mode is on) and the traces of that pass."""
        parts = self._parts(x)
        self._ensure_probed(dict(zip(self.input_names, parts, strict=True)) if len(parts) > 1 else parts[0])
        for name, part in zip(self.input_names, parts, strict=True):
            if not shape_matches(tuple(part.shape[1:]), tuple(self.input_shapes[name])):
                what = "model(x)" if len(parts) == 1 else f"model(...) (input {name!r})"
                check_batch(
                    np.zeros((1,) + tuple(part.shape[1:]), np.float32), self.input_shapes[name], what=what, offset=0
                )
        captured: dict[str, Any] = {}
        call = forward if forward is not None else self.model
        with self._hooked(captured):
            output = self.call_model(call, parts, getattr(x, "extra", None))
        return output, self._split(output, captured)


def _tracing(torch: Any) -> str | None:
    """Why nothing can be recorded while torch.compile or torch.jit traces the model (``None``: neither does)."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling():
        return "model(x) was called while torch.compile traces it (no values to record)"
    if torch.jit.is_tracing() or torch.jit.is_scripting():
        return "model(x) was called while torch.jit traces it (no values to record)"
    return None


def _not_tensors(torch: Any, x: Any) -> str | None:
    """Why a call's inputs ``x`` cannot be recorded: not one tensor per input, or symbolic ones."""
    parts = tuple(x.values()) if isinstance(x, dict) else tuple(x) if isinstance(x, tuple) else (x,)
    if any(not isinstance(p, (torch.Tensor, np.ndarray)) for p in parts):
        return "model(x) was called with something other than one tensor per input"
    if any(isinstance(p, torch.Tensor) and type(p).__name__ in ("FakeTensor", "FunctionalTensor") for p in parts):
        return "model(x) was called on symbolic tensors"
    return None


def _input_shape(t: Any, keywords: bool) -> tuple[int | None, ...]:
    """An input's shape without the batch axis; token ids and masks given by keyword (a
    tokenizer's output, padded to each batch's longest) have a sequence axis of any length."""
    shape: tuple[int | None, ...] = tuple(int(d) for d in t.shape[1:])
    if keywords and not t.is_floating_point() and len(shape) == 1:
        return (None,)
    return shape


def positional_inputs(model: Any) -> list[str]:
    """The names of the required positional parameters of ``model.forward`` when it takes
    several (``forward(self, image, aux)`` -> ``["image", "aux"]``), else ``["input"]``."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):  # a builtin or C forward: one input
        return ["input"]
    names = [p.name for p in params if _required_positional(p)]
    return names if len(names) > 1 else ["input"]


def _required_positional(p: Any) -> bool:
    """A parameter taken by position without a default."""
    import inspect

    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return p.kind in kinds and p.default is inspect.Parameter.empty
