"""collate_packed against a hand-built batch; loss_tokens and summed_loss against what cross-entropy really counts."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import microbatch  # noqa: E402
from microbatch.torch import collate_packed, loss_tokens, summed_loss  # noqa: E402


def test_collate_packed_equals_the_hand_built_batch():
    samples = [
        {"input_ids": torch.tensor([11, 12, 13]), "labels": torch.tensor([-100, 12, 13]),
         "pixel_values": torch.ones(2, 3), "image_grid_thw": torch.tensor([[1, 1, 2]]), "id": "a"},
        {"input_ids": [21, 22], "id": "b"},  # no labels: the inputs are the labels
        {"input_ids": np.array([31, 32, 33, 34]), "labels": [31, -100, 33, 34],
         "pixel_values": torch.zeros(1, 3), "image_grid_thw": torch.tensor([[1, 1, 1]]), "id": "c"},
    ]
    b = collate_packed(samples)
    assert b["input_ids"].tolist() == [[11, 12, 13, 21, 22, 31, 32, 33, 34]]
    assert b["labels"].tolist() == [[-100, 12, 13, -100, 22, -100, -100, 33, 34]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]
    assert b["cu_seqlens"].tolist() == [0, 3, 5, 9] and b["cu_seqlens"].dtype == torch.int32
    assert b["max_length"] == 4
    assert b["input_ids"].dtype == b["labels"].dtype == b["position_ids"].dtype == torch.int64
    assert torch.equal(b["pixel_values"], torch.cat([torch.ones(2, 3), torch.zeros(1, 3)]))
    assert b["image_grid_thw"].tolist() == [[1, 1, 2], [1, 1, 1]]
    assert b["id"] == ["a", "b", "c"]
    # The samples' own tensors are not modified.
    assert samples[0]["labels"].tolist() == [-100, 12, 13]
    assert collate_packed(samples, label_pad=-1)["labels"].tolist()[0][:4] == [-1, 12, 13, -1]


def test_empty_micro_batch_and_empty_sample():
    b = collate_packed([])
    assert b["input_ids"].shape == b["labels"].shape == b["position_ids"].shape == (1, 0)
    assert b["cu_seqlens"].tolist() == [0] and b["cu_seqlens"].dtype == torch.int32
    assert b["max_length"] == 0
    e = collate_packed([{"input_ids": [5, 6]}, {"input_ids": []}, {"input_ids": [7]}])
    assert e["input_ids"].tolist() == [[5, 6, 7]] and e["cu_seqlens"].tolist() == [0, 2, 2, 3]
    assert e["labels"].tolist() == [[-100, 6, -100]] and e["position_ids"].tolist() == [[0, 1, 0]]


def test_bad_samples_raise_and_name_the_sample():
    with pytest.raises(microbatch.InputError) as e:
        collate_packed([{"input_ids": [1]}, {"labels": [1]}])
    assert e.value.item == 1
    with pytest.raises(microbatch.DtypeError) as e:
        collate_packed([{"input_ids": [1, 2], "labels": [1]}])
    assert e.value.item == 0
    with pytest.raises(microbatch.DtypeError) as e:
        collate_packed([{"input_ids": [1.5, 2.0]}])
    assert e.value.item == 0


def counted_by_cross_entropy(logits, labels):
    """How many positions a shifted cross-entropy with ignore_index=-100 averages over."""
    total = F.cross_entropy(logits[:-1], labels[1:], ignore_index=-100, reduction="sum")
    mean = F.cross_entropy(logits[:-1], labels[1:], ignore_index=-100, reduction="mean")
    return 0 if torch.isnan(mean) else round(float(total / mean))


def test_loss_tokens_is_what_shifted_cross_entropy_counts():
    rng = np.random.default_rng(5)
    gen = torch.Generator().manual_seed(5)
    samples = []
    for _ in range(40):
        n = int(rng.integers(1, 12))
        labels = torch.as_tensor(rng.integers(0, 7, n))
        labels[torch.as_tensor(rng.random(n) < 0.4)] = -100
        samples.append({"input_ids": labels.clamp(min=0), "labels": labels})
        if n >= 2:  # alone, with a model's own shift (position 0 never predicted)
            logits = torch.randn(n, 7, generator=gen, dtype=torch.float64)
            assert loss_tokens(labels) == counted_by_cross_entropy(logits, labels)
    # Packed, the counts add up: boundaries are masked, so no sample is predicted from another.
    b = collate_packed(samples)
    logits = torch.randn(b["input_ids"].shape[1], 7, generator=gen, dtype=torch.float64)
    assert sum(loss_tokens(s["labels"]) for s in samples) == counted_by_cross_entropy(logits, b["labels"][0])
    assert loss_tokens([3]) == 0 and loss_tokens([]) == 0 and loss_tokens(np.array([1, 2, -100, 4])) == 2
    with pytest.raises(microbatch.DtypeError):
        loss_tokens([[1, 2]])


def test_summed_loss_equals_the_per_sample_sums():
    gen = torch.Generator().manual_seed(2)
    samples = [
        {"input_ids": [1, 2, 3, 4], "labels": [1, -100, 3, 4]},
        {"input_ids": [5, 6], "labels": [-100, -100]},  # no loss tokens: adds 0
        {"input_ids": [7, 8, 9]},
    ]
    b = collate_packed(samples)
    logits = torch.randn(1, 9, 10, generator=gen, dtype=torch.float64, requires_grad=True)
    z, y = logits[0], b["labels"][0]
    ce = lambda t: F.cross_entropy(z[t - 1], y[t])  # noqa: E731  label t predicted at t - 1
    token = ce(2) + ce(3) + ce(7) + ce(8)
    sample = (ce(2) + ce(3)) / 2 + (ce(7) + ce(8)) / 2
    got_token = summed_loss(logits, b["labels"], b["cu_seqlens"], "token")
    got_sample = summed_loss(logits, b["labels"], b["cu_seqlens"], "sample")
    assert torch.allclose(got_token, token, rtol=1e-14) and torch.allclose(got_sample, sample, rtol=1e-14)
    # An empty micro-batch: a zero still connected to the logits, so backward runs.
    empty = collate_packed([])
    w = torch.randn(3, 10, dtype=torch.float64, requires_grad=True)
    for norm in ("token", "sample"):
        logits = torch.zeros(1, 0, 3, dtype=torch.float64) @ w
        loss = summed_loss(logits, empty["labels"], empty["cu_seqlens"], norm)
        assert loss.item() == 0.0 and loss.requires_grad
        (g,) = torch.autograd.grad(loss, w)
        assert torch.count_nonzero(g) == 0
    with pytest.raises(microbatch.SettingError) as e:
        summed_loss(logits, empty["labels"], empty["cu_seqlens"], "mean")
    assert e.value.item == "normalization"


def test_per_token_keys_are_packed_and_other_extras_stay_aligned():
    samples = [
        {"input_ids": [1, 2, 3], "mm_token_type_ids": torch.tensor([[0, 1, 0]]), "id": "a",
         "pixel_values": torch.ones(2, 3, requires_grad=True)},
        {"input_ids": [4, 5], "mm_token_type_ids": [0, 0]},  # no id, no image
        {"input_ids": [6], "mm_token_type_ids": np.array([1]), "id": "c", "pixel_values": torch.zeros(1, 3)},
    ]
    b = collate_packed(samples)
    assert b["mm_token_type_ids"].tolist() == [[0, 1, 0, 0, 0, 1]]  # (1, T), like input_ids
    assert b["id"] == ["a", None, "c"]  # one entry per sample, never shifted
    assert b["pixel_values"].shape == (3, 3) and not b["pixel_values"].requires_grad
    with pytest.raises(microbatch.InputError) as e:  # a per-token key some samples lack cannot be aligned
        collate_packed([{"input_ids": [1], "token_type_ids": [0]}, {"input_ids": [2]}])
    assert e.value.item == 1
    with pytest.raises(microbatch.DtypeError) as e:
        collate_packed([{"input_ids": [1, 2], "token_type_ids": [0]}])
    assert e.value.item == 0
    # torch's own errors come back as microbatch errors naming the sample and the key
    for bad in ([[1, 2], [3]], "abc", {"a": 1}, [2**70]):
        with pytest.raises(microbatch.DtypeError) as e:
            collate_packed([{"input_ids": [1]}, {"input_ids": bad}])
        assert e.value.item == 1 and "input_ids" in str(e.value)
    with pytest.raises(microbatch.DtypeError) as e:
        collate_packed([{"input_ids": [1], "x": torch.ones(1, 2)}, {"input_ids": [1], "x": torch.ones(1, 3)}])
    assert e.value.item == 1 and str(e.value).startswith("sample 1: x has shape (1, 3)")
    assert collate_packed([{"input_ids": [1], "x": 5}])["x"] == [5]


def test_summed_loss_takes_a_model_output_and_the_batch():
    gen = torch.Generator().manual_seed(4)
    b = collate_packed([{"input_ids": [1, 2, 3, 4]}, {"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
    logits = torch.randn(1, 9, 10, generator=gen, dtype=torch.float64)

    class Output:  # what transformers' ModelOutput offers
        def __init__(self, logits):
            self.logits = logits

    for norm in ("token", "sample"):
        want = summed_loss(logits, b["labels"], b["cu_seqlens"], norm)
        assert torch.equal(summed_loss(Output(logits), b["labels"], b["cu_seqlens"], norm), want)
        assert torch.equal(summed_loss({"logits": logits}, b, norm), want)
        assert torch.equal(summed_loss(Output(logits), b, normalization=norm), want)
        # Without cu_seqlens, the boundaries come from position_ids (restarting per sample) ...
        hf = {"labels": b["labels"], "position_ids": b["position_ids"]}
        assert torch.equal(summed_loss(logits, hf, norm), want)
        # ... or from row 0 of multimodal positions (4, 1, T).
        hf["position_ids"] = torch.cat([b["position_ids"].unsqueeze(0), torch.zeros(3, 1, 9, dtype=torch.int64)])
        assert torch.equal(summed_loss(logits, hf, norm), want)
    with pytest.raises(microbatch.DtypeError):
        summed_loss(object(), b)
    with pytest.raises(microbatch.SettingError) as e:
        summed_loss(logits, b["labels"], None, "sample")
    assert e.value.item == "cu_seqlens"
    with pytest.raises(microbatch.InputError):
        summed_loss(logits, {"labels": b["labels"]}, "sample")
