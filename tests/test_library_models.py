"""Models from libraries (docs/library-models.md): timm and torchvision blocks, Hugging Face
transformers, keras-hub tasks; each built from a tiny config (no weights are downloaded)
and measured as its users call it. A library that is not installed (or does not import:
PyPI's torchvision beside a CPU build of torch) skips its tests, naming it.

torch is imported at module level, as in ``tests/test_torch.py``: an in-process pytester
run that imported it first would drop it from ``sys.modules`` afterwards.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from pytest_sadl.capture.data import load_training_data  # noqa: E402
from pytest_sadl.capture.torch import TorchTraceModel  # noqa: E402

# Imported here when they import: an in-process pytester run that imported one first would
# drop it from sys.modules afterwards, and a second import of it is not the same library.
# transformers loads each model's module on first use: the ones used here, loaded now.
HF_CLASSES = (
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "ViTForImageClassification",
    "GPT2ForSequenceClassification",
)
for _name in ("transformers", "timm", "torchvision.models", "datasets"):
    try:
        _module = importlib.import_module(_name)
        if _name == "transformers":
            [getattr(_module, c) for c in HF_CLASSES]
    except Exception:  # noqa: S112 - a missing or broken library: its tests skip, saying why
        continue


def library(name: str) -> Any:
    """The library ``name``, or the test skipped saying why it cannot be imported."""
    try:
        return importlib.import_module(name)
    except Exception as exc:  # an ImportError, or a broken install (torchvision's operators)
        pytest.skip(f"{name} is not importable ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")


def probed(model: Any, x: Any) -> TorchTraceModel:
    tm = TorchTraceModel(model.eval())
    tm.prepare(load_training_data(x, what="inputs"))
    return tm


def measured_twice(tm: TorchTraceModel) -> list[tuple[str, str]]:
    """Pairs of coverage layers where the second only re-maps the first's neurons one by
    one (an activation or batch norm after it, directly or inside a fused container)."""
    cov = set(tm.coverage_layers)
    pairs = []
    for p in tm.coverage_layers:
        s = tm._seen[p]
        if s.after in cov and tm._per_neuron(p):
            pairs.append((s.after, p))
    for s in tm._seen.values():
        if s.fused in cov and s.after in cov:
            pairs.append((s.after, s.fused))
    return pairs


# ----------------------------------------------------------------------------- each neuron once


class GeluActivation(nn.Module):
    """As Hugging Face's ``GELUActivation``: a parameter-free module of no torch class."""

    def forward(self, x: Any) -> Any:
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class Normalise(nn.Module):
    """Parameter-free but not element-wise (each row scaled by its own norm)."""

    def forward(self, x: Any) -> Any:
        return x / (x.norm(dim=-1, keepdim=True) + 1.0)


class BatchNormAct(nn.BatchNorm2d):
    """As timm's ``BatchNormAct2d``: the batch norm computed in ``forward``, then its own
    dropout and activation modules."""

    def __init__(self, channels: int) -> None:
        super().__init__(channels)
        self.drop = nn.Identity()
        self.act = nn.SiLU(inplace=True)

    def forward(self, x: Any) -> Any:
        x = nn.functional.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, 1e-5)
        return self.act(self.drop(x))


