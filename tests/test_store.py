"""The profile store on plain arrays (no TensorFlow): random corruptions of a valid
profile (Hypothesis) never crash, never hang and never load other numbers."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_sadl.criteria.neurons import fit_ranges
from pytest_sadl.criteria.surprise import DSA, LSA
from pytest_sadl.fingerprint import canonical_order, row_digests, row_keys
from pytest_sadl.profile.build import ProfileOptions, TrainingProfile
from pytest_sadl.profile.files import load_profile, save_profile
from pytest_sadl.store import entry as store
from pytest_sadl.store.entry import Invalid


def synthetic_profile() -> TrainingProfile:
    """A small but complete classifier profile made of random traces."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(120, 6)).astype(np.float32)
    pred = rng.integers(0, 3, size=120)
    rows = row_digests(x)
    order = canonical_order(rows)
    x, pred = x[order], pred[order]
    cov = [rng.normal(size=(120, 4)), rng.normal(size=(120, 5))]
    return TrainingProfile(
        fingerprint="f" * 64,
        options=ProfileOptions(sa_layers=("a",), coverage_layers=("c1", "c2"), classifier=True),
        model_fingerprint="m" * 64,
        data_fingerprint="d" * 64,
        model_name="synthetic",
        classifier=True,
        n_train=120,
        n_outputs=3,
        input_shape=(None, 6),
        sa_layers=["a"],
        coverage_layers=["c1", "c2"],
        sa_sizes=[6],
        coverage_sizes=[4, 5],
        sa_traces=x,
        sa_pred=pred,
        ranges=fit_ranges(cov, names=["c1", "c2"]),
        row_keys=row_keys(rows[order]),
        lsa_arrays=LSA(x, pred).to_arrays(),
        dsa_arrays=DSA(x, pred).to_arrays(),
        created="2026-01-01T00:00:00+00:00",
    )


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrainingProfile, Path]:
    prof = synthetic_profile()
    path = save_profile(prof, tmp_path_factory.mktemp("valid") / f"profile-{prof.fingerprint}")
    return prof, path


def _same_numbers(a: TrainingProfile, b: TrainingProfile) -> bool:
    if len(a.ranges.low) != len(b.ranges.low) or len(a.ranges.high) != len(b.ranges.high):
        return False  # not the same layers (the zips below are strict)
    pairs = [(a.sa_traces, b.sa_traces), (a.sa_pred, b.sa_pred), (a.row_keys, b.row_keys)]
    pairs += list(zip(a.ranges.low, b.ranges.low, strict=True)) + list(zip(a.ranges.high, b.ranges.high, strict=True))
    for group in ("lsa_arrays", "dsa_arrays"):
        da, db = getattr(a, group), getattr(b, group)
        if sorted(da) != sorted(db):
            return False
        pairs += [(np.asarray(da[k]), np.asarray(db[k])) for k in da]
    return all(x.shape == y.shape and np.array_equal(x, y) for x, y in pairs) and a.meta() == {
        **b.meta(),
        "created": a.created,
    }


@contextlib.contextmanager
def _no_hang(seconds: int) -> Iterator[None]:
    def fail(*_a: Any) -> None:
        raise AssertionError(f"the load did not finish in {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_valid_profile_round_trips(valid: tuple[TrainingProfile, Path]) -> None:
    prof, path = valid
    back = load_profile(path, prof.fingerprint)
    assert _same_numbers(back, prof)
    t = np.random.default_rng(0).normal(size=(10, 6)).astype(np.float32)
    p = np.arange(10) % 3
    np.testing.assert_array_equal(back.lsa()(t, p), LSA(prof.sa_traces, prof.sa_pred)(t, p))
    np.testing.assert_array_equal(back.dsa()(t, p), DSA(prof.sa_traces, prof.sa_pred)(t, p))


def test_write_refuses_what_the_store_does_not_hold(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dtype object"):
        store.write_entry(tmp_path / "e", {}, {"a": np.array([{}], dtype=object)})
    with pytest.raises(ValueError, match="dtype <U1"):
        store.write_entry(tmp_path / "e", {}, {"a": np.array(["x"])})
    assert not (tmp_path / "e").exists()


OPS = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 99), st.floats(0, 1), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 99), st.floats(0, 1)),
    st.tuples(st.just("append"), st.integers(0, 99), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("replace"), st.integers(0, 99), st.binary(max_size=256)),
    st.tuples(st.just("delete"), st.integers(0, 99)),
    st.tuples(st.just("fifo"), st.integers(0, 99)),
    st.tuples(
        st.just("meta"),
        st.sampled_from(
            ["n_train", "var_threshold", "sa_sizes", "classifier", "refs", "fingerprint", "coverage_sizes"]
        ),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-5, 10**6),
            st.floats(allow_nan=True),
            st.text(max_size=5),
            st.lists(st.integers(-1, 10), max_size=3),
        ),
        st.booleans(),
    ),
)


def _apply(op: tuple[Any, ...], path: Path) -> None:
    files = sorted(path.iterdir())
    kind = op[0]
    if kind == "meta":  # a semantic edit, with or without a recomputed (crafted) digest
        _, key, value, redigest = op
        if not (path / "meta.json").is_file():
            return  # an earlier operation made it a FIFO or removed it
        try:
            doc = json.loads((path / "meta.json").read_bytes())
            doc["meta"][key] = value
        except (OSError, ValueError, TypeError, KeyError):
            return  # an earlier operation broke meta.json: nothing to edit
        if redigest:
            body = {k: doc[k] for k in ("format", "version", "meta", "arrays")}
            doc["digest"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        (path / "meta.json").write_text(json.dumps(doc))
        return
    file = files[op[1] % len(files)]
    if not file.is_file():
        return
    raw = file.read_bytes()
    if kind == "flip" and raw:
        i = min(len(raw) - 1, int(op[2] * len(raw)))
        raw = raw[:i] + bytes([raw[i] ^ op[3]]) + raw[i + 1 :]
    elif kind == "truncate":
        raw = raw[: int(op[2] * len(raw))]
    elif kind == "append":
        raw = raw + op[2]
    elif kind == "replace":
        raw = op[2]
    elif kind == "delete":
        file.unlink()
        return
    elif kind == "fifo":
        file.unlink()
        os.mkfifo(file)
        return
    file.write_bytes(raw)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=3))
def test_random_corruptions_never_crash_hang_or_load_other_numbers(
    valid: tuple[TrainingProfile, Path], ops: list[Any]
) -> None:
    prof, path = valid
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copytree(path, copy)
        for op in ops:
            _apply(op, copy)
        with _no_hang(20):
            try:
                back = load_profile(copy, prof.fingerprint)
            except Invalid as exc:
                assert str(exc) and "\n" not in str(exc)
                return
            # what loads must be exactly what was written (a no-op corruption, e.g. a byte of
            # header padding flipped to another space-like byte)
            assert _same_numbers(back, prof), ops
