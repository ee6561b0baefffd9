"""What a recorded call keeps of its inputs (thumbnails, digests, snippets) is made at the
session's end from a snapshot of them, not in the call: the same values as made in the call."""

from __future__ import annotations

import types

import numpy as np

from pytest_sadl.records import Batch, TestRecord, from_bytes, input_digests, snippets, thumbnails, to_bytes


def _traces(n: int, rng: np.random.Generator) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        sa=rng.random((n, 4)), coverage=[rng.random((n, 3))], pred=np.arange(n) % 3, output=rng.random((n, 3))
    )


def test_deferred_thumbnails_and_digests_are_those_of_the_inputs_as_they_were_in_the_call() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((40, 1, 8, 8)).astype(np.float32)
    want_thumbs, want_digests = thumbnails(x, channels_first=True), input_digests(x)
    batch = Batch.of(_traces(40, rng), x, channels_first=True)
    assert "_inputs" in batch.__dict__  # deferred: nothing made in the call
    x[:] = 0.5  # the test changes its array after the call
    np.testing.assert_array_equal(batch.thumbs, want_thumbs)
    np.testing.assert_array_equal(batch.digests, want_digests)
    assert batch.texts is None and "_inputs" not in batch.__dict__
    assert not np.array_equal(input_digests(x), want_digests)  # the change would have shown


def test_several_inputs_text_and_large_rows_keep_what_they_kept_before() -> None:
    rng = np.random.default_rng(1)
    two = {"b": rng.random((10, 3)), "a": rng.integers(0, 9, (10, 2))}
    batch = Batch.of(_traces(10, rng), two)
    assert "_inputs" in batch.__dict__
    np.testing.assert_array_equal(batch.digests, input_digests(two))
    text = np.array([f"input {i}" for i in range(10)])
    batch = Batch.of(_traces(10, rng), text)
    assert "_inputs" not in batch.__dict__  # not numeric: made in the call
    np.testing.assert_array_equal(batch.texts, snippets(text))
    np.testing.assert_array_equal(batch.digests, input_digests(text))
    big = rng.random((3, 3, 64, 64)).astype(np.float32)  # 48 KiB a row: digested in the call
    batch = Batch.of(_traces(3, rng), big, channels_first=True)
    assert "_inputs" not in batch.__dict__
    np.testing.assert_array_equal(batch.digests, input_digests(big))


def test_a_deferred_batch_crosses_the_wire_and_filters_with_its_inputs_made() -> None:
    rng = np.random.default_rng(2)
    x = rng.random((12, 8, 8)).astype(np.float32)
    rec = TestRecord("t::a", 0, "g", batches=[Batch.of(_traces(12, rng), x)])
    again = from_bytes(to_bytes([rec]))[0].batches[0]
    np.testing.assert_array_equal(again.digests, input_digests(x))
    np.testing.assert_array_equal(again.thumbs, thumbnails(x))
    part = Batch.of(_traces(12, rng), x).take(np.array([3, 5]))
    np.testing.assert_array_equal(part.digests, input_digests(x)[[3, 5]])
    overwritten = Batch.of(_traces(12, rng), x)
    overwritten.digests = None  # a field set by hand stays set (tests of the engine do)
    assert overwritten.digests is None