def test_a_library_activation_and_a_fused_norm_activation_are_measured_after_the_module_before_them() -> None:
    """An element-wise module of no known class (found by shuffling its input) and a
    container computing per-neuron maps only (a batch norm with its activation inside)
    make the module before them one layer with them; a parameter-free module that is not
    element-wise (a row norm) does not."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3),
        BatchNormAct(4),
        nn.Flatten(),
        nn.Linear(4 * 6 * 6, 8),
        GeluActivation(),
        nn.Linear(8, 8),
        Normalise(),
        nn.Linear(8, 3),
    )
    tm = probed(model, np.random.default_rng(0).standard_normal((10, 1, 8, 8)).astype(np.float32))
    assert tm.coverage_layers == ["1.act", "4", "5", "6", "7"]
    assert tm.sa_layers == ["6"]
    assert measured_twice(tm) == []
    # the fused layer's trace is the activation's output, averaged per channel
    x = np.random.default_rng(1).standard_normal((5, 1, 8, 8)).astype(np.float32)
    with torch.no_grad():
        expected = model[1](model[0](torch.from_numpy(x))).mean(dim=(2, 3)).numpy()
    np.testing.assert_allclose(tm.traces(x).coverage[0], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "name",
    ["efficientnet_b0", "resnet18", "mobilenetv3_small_050", "vit_tiny_patch16_224"],
)
def test_timm_models_measure_each_neuron_once(name: str) -> None:
    """timm's ``BatchNormAct2d`` (conv, batch norm and activation: one layer), its
    activation layers and a ViT's MLP (``fc1`` and its GELU); the defaults have no pair
    measured twice."""
    timm = library("timm")
    torch.manual_seed(0)
    kwargs = {"img_size": 32, "patch_size": 8} if name.startswith("vit") else {}
    model = timm.create_model(name, pretrained=False, num_classes=4, **kwargs)
    tm = probed(model, np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32))
    assert measured_twice(tm) == []
    assert not any(tm._seen[p].fused for p in tm.coverage_layers)


def test_torchvision_conv_norm_activation_blocks_are_one_layer() -> None:
    """torchvision's ``Conv2dNormActivation`` (Conv2d, BatchNorm2d, Hardswish) in
    ``mobilenet_v3_small``: measured once, after the activation."""
    models = library("torchvision.models")
    torch.manual_seed(0)
    model = models.mobilenet_v3_small(weights=None, num_classes=4)
    tm = probed(model, np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32))
    assert measured_twice(tm) == []
    assert "features.0.2" in tm.coverage_layers and "features.0.0" not in tm.coverage_layers


# timm and torchvision image classifiers through the plugin: the model built from its config
# (no weights), trained for seconds on generated images of two classes, and enough training
# images that each class has more traces than the default SA layer has neurons (LSA's KDE
# needs that: 1280 on efficientnet_b0's pooled features), so every metric is reported.
VISION = {
    # name: (builder, image size, training images)
    "resnet18": ("timm.create_model('resnet18', pretrained=False, num_classes=2)", 16, 1200),
    "efficientnet_b0": ("timm.create_model('efficientnet_b0', pretrained=False, num_classes=2)", 16, 3000),
    "vit_tiny": (
        "timm.create_model('vit_tiny_patch16_224', pretrained=False, num_classes=2, img_size=16, patch_size=4)",
        16,
        600,
    ),
    "mobilenet_v3_small": ("torchvision.models.mobilenet_v3_small(weights=None, num_classes=2)", 16, 2400),
}

VISION_CONFTEST = """
import numpy as np
import pytest
import timm
import torch
import torchvision


