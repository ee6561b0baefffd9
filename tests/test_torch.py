"""Native PyTorch models (``torch.nn.Module``, :mod:`pytest_sadl.capture.torch`).

The Keras models of ``tests/_models.py`` (the digits MLP and ConvNet, trained on
TensorFlow) get PyTorch twins with the same weights copied over (a Dense kernel
transposed, a Conv2D kernel to ``(out, in, kh, kw)``, the Dense after a Flatten permuted
from ``(h, w, c)`` to ``(c, h, w)`` order): the same traces to 1e-5 and the same numbers.
The rules of the torch side (defaults, reductions, modes, recording) are checked against
hand computations. torch is imported at module level on purpose: an in-process pytester
run that imported torch for the first time would drop it from ``sys.modules`` afterwards,
and torch cannot be imported twice in one process.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")

from torch import nn  # noqa: E402

from pytest_sadl.capture import trace_model  # noqa: E402
from pytest_sadl.capture.data import load_training_data  # noqa: E402
from pytest_sadl.capture.model import load_model  # noqa: E402
from pytest_sadl.capture.torch import TorchTraceModel  # noqa: E402
from pytest_sadl.criteria.neurons import fit_ranges, kmnc, nbc, nc, snac  # noqa: E402
from pytest_sadl.criteria.surprise import DSA, LSA, surprise_coverage  # noqa: E402
from pytest_sadl.errors import SadlLayerError, SadlModelError  # noqa: E402
from pytest_sadl.profile.build import model_fingerprint  # noqa: E402
from pytest_sadl.records import thumbnails  # noqa: E402
from tests import _models  # noqa: E402

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="compared with Keras on TensorFlow")


def torch_mlp() -> Any:
    """The twin of ``_models.build_dense``."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 10), nn.Softmax(dim=1)
    )


def torch_conv() -> Any:
    """The twin of ``_models.build_conv``."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3),
        nn.ReLU(),
        nn.Flatten(),
        nn.Dropout(0.25),
        nn.Linear(64, 32),
        nn.ReLU(),
        nn.Linear(32, 10),
        nn.Softmax(dim=1),
    )


def copy_weights(keras_model: Any, module: Any) -> Any:
    """The Keras model's weights into the twin, layer by layer in order."""
    weighted = [m for m in module if isinstance(m, (nn.Linear, nn.Conv2d))]
    layers = [layer for layer in keras_model.layers if layer.get_weights()]
    assert len(weighted) == len(layers)
    flat_shape = None  # the (h, w, c) map a Flatten before the next Dense flattened
    for layer, m in zip(layers, weighted, strict=True):
        kernel, bias = layer.get_weights()
        if isinstance(m, nn.Conv2d):
            w = kernel.transpose(3, 2, 0, 1)
            flat_shape = tuple(layer.output.shape[1:])
        else:
            w = kernel
            if flat_shape is not None and kernel.shape[0] == int(np.prod(flat_shape)):
                h, wd, c = flat_shape
                w = kernel.reshape(h, wd, c, -1).transpose(2, 0, 1, 3).reshape(kernel.shape[0], -1)
            flat_shape = None
            w = w.T
        with torch.no_grad():
            m.weight.copy_(torch.from_numpy(np.ascontiguousarray(w)))
            m.bias.copy_(torch.from_numpy(bias))
    return module.eval()


