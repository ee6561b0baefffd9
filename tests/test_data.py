"""Training data sources (pytest_sadl.capture.data): every form, the fingerprint, clear errors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_sadl.capture.data import TrainingData, check_batch, load_training_data
from pytest_sadl.errors import SadlConfigError, SadlDataError


@pytest.fixture()
def x() -> np.ndarray:
    return np.random.default_rng(0).random((37, 8, 8, 1), dtype=np.float32)


@pytest.fixture()
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, x: np.ndarray) -> Path:
    np.save(tmp_path / "arr.npy", x)
    (tmp_path / "sadl_data_mod.py").write_text(
        "import numpy as np\n"
        "from pathlib import Path\n"
        "_X = np.load(Path(__file__).with_name('arr.npy'))\n"
        "def arr():\n    return _X\n"
        "def pair():\n    return _X, np.arange(len(_X))\n"
        "def mapping():\n    return {'x': _X, 'y': np.arange(len(_X))}\n"
        "def boom():\n    raise RuntimeError('disk on fire')\n"
        "def triple():\n    return _X, _X, _X\n"
        "class ns:\n    @staticmethod\n    def nested():\n        return _X\n"
        "NOT_CALLABLE = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("sadl_data_mod", None)


def test_npz_forms(tmp_path: Path, x: np.ndarray) -> None:
    y = np.arange(len(x))
    np.savez(tmp_path / "a.npz", x=x, y=y)
    d = load_training_data(tmp_path / "a.npz")
    np.testing.assert_array_equal(d.x, x)
    np.testing.assert_array_equal(d.y, y)
    assert d.n == len(d) == 37 and d.file == tmp_path / "a.npz"
    np.savez(tmp_path / "b.npz", x_train=x, y_train=y)
    np.testing.assert_array_equal(load_training_data(tmp_path / "b.npz").y, y)
    np.savez(tmp_path / "c.npz", x)
    np.testing.assert_array_equal(load_training_data(str(tmp_path / "c.npz")).x, x)
    # no 'x': one array per input, keyed by input name; bind() picks the model's inputs
    np.savez(tmp_path / "d.npz", images=x, labels=y)
    d = load_training_data(tmp_path / "d.npz")
    np.testing.assert_array_equal(d.y, y)
    np.testing.assert_array_equal(d.bind(["image"]).x, x)  # the one array there is
    with pytest.raises(SadlDataError, match=r"holds arrays \['images'\] but the model's inputs are \['image', 'aux'\]"):
        d.bind(["image", "aux"])
    np.savez(tmp_path / "e.npz", image=x, aux=x[:, 0, :, 0], y=y)
    two = load_training_data(tmp_path / "e.npz").bind(["image", "aux"])
    assert list(two.x) == ["image", "aux"] and two.n == len(x)
    batches = list(two.batches(16))
    assert [len(b["aux"]) for b in batches] == [16, 16, 5]
    np.testing.assert_array_equal(batches[1]["image"], x[16:32])
    with pytest.raises(SadlDataError, match=r"one array but the model has 2 inputs.*image=\.\.\., aux=\.\.\."):
        load_training_data(x).bind(["image", "aux"])
    np.savez(tmp_path / "f.npz", a=x, b=x)
    with pytest.raises(SadlDataError, match=r"holds arrays \['a', 'b'\]; name the model's input 'image'"):
        load_training_data(tmp_path / "f.npz").bind(["image"])


def test_npy_is_memory_mapped_and_relative_paths(tmp_path: Path, x: np.ndarray) -> None:
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "x.npy", x)
    d = load_training_data("data/x.npy", base_dir=tmp_path)
    assert isinstance(d.x, np.memmap)
    np.testing.assert_array_equal(np.concatenate(list(d.batches(10))), x)
    assert [len(b) for b in d.batches(10)] == [10, 10, 10, 7]


def test_callables(module_dir: Path, x: np.ndarray) -> None:
    for spec in ("sadl_data_mod:arr", "sadl_data_mod:pair", "sadl_data_mod:mapping", "sadl_data_mod:ns.nested"):
        d = load_training_data(spec)
        np.testing.assert_array_equal(d.x, x)
        assert spec in d.source
    assert load_training_data("sadl_data_mod:pair").y is not None
    with pytest.raises(SadlDataError, match="raised RuntimeError: disk on fire"):
        load_training_data("sadl_data_mod:boom")
    with pytest.raises(SadlDataError, match="tuple of 3 items"):
        load_training_data("sadl_data_mod:triple")
    with pytest.raises(SadlDataError, match="not callable"):
        load_training_data("sadl_data_mod:NOT_CALLABLE")
    with pytest.raises(SadlDataError, match="has no attribute 'nope'"):
        load_training_data("sadl_data_mod:nope")
    with pytest.raises(SadlDataError, match="cannot import module 'no_such_mod_q'"):
        load_training_data("no_such_mod_q:f")


def test_arrays_and_tuples(x: np.ndarray) -> None:
    np.testing.assert_array_equal(load_training_data(x).x, x)
    np.testing.assert_array_equal(load_training_data((x, np.arange(37))).y, np.arange(37))
    np.testing.assert_array_equal(load_training_data(x.tolist()).x, x)
    d = TrainingData(source="mine", x=x)
    assert load_training_data(d) is d


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros((0, 8, 8, 1)), "empty"),
        (np.array([[1 + 2j]]), "dtype complex128, neither numbers nor strings"),  # strings are text inputs
        (np.array([[1, 2], [3]], dtype=object), "ragged .* pad the rows to one length"),
        ({"y": 1}, "needs an 'x' key"),
        (object(), "holds objects, neither numbers nor strings"),
        (np.float32(3.0), "a scalar"),
    ],
)
def test_bad_values(bad: Any, match: str) -> None:
    with pytest.raises(SadlDataError, match=match):
        load_training_data(bad)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(SadlDataError, match="does not exist"):
        load_training_data(tmp_path / "nope.npz")
    with pytest.raises(SadlDataError, match="does not exist"):
        load_training_data("data/train.npz", base_dir=tmp_path)
    (tmp_path / "t.csv").write_text("1,2\n")
    with pytest.raises(SadlDataError, match="unknown format '.csv'.*np.savez"):
        load_training_data(tmp_path / "t.csv")
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(SadlDataError, match="not a readable .npz"):
        load_training_data(tmp_path / "broken.npz")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(SadlDataError, match="allow_pickle=False"):
        load_training_data(tmp_path / "obj.npy")
    np.savez(tmp_path / "obj.npz", x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(SadlDataError, match="allow_pickle=False"):
        load_training_data(tmp_path / "obj.npz")
    with pytest.raises(SadlDataError, match="is a directory"):
        load_training_data(tmp_path)
    assert issubclass(SadlDataError, SadlConfigError) and issubclass(SadlConfigError, ValueError)


def test_check_batch() -> None:
    x = np.ones((4, 3), np.float32)
    check_batch(x, (3,))
    check_batch(x, (None,))
    with pytest.raises(SadlDataError, match=r"shape \(3,\) but the model expects \(5,\)"):
        check_batch(x, (5,), what="mine")
    x[2, 1] = np.nan
    with pytest.raises(SadlDataError, match="mine: input 102 contains NaN"):
        check_batch(x, (3,), what="mine", offset=100)


def test_fingerprint(tmp_path: Path, x: np.ndarray) -> None:
    fp = load_training_data(x).fingerprint()
    assert len(fp) == 64 and int(fp, 16) >= 0
    assert load_training_data(x.copy()).fingerprint() == fp
    changed = x.copy()
    changed[36, 7, 7, 0] += 1e-3  # one value of one input
    assert load_training_data(changed).fingerprint() != fp
    assert load_training_data(x[:-1]).fingerprint() != fp
    assert load_training_data(x.astype(np.float64)).fingerprint() != fp
    # labels do not change the profile, so not the fingerprint
    assert load_training_data((x, np.arange(37))).fingerprint() == fp
    np.savez(tmp_path / "a.npz", x=x)
    np.savez(tmp_path / "b.npz", x=x)
    fa, fb = load_training_data(tmp_path / "a.npz").fingerprint(), load_training_data(tmp_path / "b.npz").fingerprint()
    assert fa == fb
    np.savez(tmp_path / "b.npz", x=changed)
    assert load_training_data(tmp_path / "b.npz").fingerprint() != fa


def test_non_contiguous_array_fingerprint_matches_copy(x: np.ndarray) -> None:
    big = np.concatenate([x, x], axis=3)[..., :1]
    assert not big.flags.c_contiguous
    assert load_training_data(big).fingerprint() == load_training_data(np.ascontiguousarray(big)).fingerprint()


@pytest.mark.tf
def test_dataset_source(x: np.ndarray) -> None:
    tf = pytest.importorskip("tensorflow")
    ds = tf.data.Dataset.from_tensor_slices((x, np.arange(37))).batch(10)
    d = load_training_data(ds)
    assert d.n is None and d.dataset is ds
    np.testing.assert_array_equal(np.concatenate(list(d.batches(999))), x)
    single = load_training_data(tf.data.Dataset.from_tensor_slices(x))
    assert [len(b) for b in single.batches(16)] == [16, 16, 5]
    assert d.fingerprint() == single.fingerprint()  # same inputs, however batched
    # a multiset: the same inputs in another order (a shuffled dataset, an array) give the same
    # fingerprint; one changed value or one duplicate more does not
    assert load_training_data(tf.data.Dataset.from_tensor_slices(x[::-1])).fingerprint() == d.fingerprint()
    shuffled = tf.data.Dataset.from_tensor_slices(x).shuffle(37, seed=None, reshuffle_each_iteration=True).batch(7)
    assert load_training_data(shuffled).fingerprint() == d.fingerprint() == load_training_data(x).fingerprint()
    changed = x.copy()
    changed[3].flat[0] += 1e-3
    assert load_training_data(tf.data.Dataset.from_tensor_slices(changed)).fingerprint() != d.fingerprint()
    assert load_training_data(np.concatenate([x, x[:1]])).fingerprint() != d.fingerprint()


def test_several_inputs_by_name_or_in_order(x: np.ndarray) -> None:
    aux = x[:, 0, :, 0].copy()
    by_name = load_training_data({"aux": aux, "image": x, "y": np.arange(len(x))})
    in_order = load_training_data([x, aux])
    with_labels = load_training_data(([x, aux], np.arange(len(x))))
    for data in (by_name, in_order, with_labels):
        bound = data.bind(["image", "aux"])
        assert list(bound.x) == ["image", "aux"]
        np.testing.assert_array_equal(bound.x["aux"], aux)
        np.testing.assert_array_equal(bound.x["image"], x)
    np.testing.assert_array_equal(by_name.y, np.arange(len(x)))
    np.testing.assert_array_equal(with_labels.y, np.arange(len(x)))
    # a list of rows for a one-input model is stacked
    np.testing.assert_array_equal(load_training_data(list(x)).bind(["image"]).x, x)
    # the fingerprint follows the inputs (and their names), not the labels
    fp = by_name.bind(["image", "aux"]).fingerprint()
    assert load_training_data({"image": x, "aux": aux}).bind(["image", "aux"]).fingerprint() == fp
    assert load_training_data({"image": x, "aux": aux + 1}).bind(["image", "aux"]).fingerprint() != fp
    assert load_training_data({"image": x, "other": aux}).bind(["image", "other"]).fingerprint() != fp
    with pytest.raises(SadlDataError, match="list of 3 arrays but the model has 2 inputs"):
        load_training_data([x, aux, aux]).bind(["image", "aux"])
    with pytest.raises(SadlDataError, match="different numbers of rows"):
        load_training_data({"image": x, "aux": aux[:5]}).bind(["image", "aux"])
    # several inputs: a row is the inputs' rows together, so reordering the rows of every
    # input alike keeps the fingerprint, and moving one input's rows alone does not
    order = np.random.default_rng(0).permutation(len(x))
    assert load_training_data({"image": x[order], "aux": aux[order]}).bind(["image", "aux"]).fingerprint() == fp
    assert load_training_data({"image": x, "aux": aux[order]}).bind(["image", "aux"]).fingerprint() != fp