def images(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.standard_normal((n, 3, {px}, {px})).astype(np.float32) * 0.5
    x[np.arange(n), y] += 1.0  # the class is the brighter channel
    return x, y


@pytest.fixture(scope="session")
def sadl_model():
    torch.manual_seed(0)
    model = {build}
    x, y = images(256, 100)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    model.train()
    for step in range(8):  # seconds of training
        i = slice(32 * step, 32 * step + 32)
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x[i])), torch.from_numpy(y[i]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    # the batch norms' running statistics re-estimated on those batches (after 8 steps at the
    # default momentum they are far from the data's: in eval mode the pooled features of
    # efficientnet_b0 and mobilenet_v3_small then hardly vary, variance ~1e-10)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
    with torch.no_grad():
        for step in range(8):
            model(torch.from_numpy(x[32 * step : 32 * step + 32]))
    return model.eval()


@pytest.fixture(scope="session")
def sadl_train():
    return images({n}, 0)
"""

VISION_TESTS = """
import pytest
import torch

from conftest import images


@pytest.mark.sadl
def test_call(sadl_model):
    with torch.no_grad():
        out = sadl_model(torch.from_numpy(images(24, 1)[0]))
    assert out.shape == (24, 2)


@pytest.mark.sadl
def test_batches(sadl_model):
    x = torch.from_numpy(images(16, 2)[0])
    with torch.no_grad():
        for batch in x.split(8):
            assert sadl_model(batch).shape == (8, 2)
"""


@pytest.mark.parametrize("name", list(VISION))
def test_timm_and_torchvision_classifiers_report_every_metric_on_the_defaults(
    pytester: pytest.Pytester, name: str
) -> None:
    """timm's ``resnet18``, ``efficientnet_b0``, a ViT and torchvision's ``mobilenet_v3_small``,
    called as their users call them (``model(x)``, a loop over batches) under
    ``pytest --sadl-coverage`` on the defaults: each input recorded, no warning, every metric
    of the report computed (no layer measured twice: the tests above, on the same models)."""
    library("timm")
    library("torchvision.models")
    build, px, n = VISION[name]
    pytester.makeconftest(VISION_CONFTEST.format(build=build, px=px, n=n))
    pytester.makepyfile(test_vision=VISION_TESTS)
    pytester.syspathinsert()
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--sadl-coverage", "--sadl-report=json:out.json")
    assert res.ret == 0, res.stdout.str()[-3000:]
    report = json.loads((pytester.path / "out.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t["inputs"] for t in report["tests"]}
    assert tests == {"test_call": 24, "test_batches": 16}
    # nothing ran unrecorded; the advice about the data stays (MDSA's singular covariance of
    # ReLU features at 16 px, a class too rare for LSA's KDE, outlying held-out LSA bounds)
    assert not [w for w in report["outcome"]["warnings"] if "unrecorded" in w], report["outcome"]["warnings"]
    missing = {m: v.get("reason") for m, v in report["metrics"].items() if v["value"] is None}
    assert not missing, missing
    assert {"nc", "kmnc", "nbc", "snac", "lsc", "dsc"} <= set(report["metrics"])


# ----------------------------------------------------------------------------- Hugging Face transformers

HF_CONFTEST = """
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from transformers import BertConfig, BertForSequenceClassification, ViTConfig, ViTForImageClassification


def tokens(n, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 60, (n, 10))
    mask = np.ones_like(ids)
    mask[: n // 3, 7:] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


@pytest.fixture(scope="session")
def sadl_model():
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=16, num_labels=3,
    )
    return BertForSequenceClassification(config).eval()


@pytest.fixture(scope="session")
def sadl_train():
    batch = tokens(240, 0)
    rows = [{k: torch.from_numpy(v[i]) for k, v in batch.items()} for i in range(240)]
    return DataLoader(rows, batch_size=64)  # a DataLoader of dicts, as a tokenised dataset gives
"""

HF_TESTS = """
import numpy as np
import pytest
import torch

from conftest import tokens


@pytest.mark.sadl
def test_keywords(sadl_model):
    batch = {k: torch.from_numpy(v) for k, v in tokens(20, 1).items()}
    with torch.no_grad():
        out = sadl_model(**batch)
    assert out.logits.shape == (20, 3)


@pytest.mark.sadl
def test_named_arguments_shorter_sequences(sadl_model):
    batch = {k: torch.from_numpy(v[:, :6]) for k, v in tokens(12, 2).items()}
    with torch.no_grad():
        out = sadl_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         token_type_ids=batch["token_type_ids"])
    assert out.logits.argmax(-1).shape == (12,)


@pytest.mark.sadl
def test_with_labels(sadl_model):
    batch = {k: torch.from_numpy(v) for k, v in tokens(8, 3).items()}
    out = sadl_model(**batch, labels=torch.zeros(8, dtype=torch.long))
    out.loss.backward()
"""


def test_a_hugging_face_text_classifier_called_with_keywords_end_to_end(pytester: pytest.Pytester) -> None:
    """``model(**batch)``, ``model(input_ids=..., attention_mask=..., token_type_ids=...)``
    on shorter sequences and ``model(**batch, labels=...)`` with gradients, all recorded;
    the training data a DataLoader of dicts; SA on the pooler (what the head reads)."""
    library("transformers")
    report = _run_hf_tests(pytester, HF_CONFTEST)
    assert report["metrics"]["nc"]["value"] > 0


def _run_hf_tests(pytester: pytest.Pytester, conftest: str) -> dict:
    """HF_TESTS run with ``conftest`` under the plugin: every keyword call recorded (the
    inputs of each test, no unrecorded call warned), every metric with a value; the JSON report."""
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_hf=HF_TESTS)
    pytester.syspathinsert()
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--sadl-coverage", "--sadl-report=json:out.json")
    assert res.ret == 0, res.stdout.str()[-3000:]
    report = json.loads((pytester.path / "out.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t["inputs"] for t in report["tests"]}
    assert tests == {"test_keywords": 20, "test_named_arguments_shorter_sequences": 12, "test_with_labels": 8}
    assert not [w for w in report["outcome"]["warnings"] if "unrecorded" in w]
    assert all(m["value"] is not None for m in report["metrics"].values()), report["metrics"]
    return report


HF_DATASETS_TRAIN = """
@pytest.fixture(scope="session")
def sadl_train():
    import datasets

    batch = tokens(240, 0)
    texts = [" ".join(map(str, row)) for row in batch["input_ids"]]
    labels = (batch["input_ids"][:, 0] > 30).astype(np.int64)
    # a tokenised dataset as users keep one: its text, its label and the tokenizer's columns
    return datasets.Dataset.from_dict({"text": texts, "label": labels, **{k: v.tolist() for k, v in batch.items()}})