def chw(x: np.ndarray) -> np.ndarray:
    """(n, h, w, c) images as PyTorch's (n, c, h, w)."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


@pytest.fixture(scope="module")
def twins(dense_model: Any, conv_model: Any) -> dict[str, tuple[Any, Any]]:
    return {
        "mlp": (dense_model, copy_weights(dense_model, torch_mlp())),
        "conv": (conv_model, copy_weights(conv_model, torch_conv())),
    }


# ----------------------------------------------------------------------------- rules


def test_defaults_name_modules_by_path_and_take_outputs_after_their_activation(twins: Any) -> None:
    """Coverage: every leaf with neurons (Flatten and Dropout excluded), a Linear/Conv
    followed by an activation module measured after it (the activation's path); SA: the
    last of them before the output; both as the Keras twin's layers, one for one."""
    keras_conv, conv = twins["conv"]
    tm = trace_model(conv)
    assert isinstance(tm, TorchTraceModel)
    tm.prepare(load_training_data(np.zeros((2, 1, 8, 8), np.float32)))
    assert tm.coverage_layers == ["1", "2", "4", "8", "10"]  # relu, pool, relu, relu, softmax
    assert tm.sa_layers == ["8"] and tm.classifier
    assert trace_model(keras_conv).coverage_layers == ["conv1", "pool1", "conv2", "hidden", "probs"]
    assert tm.coverage_sizes == [8, 8, 16, 32, 10] and tm.sa_sizes == [32]
    # a module named explicitly is measured as it is: the Linear before its ReLU
    pre = trace_model(conv, sa_layers=["7"], coverage_layers=["0", "7"])
    x = np.random.default_rng(0).random((5, 1, 8, 8), dtype=np.float32)
    t = pre.traces(x)
    with torch.no_grad():
        pre_h = conv[:8](torch.from_numpy(x)).numpy()  # through Linear(64, 32), before its ReLU
        post_h = conv[:9](torch.from_numpy(x)).numpy()  # and after it: the default "8"
    np.testing.assert_allclose(t.sa, pre_h, atol=1e-6)
    np.testing.assert_allclose(tm.traces(x).sa, post_h, atol=1e-6)
    assert (t.sa < 0).any() and (post_h >= 0).all()
    with pytest.raises(SadlLayerError, match="module 'nope' not found.*features|module 'nope' not found"):
        trace_model(conv, sa_layers=["nope"])


def test_a_conv_batchnorm_relu_chain_is_one_layer_measured_after_its_activation() -> None:
    """Conv2d -> BatchNorm2d -> ReLU is measured once, at the ReLU; a Linear -> BatchNorm1d
    without an activation at the BatchNorm; an activation then a batch norm both (as on
    Keras: each neuron once, after its activation)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3),  # 0
        nn.BatchNorm2d(4),  # 1
        nn.ReLU(),  # 2
        nn.Flatten(),  # 3
        nn.Linear(144, 8),  # 4
        nn.BatchNorm1d(8),  # 5
        nn.Linear(8, 6),  # 6
        nn.Tanh(),  # 7
        nn.BatchNorm1d(6),  # 8
        nn.Linear(6, 3),  # 9
    ).eval()
    tm = trace_model(model)
    x = np.random.default_rng(0).normal(size=(5, 1, 8, 8)).astype(np.float32)
    tm.prepare(load_training_data(x))
    assert tm.coverage_layers == ["2", "5", "7", "8", "9"]
    with torch.no_grad():
        relu = model[:3](torch.from_numpy(x)).numpy().mean(axis=(2, 3))
    np.testing.assert_allclose(tm.traces(x).layer("2"), relu, atol=1e-6)
    named = trace_model(model, coverage_layers=["0", "1"])
    named.prepare(load_training_data(x))
    assert named.coverage_layers == ["0", "1"]  # named: measured as they are


class _OutputAndReusedReLU(nn.Module):
    """A module that is a model output (``emb``) before a batch norm, and one ReLU module
    called twice (as torchvision's ResNet blocks do)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.act = nn.Tanh()
        self.emb = nn.Linear(6, 5)
        self.bn = nn.BatchNorm1d(5)
        self.c1 = nn.Linear(5, 5)
        self.bn1 = nn.BatchNorm1d(5)
        self.relu = nn.ReLU()
        self.c2 = nn.Linear(5, 5)
        self.head = nn.Linear(5, 3)

    def forward(self, x: Any) -> Any:
        e = self.emb(self.act(self.a(x)))
        z = self.relu(self.bn1(self.c1(self.bn(e))))
        return self.head(self.relu(self.c2(z))), e


def test_a_module_giving_an_output_keeps_its_trace_and_a_reused_relu_ends_no_chain() -> None:
    torch.manual_seed(0)
    model = _OutputAndReusedReLU().eval()
    x = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    tm = trace_model(model, output=1, classifier=False)
    tm.prepare(load_training_data(x))
    # emb is the measured output: kept; c1 -> bn1 ends at bn1, the ReLU runs twice
    assert tm.coverage_layers == ["act", "emb", "bn", "bn1", "c2", "head"]
    assert tm.sa_layers == ["act"]


class Seq(nn.Module):
    """A channels-first Conv1d map, a time-major LSTM and a shared module."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 2)
        self.act = nn.Tanh()
        self.lstm = nn.LSTM(4, 5)  # batch_first=False: (t, n, f)
        self.shared = nn.Linear(5, 5)
        self.head = nn.Linear(5, 2)

    def forward(self, x: Any) -> Any:
        c = self.act(self.conv(x))  # (n, 4, l)
        seq, _ = self.lstm(c.permute(2, 0, 1))  # (l, n, 5)
        z = self.shared(self.shared(seq[-1]))
        return self.head(z)


def test_channels_first_maps_and_time_major_sequences_reduce_as_the_naive_loop() -> None:
    torch.manual_seed(0)
    model = Seq().eval()
    x = np.random.default_rng(1).normal(size=(6, 3, 7)).astype(np.float32)
    tm = trace_model(model, sa_layers=["lstm"], extrema=True)
    t = tm.traces(x, batch_size=4)
    assert tm.coverage_layers == ["act", "lstm", "head"]  # conv measured after its Tanh; shared runs twice
    with torch.no_grad():
        c = model.act(model.conv(torch.from_numpy(x))).numpy()  # (n, 4, 6)
        seq = model.lstm(torch.from_numpy(c).permute(2, 0, 1))[0].permute(1, 0, 2).numpy()  # (n, t, 5)
    loop_c = np.array([[c[i, ch, :].mean() for ch in range(4)] for i in range(6)])
    loop_s = np.array([[seq[i, :, f].mean() for f in range(5)] for i in range(6)])
    np.testing.assert_allclose(t.coverage[0], loop_c, atol=1e-6)
    np.testing.assert_allclose(t.coverage[1], loop_s, atol=1e-6)
    np.testing.assert_allclose(t.sa, loop_s, atol=1e-6)
    assert t.coverage_extrema is not None
    np.testing.assert_allclose(t.coverage_extrema[1][1], seq.reshape(6, -1).max(axis=1), atol=1e-6)
    with pytest.raises(SadlLayerError, match="runs 2 times"):
        trace_model(model, coverage_layers=["shared"]).traces(x)
    assert not tm.classifier or tm.output_names == ["output"]


@pytest.mark.parametrize("memory_format", ["contiguous", "channels_last"])
def test_a_map_larger_than_a_block_reduces_as_on_the_whole_map(memory_format: str) -> None:
    # 120 x 16 x 24 x 24 floats (4.4 MB): the hooks reduce it in blocks of rows (_map_stats);
    # the means are torch's own on the whole map, the extrema NumPy's, exactly
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
    model = model.eval()
    if memory_format == "channels_last":
        model = model.to(memory_format=torch.channels_last)
    x = np.random.default_rng(2).normal(size=(120, 3, 24, 24)).astype(np.float32)
    tm = trace_model(model, coverage_layers=["0"], sa_layers=["3"], extrema=True)
    t = tm.traces(x, batch_size=120)
    with torch.no_grad():
        conv = model[0](
            torch.from_numpy(x).contiguous(
                memory_format=getattr(torch, memory_format.replace("contiguous", "contiguous_format"))
            )
        )
    assert conv.nbytes > 4 << 20
    np.testing.assert_array_equal(t.coverage[0], conv.mean(dim=(2, 3)).numpy())
    np.testing.assert_allclose(t.coverage[0], conv.numpy().mean(axis=(2, 3)), atol=1e-6)
    assert t.coverage_extrema is not None
    low, high = t.coverage_extrema[0]
    flat = conv.numpy().reshape(120, -1)
    np.testing.assert_array_equal(low, flat.min(axis=1))
    np.testing.assert_array_equal(high, flat.max(axis=1))


def test_profile_passes_run_in_eval_mode_without_grad_and_restore_the_modes(twins: Any) -> None:
    _, conv = twins["conv"]
    model = torch_conv()
    model.load_state_dict(conv.state_dict())
    model.train()
    model[6].eval()  # one submodule in its own mode
    seen: list[tuple[bool, bool]] = []
    handle = model[6].register_forward_hook(lambda m, a, o: seen.append((m.training, torch.is_grad_enabled())))
    x = np.random.default_rng(2).random((40, 1, 8, 8), dtype=np.float32)
    try:
        a = trace_model(model).traces(x)
        b = trace_model(model).traces(x)
    finally:
        handle.remove()
    assert seen and all(mode == (False, False) for mode in seen)  # dropout off, no graph
    assert model.training and not model[6].training and model[0].training  # every flag restored
    np.testing.assert_array_equal(a.sa, b.sa)  # dropout off: the same numbers twice


def test_training_data_as_tensor_array_dataset_and_dataloader(twins: Any, digits: Any) -> None:
    from torch.utils.data import DataLoader, TensorDataset

    _, mlp = twins["mlp"]
    x = chw(digits.x_train[:70])
    y = digits.y_train[:70]
    tm = trace_model(mlp)
    want = tm.traces(x).sa
    tensor_x = torch.from_numpy(x).requires_grad_()
    for source in (
        tensor_x,
        TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
        DataLoader(TensorDataset(torch.from_numpy(x)), batch_size=16),
    ):
        data = load_training_data(source)
        # batches of 16 against one of 70: torch may pick another matrix kernel per batch
        # size on another CPU, so float32 agrees to ulps of the values (up to ~12 here)
        np.testing.assert_allclose(tm.traces(data).sa, want, rtol=1e-5, atol=1e-6)
        assert data.fingerprint() == load_training_data(x).fingerprint()
    labelled = load_training_data(DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=32))
    np.testing.assert_array_equal(labelled.y, y)


def test_fingerprint_follows_the_weights_and_files_that_unpickle_are_refused(twins: Any, tmp_path: Path) -> None:
    _, mlp = twins["mlp"]
    other = torch_mlp()
    other.load_state_dict(mlp.state_dict())
    assert model_fingerprint(other) == model_fingerprint(mlp)
    with torch.no_grad():
        other[1].bias[0] += 1e-3
    assert model_fingerprint(other) != model_fingerprint(mlp)
    from pytest_sadl.capture.identity import model_digest  # the plugin's check that the model did not change

    assert model_digest(other) != model_digest(mlp)
    other.load_state_dict(mlp.state_dict())
    assert model_digest(other) == model_digest(mlp) and model_fingerprint(other) == model_fingerprint(mlp)
    assert load_model(mlp) is mlp
    (tmp_path / "model.pt").write_bytes(b"not loaded")
    with pytest.raises(SadlModelError, match="does not load PyTorch files.*weights_only=True"):
        load_model(tmp_path / "model.pt")


def test_sadl_profile_layers_lists_a_modules_paths_after_a_pass_on_its_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_sadl.cli.main import main

    np.save(tmp_path / "x.npy", np.zeros((3, 1, 8, 8), np.float32))
    assert (
        main(["profile", "layers", "--model", "tests.test_torch:torch_conv", "--train", str(tmp_path / "x.npy")]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "model 'Sequential': inputs input; outputs output (measured: output, classifier)"
    row = {line.split()[0]: line for line in lines[1:]}
    assert row["0"].split()[1:] == ["Conv2d", "(n,", "8,", "8,", "8)"]  # measured after its ReLU: no default
    assert row["1"].split()[1] == "ReLU" and row["1"].endswith("coverage default") and "SA" not in row["1"]
    assert "SA default, coverage default" in row["8"] and "Dropout" in row["6"] and "default" not in row["6"]
    assert main(["profile", "layers", "--model", "tests.test_torch:torch_conv"]) == 2
    assert "give its inputs first" in capsys.readouterr().err


# ----------------------------------------------------------------------------- same numbers


@pytest.mark.parametrize("name", ["mlp", "conv"])
def test_the_same_weights_give_the_keras_traces_and_numbers(twins: Any, digits: Any, name: str) -> None:
    """Keras (TensorFlow) and PyTorch with the same weights: traces to 1e-5, the same
    classes, identical NC/NBC/SNAC, KMNC within a few sections, LSC/DSC within a bucket."""
    keras_model, module = twins[name]
    ktm, ttm = trace_model(keras_model, extrema=True), trace_model(module, extrema=True)
    train_k, test_k = digits.x_train, digits.x_test[:200]
    kt_train, kt = ktm.traces(train_k), ktm.traces(test_k)
    tt_train, tt = ttm.traces(chw(train_k)), ttm.traces(chw(test_k))
    for a, b in ((kt_train, tt_train), (kt, tt)):
        np.testing.assert_allclose(b.sa, a.sa, atol=1e-5)
        np.testing.assert_allclose(b.output, a.output, atol=1e-5)
        np.testing.assert_array_equal(b.pred, a.pred)
        for u, v in zip(a.coverage, b.coverage, strict=True):
            np.testing.assert_allclose(v, u, atol=1e-5)
    rk, rt = fit_ranges(kt_train.coverage), fit_ranges(tt_train.coverage)
    if name == "conv":  # NC scales each whole conv map: the extrema both passes captured
        assert nc(kt, 0.5) == nc(tt, 0.5)
    else:
        assert tt.coverage_extrema is None and nc(kt.coverage, 0.5) == nc(tt.coverage, 0.5)
    assert nbc(kt.coverage, rk) == nbc(tt.coverage, rt) and snac(kt.coverage, rk) == snac(tt.coverage, rt)
    total = sum(rk.sizes) * 1000
    assert abs(kmnc(kt.coverage, rk) - kmnc(tt.coverage, rt)) * total <= 5  # a few of 1000 sections per neuron
    for cls in (LSA, DSA):
        sk = cls(kt_train.sa, kt_train.pred)(kt.sa, kt.pred)
        st = cls(tt_train.sa, tt_train.pred)(tt.sa, tt.pred)
        upper = float(np.quantile(sk, 0.99)) * 1.5
        lower = -50.0 if cls is LSA else 0.0
        assert (
            abs(
                surprise_coverage(sk, lower=lower, upper=upper, buckets=100)
                - surprise_coverage(st, lower=lower, upper=upper, buckets=100)
            )
            <= 1 / 100 + 1e-12
        )


# ----------------------------------------------------------------------------- end to end

CONFTEST = """
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


@pytest.fixture(scope="session")
def sadl_model():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(),
                          nn.Linear(16, 10), nn.Softmax(dim=1))
    weights = np.load("weights.npz")
    model.load_state_dict({k: torch.from_numpy(weights[k]) for k in weights.files})
    return model.eval()


@pytest.fixture(scope="session")
def sadl_train():
    with np.load("train.npz") as d:
        return DataLoader(TensorDataset(torch.from_numpy(d["x"]), torch.from_numpy(d["y"])), batch_size=64, shuffle=True)
"""

TORCH_TESTS = """
import numpy as np
import pytest
import torch

X = torch.from_numpy(np.load("inputs.npy"))


@pytest.mark.sadl(group="held-out")
def test_no_grad(sadl_model):
    with torch.no_grad():
        assert sadl_model(X[:40]).shape == (40, 10)


@pytest.mark.sadl(group="noisy")
def test_grad_flows_through_forward(sadl_model):
    x = X[40:50].clone().requires_grad_()
    out = sadl_model.forward(x)
    out[:, 3].sum().backward()
    assert x.grad is not None and float(x.grad.abs().max()) > 0


@pytest.mark.sadl(group="noisy")
def test_inference_mode(sadl_model):
    with torch.inference_mode():
        assert sadl_model(X[50:60]).argmax(1).shape == (10,)


@pytest.mark.sadl(group="noisy")
def test_train_mode_is_not_recorded(sadl_model):
    sadl_model.train()
    try:
        sadl_model(X[:7]).sum().backward()
    finally:
        sadl_model.eval()


def test_unmarked_is_not_recorded(sadl_model):
    with torch.no_grad():
        sadl_model(X[:5])
"""

KERAS_TESTS = """
import numpy as np
import pytest

X = np.load("inputs.npy")


@pytest.mark.sadl(group="held-out")
def test_predict(sadl_model):
    assert sadl_model.predict(X[:40], verbose=0).shape == (40, 10)


@pytest.mark.sadl(group="noisy")
def test_call(sadl_model):
    assert sadl_model(X[40:60], training=False).shape[0] == 20


def test_unmarked_is_not_recorded(sadl_model):
    sadl_model.predict(X[:5], verbose=0)
"""

BOUNDS = "sadl_lsc_lower = -50\nsadl_lsc_upper = 100\nsadl_dsc_lower = 0\nsadl_dsc_upper = 3\n"


def test_a_native_module_from_a_fixture_with_a_dataloader_gives_the_keras_report(
    pytester: pytest.Pytester, twins: Any, dense_model_path: Path, digits: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin end to end on an ``nn.Module`` fixture and a shuffled ``DataLoader`` of
    (x, y): model(x) under no_grad, model.forward(x) with gradients (which still flow) and
    under inference_mode are recorded, the unmarked call is not; the JSON report holds
    the numbers of the same weights as a ``.keras`` file measured on TensorFlow (the SC
    bounds pinned: the default ones come from held-out inputs chosen by digest, and the
    two projects' inputs differ in layout)."""
    import shutil

    _, mlp = twins["mlp"]
    base = pytester.path
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:randomly")
    for kind in ("keras", "torch"):
        project = base / kind
        project.mkdir()
        monkeypatch.chdir(project)
        layout = (lambda a: a) if kind == "keras" else chw
        np.savez(project / "train.npz", x=layout(digits.x_train), y=digits.y_train)
        np.save(project / "inputs.npy", layout(digits.x_test[:60]))
        (project / "test_project.py").write_text(KERAS_TESTS if kind == "keras" else TORCH_TESTS)
        if kind == "keras":
            shutil.copy(dense_model_path, project / "model.keras")
            (project / "pytest.ini").write_text(f"[pytest]\nsadl_model = model.keras\nsadl_train = train.npz\n{BOUNDS}")
        else:
            np.savez(project / "weights.npz", **{k: v.numpy() for k, v in mlp.state_dict().items()})
            (project / "conftest.py").write_text(CONFTEST)
            (project / "pytest.ini").write_text(f"[pytest]\n{BOUNDS}")
        res = pytester.runpytest_inprocess(
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(project),
            "-c",
            str(project / "pytest.ini"),
            str(project),
            "--sadl-coverage",
            "--sadl-report=json:out.json",
            "--sadl-cache-dir=cache",
        )
        assert res.ret == 0, res.stdout.str()[-3000:]
    keras_report = json.loads((base / "keras" / "out.json").read_text())
    torch_report = json.loads((base / "torch" / "out.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t["inputs"] for t in torch_report["tests"] if t["inputs"]}
    assert tests == {"test_no_grad": 40, "test_grad_flows_through_forward": 10, "test_inference_mode": 10}
    warned = torch_report["outcome"]["warnings"]
    assert any("train() mode" in w and "call model.eval()" in w for w in warned)
    assert not any("cannot be read" in w or "model changed" in w for w in warned), warned  # the digest reads a module
    assert torch_report["model"]["source"] == "fixture" and torch_report["model"]["classifier"] is True
    assert torch_report["config"]["sa_layers"] == ["4"] and torch_report["config"]["coverage_layers"] == ["2", "4", "6"]
    k, t = keras_report["metrics"], torch_report["metrics"]
    for name in ("nc", "nbc", "snac"):
        assert t[name]["value"] == k[name]["value"], name
    assert abs(t["kmnc"]["value"] - k["kmnc"]["value"]) * k["kmnc"]["total"] / 100 <= 5
    for name in ("lsc", "dsc"):
        assert t[name]["count"] == k[name]["count"] == 60
        assert abs(t[name]["value"] - k[name]["value"]) <= 100 / keras_report["config"][name]["buckets"] + 1e-9, name


# ----------------------------------------------------------------------------- the paper's subjects

ROOT = Path(__file__).resolve().parent.parent


def _layers(kind: str) -> dict[str, Any]:
    chauffeur = _models.CHAUFFEUR_LAYERS
    return {} if kind != "chauffeur" else {"sa_layers": chauffeur["sa"], "coverage_layers": chauffeur["coverage"]}


@pytest.fixture(scope="module")
def subject_twins(kind_model_path: Any) -> Any:
    made: dict[str, tuple[Any, Any]] = {}

    def get(kind: str) -> tuple[Any, Any]:
        if kind not in made:
            keras_model = _models.load_model(kind_model_path(kind))
            made[kind] = (keras_model, _models.copy_into_twin(keras_model, _models.torch_kind(kind)))
        return made[kind]

    return get


@pytest.mark.parametrize("kind", _models.TWIN_KINDS)
def test_the_papers_subjects_have_twins_with_the_keras_layers_and_traces(subject_twins: Any, kind: str) -> None:
    """MNIST, CIFAR-10, Dave-2 (Keras' asymmetric "same" padding as a ZeroPad2d) and
    Chauffeur (frames, then LSTMs) in PyTorch with the Keras weights: the default layers
    one for one (the same count, order and widths) and the traces to 1e-5."""
    keras_model, twin = subject_twins(kind)
    ktm, ttm = trace_model(keras_model, **_layers(kind)), trace_model(twin, **_layers(kind))
    _, _, x = _models.kind_data(kind)
    a, b = ktm.traces(x), ttm.traces(_models.channels_first(x))
    assert ttm.coverage_sizes == ktm.coverage_sizes and ttm.sa_sizes == ktm.sa_sizes
    assert ttm.classifier is ktm.classifier is (kind not in _models.REGRESSORS)
    assert ttm.coverage_layers.index(ttm.sa_layers[0]) == ktm.coverage_layers.index(ktm.sa_layers[0])
    # Two frameworks' kernels sum each dot product in their own order (and per CPU: AVX2 or
    # AVX-512 paths): float32 results agree to a few ulps of their magnitude, not of 1e-5
    # (CIFAR's traces reach 22, where 1e-5 is 5 ulps): 1e-5 relative is ~84 ulps.
    np.testing.assert_allclose(b.sa, a.sa, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.output, a.output, rtol=1e-5, atol=1e-5)
    for u, v in zip(a.coverage, b.coverage, strict=True):
        np.testing.assert_allclose(v, u, rtol=1e-5, atol=1e-5)
    if ttm.classifier:
        np.testing.assert_array_equal(b.pred, a.pred)
    if kind == "chauffeur":  # its frame conv runs on (n * t) rows: no default, and no layer when named
        defaults = trace_model(twin)
        defaults.prepare(load_training_data(_models.channels_first(x[:4])))
        assert defaults.coverage_layers == ["lstm1", "rnn2", "lstm2", "steering"]
        with pytest.raises(SadlLayerError, match="'td_act' does not give one output row per input"):
            trace_model(twin, coverage_layers=["td_act"]).traces(_models.channels_first(x[:4]))


TWIN_CONFTEST = """
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, {root!r})
from tests import _models


@pytest.fixture(scope="session")
def sadl_model():
    model = _models.torch_kind({kind!r})
    with np.load("weights.npz") as w:
        model.load_state_dict({{k: torch.from_numpy(w[k]) for k in w.files}})
    return model.eval()


@pytest.fixture(scope="session")
def sadl_train():
    with np.load("train.npz") as d:
        data = TensorDataset(torch.from_numpy(d["x"]), torch.from_numpy(d["y"]))
    return DataLoader(data, batch_size=64, shuffle=True)
"""

TWIN_TESTS = """
import numpy as np
import pytest
import torch

X = torch.from_numpy(np.load("inputs.npy"))


@pytest.mark.sadl(group="held-out")
def test_no_grad(sadl_model):
    with torch.no_grad():
        assert len(sadl_model(X[:40])) == 40


@pytest.mark.sadl(group="dimmed")
def test_forward_with_gradients(sadl_model):
    dim = (X[40:60] * 0.6 + 0.3).requires_grad_()
    sadl_model.forward(dim).sum().backward()
    assert dim.grad is not None
"""


TWIN_KERAS_TESTS = """
import numpy as np
import pytest

X = np.load("inputs.npy")


@pytest.mark.sadl(group="held-out")
def test_predict(sadl_model):
    assert len(sadl_model.predict(X[:40], verbose=0)) == 40


@pytest.mark.sadl(group="dimmed")
def test_call_on_dimmed_inputs(sadl_model):
    assert sadl_model(X[40:60] * 0.6 + 0.3, training=False).shape[0] == 20
"""


#: a classifier and a regressor are run through the plugin on both sides (the other twins
#: on PyTorch only: their traces are compared with Keras' above)
COMPARED_END_TO_END = ("mnist", "dave2")


def _ini(kind: str, bounds: str = "") -> str:
    layers = ""
    if kind == "chauffeur":
        chauffeur = _models.CHAUFFEUR_LAYERS
        layers = (
            f"sadl_layers = {','.join(chauffeur['sa'])}\nsadl_coverage_layers = {','.join(chauffeur['coverage'])}\n"
        )
    return f"[pytest]\n{layers}{bounds}"


@pytest.mark.parametrize("kind", _models.TWIN_KINDS)
def test_the_papers_subjects_twins_end_to_end_give_the_keras_numbers(
    pytester: pytest.Pytester, subject_twins: Any, kind_model_path: Any, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each subject's twin from a fixture, trained on a shuffled ``DataLoader`` of
    ``(x, y)`` and recorded from ``model(x)`` and ``model.forward(x)`` with gradients,
    through the plugin: every metric that applies; for MNIST and Dave-2 against the
    ``.keras`` file on TensorFlow with the same inputs (channels last there): the same NC/NBC/SNAC, KMNC within a few sections, LSC/DSC within
    one bucket (the SC bounds of the Keras run pinned: the default ones come from held-out
    inputs chosen by digest, and the layouts differ); the torch HTML report shows the
    channels-first images as thumbnails."""
    import shutil

    keras_model, twin = subject_twins(kind)
    x_train, y_train, x_test = _models.kind_data(kind)
    x_test = x_test[:60]
    base = pytester.path
    reports: dict[str, Any] = {}
    for side in ("keras", "torch") if kind in COMPARED_END_TO_END else ("torch",):
        project = base / side
        project.mkdir()
        monkeypatch.chdir(project)
        layout = (lambda a: a) if side == "keras" else _models.channels_first
        np.savez(project / "train.npz", x=layout(x_train), y=y_train)
        np.save(project / "inputs.npy", layout(x_test))
        bounds = ""
        if side == "keras":
            shutil.copy(kind_model_path(kind), project / "model.keras")
            (project / "test_subject.py").write_text(TWIN_KERAS_TESTS)
            ini = _ini(kind) + "sadl_model = model.keras\nsadl_train = train.npz\n"
        else:
            np.savez(project / "weights.npz", **{k: v.numpy() for k, v in twin.state_dict().items()})
            (project / "conftest.py").write_text(TWIN_CONFTEST.format(root=str(ROOT), kind=kind))
            (project / "test_subject.py").write_text(TWIN_TESTS)
            config = reports["keras"]["config"] if reports else {"lsc": {"lower": None}, "dsc": {"lower": None}}
            bounds = "".join(
                f"sadl_{m}_lower = {config[m]['lower']!r}\nsadl_{m}_upper = {config[m]['upper']!r}\n"
                for m in ("lsc", "dsc")
                if config[m]["lower"] is not None
            )
            ini = _ini(kind, bounds)
        (project / "pytest.ini").write_text(ini)
        res = pytester.runpytest_inprocess(
            "-p", "no:cacheprovider", "--rootdir", str(project), "-c", str(project / "pytest.ini"), str(project),
            "--sadl-coverage", f"--sadl-report=json:{project / 'out.json'}", f"--sadl-report=html:{project / 'html'}",
            f"--sadl-cache-dir={project / 'cache'}",
        )  # fmt: skip
        assert res.ret == 0, res.stdout.str()[-3000:]
        reports[side] = json.loads((project / "out.json").read_text())
    t = reports["torch"]["metrics"]
    assert t["lsc"]["count"] == 60 and reports["torch"]["model"]["classifier"] is (kind not in _models.REGRESSORS)
    page = (base / "torch" / "html" / "index.html").read_text()
    if kind != "chauffeur":  # images (n, c, h, w) as thumbnails; Chauffeur's frames are no image
        assert page.count("data:image/png;base64,") >= 5
    for name in ("lsc", "dsc", "nc", "kmnc", "nbc", "snac"):
        value = t[name]["value"]
        if name == "dsc" and kind in _models.REGRESSORS:
            assert value is None
        else:
            assert value is not None and 0 <= value <= 100, (name, t[name])
    if kind not in COMPARED_END_TO_END:  # the traces are compared above; a Keras run costs CI time
        return
    k = reports["keras"]["metrics"]
    for name in ("nc", "nbc", "snac"):
        assert t[name]["value"] == k[name]["value"], (name, t[name], k[name])
    assert abs(t["kmnc"]["value"] - k["kmnc"]["value"]) * k["kmnc"]["total"] / 100 <= 5
    for name in ("lsc", "dsc"):
        if k[name]["value"] is None:
            assert t[name]["value"] is None and kind in _models.REGRESSORS
            continue
        buckets = reports["keras"]["config"][name]["buckets"]
        assert abs(t[name]["value"] - k[name]["value"]) <= 100 / buckets + 1e-9, name
    keras_page = (base / "keras" / "html" / "index.html").read_text()
    assert keras_page.count("data:image/png;base64,") == page.count("data:image/png;base64,")


def test_thumbnails_of_channels_first_images_are_those_of_the_same_images_channels_last() -> None:
    rng = np.random.default_rng(3)
    for shape in ((5, 16, 16, 3), (4, 12, 20, 1), (3, 40, 40, 4)):
        x = rng.random(shape, dtype=np.float32)
        want = thumbnails(x)
        got = thumbnails(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), channels_first=True)
        assert want is not None and got is not None
        np.testing.assert_array_equal(got, want)
    assert thumbnails(rng.random((2, 1, 8, 8), dtype=np.float32)) is None  # (n, 1, 8, 8) channels last: no image
    assert thumbnails(rng.random((2, 5, 8, 8), dtype=np.float32), channels_first=True) is None  # 5 channels
    pair = thumbnails(
        (rng.random((2, 8), dtype=np.float32), rng.random((2, 3, 8, 8), dtype=np.float32)), channels_first=True
    )
    assert pair is not None and pair.shape == (2, 8, 8, 3)


# ----------------------------------------------------------------------------- several positional inputs


class TwoInputs(nn.Module):
    """``forward(image, aux)``: a conv over the image, a Linear over the aux vector, joined."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.act = nn.ReLU()
        self.aux = nn.Linear(8, 4)
        self.hidden = nn.Linear(8, 6)
        self.head = nn.Linear(6, 3)

    def forward(self, image: Any, aux: Any) -> Any:
        h = self.act(self.conv(image)).mean(dim=(2, 3))
        return self.head(torch.relu(self.hidden(torch.cat([h, self.aux(aux)], dim=1))))


def _two_inputs(n: int = 50, seed: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    aux = rng.random((n, 8), dtype=np.float32)
    return rng.random((n, 1, 8, 8), dtype=np.float32), aux, aux[:, :3].argmax(axis=1).astype(np.int64)


def test_several_positional_inputs_are_named_by_forward_and_read_from_any_source() -> None:
    """``forward(image, aux)``: inputs named by its parameters; the training data as a
    list, a dict by name, a ``TensorDataset`` of ``(image, aux, y)`` made into
    ``((image, aux), y)`` items by a ``DataLoader``'s collate, all the same traces (those
    of the module run by hand) and the same fingerprint; a wrong structure is one line."""
    from torch.utils.data import DataLoader, Dataset

    torch.manual_seed(0)
    model = TwoInputs().eval()
    image, aux, y = _two_inputs()
    tm = trace_model(model, sa_layers=["hidden"], coverage_layers=["act", "aux", "head"])
    assert tm.input_names == ["image", "aux"]
    want = tm.traces([image, aux], batch_size=16)
    with torch.no_grad():
        h = model.act(model.conv(torch.from_numpy(image)))
        naive_act = h.mean(dim=(2, 3)).numpy()
        hidden = model.hidden(torch.cat([h.mean(dim=(2, 3)), model.aux(torch.from_numpy(aux))], dim=1)).numpy()
        out = model(torch.from_numpy(image), torch.from_numpy(aux)).numpy()
    np.testing.assert_allclose(want.coverage[0], naive_act, atol=1e-6)
    np.testing.assert_allclose(want.sa, hidden, atol=1e-6)
    np.testing.assert_allclose(want.output, out, atol=1e-6)
    assert tm.input_shapes == {"image": (1, 8, 8), "aux": (8,)}

    class Pairs(Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(y)

        def __getitem__(self, i: int) -> Any:
            return (torch.from_numpy(image[i]), torch.from_numpy(aux[i])), int(y[i])

    fingerprint = load_training_data([image, aux]).bind(tm.input_names).fingerprint()
    for source in ({"image": image, "aux": aux}, DataLoader(Pairs(), batch_size=7), Pairs()):
        data = load_training_data(source)
        np.testing.assert_allclose(tm.traces(data).sa, want.sa, atol=1e-6)
        assert data.bind(tm.input_names).fingerprint() == fingerprint
    np.testing.assert_array_equal(load_training_data(DataLoader(Pairs(), batch_size=9)).y, y)
    with pytest.raises(Exception, match="2 inputs"):
        tm.traces(image)
    with pytest.raises(Exception, match=r"missing \['image'\]"):
        tm.traces({"picture": image, "aux": aux})


TWO_INPUT_CONFTEST = """
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from model import TwoInputs


@pytest.fixture(scope="session")
def sadl_model():
    torch.manual_seed(0)
    model = TwoInputs()
    with np.load("train.npz") as d:
        image, aux, y = (torch.from_numpy(d[k]) for k in ("image", "aux", "y"))
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(60):  # a few steps, so that it predicts every class
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(image, aux), y).backward()
        opt.step()
    return model.eval()


class Pairs(Dataset):
    def __init__(self):
        with np.load("train.npz") as d:
            self.image, self.aux, self.y = d["image"], d["aux"], d["y"]

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return (torch.from_numpy(self.image[i]), torch.from_numpy(self.aux[i])), int(self.y[i])


@pytest.fixture(scope="session")
def sadl_train():
    return DataLoader(Pairs(), batch_size=32)
"""

TWO_INPUT_TORCH_TESTS = """
import numpy as np
import pytest
import torch

with np.load("inputs.npz") as d:
    IMAGE, AUX = torch.from_numpy(d["image"]), torch.from_numpy(d["aux"])


@pytest.mark.sadl
def test_two_positional_inputs(sadl_model):
    with torch.no_grad():
        assert sadl_model(IMAGE[:20], AUX[:20]).shape == (20, 3)


@pytest.mark.sadl
def test_forward_with_gradients(sadl_model):
    image = IMAGE[20:30].clone().requires_grad_()
    sadl_model.forward(image, AUX[20:30]).sum().backward()
    assert image.grad is not None


@pytest.mark.sadl
def test_a_keyword_input_runs_unrecorded(sadl_model):
    with torch.no_grad():
        assert sadl_model(IMAGE[:5], aux=AUX[:5]).shape == (5, 3)
"""


def test_a_module_with_two_positional_inputs_end_to_end(pytester: pytest.Pytester) -> None:
    """``model(image, aux)`` and ``model.forward(image, aux)`` recorded from the test's own
    pass (gradients still flow), a keyword call warned about and run as without the
    plugin; the profile from a ``DataLoader`` of ``((image, aux), y)``; thumbnails of the
    channels-first image input in the HTML report."""
    import inspect

    pytester.makepyfile(
        model="from typing import Any\n\nimport torch\nfrom torch import nn\n\n\n" + inspect.getsource(TwoInputs)
    )
    image, aux, y = _two_inputs(200)
    np.savez(pytester.path / "train.npz", image=image, aux=aux, y=y)
    test_image, test_aux, _ = _two_inputs(30, seed=5)
    np.savez(pytester.path / "inputs.npz", image=test_image, aux=test_aux)
    pytester.makeconftest(TWO_INPUT_CONFTEST)
    pytester.makepyfile(test_two=TWO_INPUT_TORCH_TESTS)
    pytester.makefile(".ini", pytest="[pytest]\nsadl_layers = hidden\n")
    pytester.syspathinsert()
    res = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--sadl-coverage", "--sadl-report=json:out.json", "--sadl-report=html:html"
    )
    assert res.ret == 0, res.stdout.str()[-3000:]
    report = json.loads((pytester.path / "out.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t["inputs"] for t in report["tests"]}
    assert tests == {
        "test_two_positional_inputs": 20,
        "test_forward_with_gradients": 10,
        "test_a_keyword_input_runs_unrecorded": 0,
    }
    assert any("keywords" in w and "unrecorded" in w for w in report["outcome"]["warnings"])
    assert report["metrics"]["lsc"]["count"] == 30 and report["metrics"]["nc"]["value"] > 0
    assert (pytester.path / "html" / "index.html").read_text().count("data:image/png;base64,") >= 5


def test_a_dask_worker_folds_a_torch_modules_shard_as_a_local_build_does(digits: Any) -> None:
    """A Dask worker's shard of a native torch module (``_trace_shard``, run here in process):
    the module is probed on the shard's first rows, its coverage traces folded into the
    ``RangeFit`` the driver merges, the ranges and SA traces those of one local pass."""
    from pytest_sadl.profile import distributed

    module = torch_conv()  # its random initial weights: both sides use the same module's
    x = _models.channels_first(digits.x_train[:300])
    local_traces, local_ranges = trace_model(torch_conv_copy := copy.deepcopy(module)).traces_and_ranges(x, 64)
    del torch_conv_copy
    key = ("in-process", None, tuple(local_traces.sa_layers), tuple(local_traces.coverage_layers), None, None)
    distributed._MODELS[key] = trace_model(module, list(key[2]), list(key[3]))  # as a worker's fresh model
    try:
        traces, fit = distributed._trace_shard(key, x, 64)
    finally:
        del distributed._MODELS[key]
    assert traces.coverage == [] and local_traces.coverage == []
    np.testing.assert_array_equal(traces.sa, local_traces.sa)
    ranges = fit.result()
    for a, b in zip(ranges.low + ranges.high, local_ranges.low + local_ranges.high, strict=True):
        np.testing.assert_array_equal(a, b)


def test_trace_model_picks_the_trace_model_and_the_keras_one_refuses_a_module(dense_model: Any) -> None:
    """``trace_model`` makes a TorchTraceModel for an ``nn.Module`` and a TraceModel for a Keras
    model, both a ``Tracer``; TraceModel itself given a module says which function to call."""
    from pytest_sadl.capture import TraceModel
    from pytest_sadl.errors import SadlModelError

    module, keras_tm = torch_mlp(), trace_model(dense_model)
    assert isinstance(trace_model(module), TorchTraceModel) and type(keras_tm) is TraceModel
    for tm in (trace_model(module), keras_tm):
        assert all(callable(getattr(tm, m)) for m in ("traces", "traces_and_ranges", "traces_folding", "prepare"))
        assert tm.records in ("keras", "forward") and isinstance(tm.channels_first, bool)
    with pytest.raises(SadlModelError, match=r"torch.nn.Module.*trace_model\(module"):
        TraceModel(module)