"""


def test_a_datasets_dataset_as_training_data_for_a_hugging_face_classifier(pytester: pytest.Pytester) -> None:
    """A ``datasets.Dataset`` of a tokenizer's columns (with its text and label columns) is the
    training data of a BERT classifier: its numeric columns are the model's inputs by name,
    ``label`` its labels, the text left out; every keyword call recorded, every metric
    reported."""
    library("transformers")
    datasets = library("datasets")
    conftest = HF_CONFTEST[: HF_CONFTEST.index('@pytest.fixture(scope="session")\ndef sadl_train')] + HF_DATASETS_TRAIN
    _run_hf_tests(pytester, conftest)
    # the columns as load_training_data reads them: the text left out, label as labels
    ds = datasets.Dataset.from_dict({"text": ["a", "b"], "input_ids": [[1, 2], [3, 4]], "label": [0, 1]})
    data = load_training_data(ds, what="training data")
    assert sorted(data.x) == ["input_ids"] and data.y.tolist() == [0, 1]
    from pytest_sadl.errors import SadlDataError

    ragged = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5]]})
    with pytest.raises(SadlDataError, match="'input_ids'.*different lengths; pad them"):
        load_training_data(ragged, what="training data")


def test_hugging_face_heads_read_their_token_and_sequences_respect_the_mask() -> None:
    """A ViT's SA layer is the CLS token of its last norm (what the classifier reads); a
    decoder's sequence classifier's, the last token the attention mask keeps; a masked
    sequence averages only its kept tokens; per-token heads are refused in one line."""
    transformers = library("transformers")
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    vit = transformers.ViTForImageClassification(
        transformers.ViTConfig(
            image_size=16,
            patch_size=4,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            num_labels=4,
        )
    ).eval()
    px = rng.standard_normal((6, 3, 16, 16)).astype(np.float32)
    tm = TorchTraceModel(vit)
    traces = tm.traces({"pixel_values": px})
    assert tm.sa_layers == ["vit.layernorm"] and tm.input_names == ["pixel_values"]
    with torch.no_grad():
        cls = vit.vit(torch.from_numpy(px)).last_hidden_state[:, 0].numpy()
    np.testing.assert_allclose(traces.sa, cls, rtol=1e-5, atol=1e-5)
    assert "vit.encoder.layer.0.intermediate.dense" not in tm.coverage_layers  # measured after its GELU

    gpt = transformers.GPT2ForSequenceClassification(
        transformers.GPT2Config(
            vocab_size=40,
            n_embd=16,
            n_layer=1,
            n_head=2,
            n_positions=16,
            num_labels=3,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=1,
        )
    ).eval()
    ids = rng.integers(2, 40, (6, 8))
    mask = np.ones_like(ids)
    mask[:3, 5:] = 0
    ids[mask == 0] = 0
    tm = TorchTraceModel(gpt)
    traces = tm.traces({"input_ids": ids, "attention_mask": mask})
    assert tm.sa_layers == ["transformer.ln_f"]
    with torch.no_grad():
        hidden = gpt.transformer(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    last = mask.sum(1) - 1
    np.testing.assert_allclose(traces.sa, hidden.numpy()[np.arange(6), last], rtol=1e-5, atol=1e-5)
    # a coverage layer's sequence averaged over the kept tokens only
    i = tm.coverage_layers.index("transformer.ln_f")
    expected = np.stack([hidden.numpy()[r, : last[r] + 1].mean(0) for r in range(6)])
    np.testing.assert_allclose(traces.coverage[i], expected, rtol=1e-5, atol=1e-5)

    from pytest_sadl.errors import SadlModelError

    tokens = transformers.BertForTokenClassification(
        transformers.BertConfig(
            vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
        )
    )
    with pytest.raises(SadlModelError, match="token classification head.*library-models"):
        TorchTraceModel(tokens)


# ----------------------------------------------------------------------------- wide and flat layers


def test_dsa_on_traces_that_do_not_vary_is_not_available_and_lsa_names_the_projection() -> None:
    """DSA is refused on traces no neuron of which varies in any class (LSA's check), so DSC is not
    available instead of computed from rounding noise; traces that vary are scored as
    before; LSA refused on a layer wider than a class has traces names
    ``--sadl-sa-components``."""
    from pytest_sadl.criteria.metrics import dsc
    from pytest_sadl.criteria.shape import Training
    from pytest_sadl.criteria.surprise import LSA

    rng = np.random.default_rng(0)
    pred = np.repeat([0, 1], 30)
    flat = np.ones((60, 8), np.float32) + rng.standard_normal((60, 8)).astype(np.float32) * 1e-6
    with pytest.raises(
        ValueError, match="DSA: every one of the 8 neurons has a training variance below.*in every class"
    ):
        dsc.fit(Training(traces=flat, pred=pred))
    varied = rng.standard_normal((60, 8)).astype(np.float32)
    scorer = dsc.fit(Training(traces=varied, pred=pred))
    assert scorer is not None and np.isfinite(scorer(varied[:5], pred[:5])).all()
    wide = rng.standard_normal((60, 40)).astype(np.float32)
    with pytest.raises(ValueError, match=r"--sadl-sa-components=N, N below 40"):
        LSA(wide, pred)


# ----------------------------------------------------------------------------- keras-hub tasks

KERAS_HUB_CONFTEST = """
import numpy as np
import pytest
import keras
import keras_hub

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(20)]


def texts(n, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 20, (n, 5))
    return [" ".join(f"w{k}" for k in row) for row in ids], (ids.min(axis=1) < 3).astype("int32")


@pytest.fixture(scope="session")
def sadl_model(tmp_path_factory):
    keras.utils.set_random_seed(0)
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("\\n".join(VOCAB))
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=str(vocab))
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=8)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCAB), num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
        max_sequence_length=8,
    )
    return keras_hub.models.BertTextClassifier(backbone, num_classes=2, preprocessor=preprocessor)


@pytest.fixture(scope="session")
def sadl_train():
    return texts(120, 0)  # raw strings and labels: the task's preprocessor makes the backbone's inputs
"""

KERAS_HUB_TESTS = """
import numpy as np
import pytest

from conftest import texts


@pytest.mark.sadl
def test_a_list_of_str(sadl_model):
    assert sadl_model.predict(texts(20, 1)[0], verbose=0).shape == (20, 2)


@pytest.mark.sadl
def test_a_list_of_numpy_str(sadl_model):
    assert sadl_model.predict([np.str_(t) for t in texts(12, 2)[0]], verbose=0).shape == (12, 2)


@pytest.mark.sadl
def test_an_array_of_bytes(sadl_model):
    x = np.array([t.encode() for t in texts(8, 3)[0]])
    assert sadl_model.predict(x, verbose=0).shape == (8, 2)
"""


def test_a_keras_hub_text_classifier_fed_raw_strings_through_its_preprocessor(pytester: pytest.Pytester) -> None:
    """A ``BertTextClassifier`` with its preprocessor, as keras-hub's guides call it:
    ``predict`` on a list of ``str``, a list of ``np.str_``, an array of bytes, each input
    recorded; training data as raw strings, run through the task's preprocessor; the SA
    layer the backbone's pooled output. Run in a subprocess (TensorFlow beside torch)."""
    for name in ("keras_hub", "tensorflow_text"):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed (pip install --no-deps keras-hub tensorflow-text)")
    pytester.makeconftest(KERAS_HUB_CONFTEST)
    pytester.makepyfile(test_kh=KERAS_HUB_TESTS)
    res = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "--sadl-coverage", "--sadl-report=json:out.json", timeout=300
    )
    assert res.ret == 0, res.stdout.str()[-3000:]
    report = json.loads((pytester.path / "out.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t["inputs"] for t in report["tests"]}
    assert tests == {"test_a_list_of_str": 20, "test_a_list_of_numpy_str": 12, "test_an_array_of_bytes": 8}
    assert not report["outcome"]["warnings"], report["outcome"]["warnings"]
    metrics = report["metrics"]
    assert all(metrics[m]["value"] is not None for m in ("nc", "kmnc", "nbc", "snac")), metrics
    # the pooled output of a tiny untrained BERT barely varies (variance ~1e-9): SA says so
    assert "pooled_dense" in metrics["lsc"]["reason"] and "do not vary" in metrics["lsc"]["reason"]


KERAS_HUB_IMAGE_CONFTEST = """import keras
import keras_hub
import numpy as np
import pytest
def images(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = (rng.random((n, 16, 16, 3)) * 127 + y[:, None, None, None] * 128).astype("float32")
    return x, y.astype("int32")  # pixels 0-255, as files hold them: the image converter scales them
@pytest.fixture(scope="session")
def sadl_model():
    keras.utils.set_random_seed(0)
    bb = keras_hub.models.ResNetBackbone(input_conv_filters=[64], input_conv_kernel_sizes=[3], stackwise_num_filters=[64, 16], stackwise_num_blocks=[1, 1], stackwise_num_strides=[1, 2], use_pre_activation=False, block_type="basic_block", image_shape=(16, 16, 3))
    pre = keras_hub.models.ResNetImageClassifierPreprocessor(keras_hub.layers.ResNetImageConverter(image_size=(16, 16), scale=1 / 255))
    m = keras_hub.models.ResNetImageClassifier(bb, num_classes=2, preprocessor=pre)
    x, y = images(120, 0)
    m.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    m.fit(x, y, epochs=4, batch_size=32, verbose=0)
    return m
@pytest.fixture(scope="session")
def sadl_train():
    return images(120, 0)
"""

KERAS_HUB_IMAGE_TESTS = """import numpy as np
import pytest
from conftest import images
@pytest.mark.sadl
def test_predict(sadl_model):
    assert sadl_model.predict(images(20, 1)[0], verbose=0).shape == (20, 2)
@pytest.mark.sadl
def test_call(sadl_model):
    x = sadl_model.preprocessor(images(10, 2)[0])  # a task's call takes what its preprocessor makes
    assert np.asarray(sadl_model(x)).shape == (10, 2)
def test_training_images_are_traced_through_the_preprocessor(sadl_model):
    from pytest_sadl.capture import TraceModel
    x = images(12, 5)[0]
    traced = TraceModel(sadl_model).traces(x).output  # as the profile traces the training images
    np.testing.assert_allclose(traced, sadl_model.predict(x, verbose=0), rtol=1e-4, atol=1e-4)
    assert not np.allclose(traced, np.asarray(sadl_model(x)), atol=1e-2)  # the raw pixels give other logits
"""


def test_a_keras_hub_image_classifier_with_its_preprocessor(pytester: pytest.Pytester) -> None:
    """A tiny ``ResNetImageClassifier`` with its preprocessor (an image converter scaling
    0-255 pixels by 1/255), trained for seconds: ``predict(images)`` and
    ``model(preprocessor(images))`` recorded, the training images traced through the
    preprocessor as ``predict`` applies it, every metric reported on the defaults (SA on the
    backbone's pooler)."""
    for name in ("keras_hub", "tensorflow_text"):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed (pip install --no-deps keras-hub tensorflow-text)")
    pytester.makeconftest(KERAS_HUB_IMAGE_CONFTEST)
    pytester.makepyfile(test_img=KERAS_HUB_IMAGE_TESTS)
    res = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "--sadl-coverage", "--sadl-report=json:out.json", timeout=300
    )
    assert res.ret == 0, res.stdout.str()[-3000:]
    report = json.loads((pytester.path / "out.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t["inputs"] for t in report["tests"]}
    assert tests == {"test_predict": 20, "test_call": 10}
    missing = {m: v.get("reason") for m, v in report["metrics"].items() if v["value"] is None}
    assert not missing, missing
