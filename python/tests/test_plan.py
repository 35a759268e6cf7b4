"""The planner over numpy arrays: equal to the Rust crate on the same batch (pinned
fingerprints computed by the crate), every sample exactly once, loss scales, the
report, JSON round trips, and Given plans on exactly the given costs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import microbatch
import microbatch.cost as mc

SYNCS = ("step", "micro-step", "phase")


def batch(n: int = 200):
    """The batch of the crate-side snippet that computed the pins below:
    ids 7i + 3, text 100 + 37i mod 900, i mod 3 images of 256 + (13i + 7k) mod 300
    tokens, loss tokens text // 2, given costs (0.25 (i mod 5), text * 1e-3)."""
    i = np.arange(n, dtype=np.int64)
    ids = i * 7 + 3
    text = 100 + (i * 37) % 900
    images = [np.array([256 + (k * 13 + j * 7) % 300 for j in range(k % 3)], dtype=np.int64) for k in range(n)]
    loss = text // 2
    costs = np.stack([(i % 5) * 0.25, text * 1e-3], axis=1)
    return ids, text, images, loss, costs


# Computed by the Rust crate (Planner::new(..).ranks(4).seq_len(8192).sync(..)) on batch(200).
PINS = {
    ("preset", "step"): (0xEA489262ADC0209D, 6, 2335734177841152.0),
    ("preset", "micro-step"): (0x02D41B3507900741, 6, 2333524367622144.0),
    ("preset", "phase"): (0x1364DB932E45AA55, 6, 2335327656075264.0),
    # The custom model is not additive (a max): the polish stage weighs its exact costs.
    ("custom", "step"): (0x9ECC6C404298E057, 6, 1.272),
    ("custom", "micro-step"): (0x362A57960C0D8BED, 6, 1.296),
    ("custom", "phase"): (0x81993BEA1D2FE799, 6, 1.296),
    ("given", "step"): (0xFE58BD86636B4C37, 6, 51.913999999999994),
    ("given", "micro-step"): (0x5C9991F6100995B7, 6, 51.873000000000005),
    ("given", "phase"): (0xF981DDD6E2C80F3D, 6, 52.143),
    ("baseline", "step"): (0x9B9DA2C975933478, 7, 2501673645416448.0),
    ("baseline", "micro-step"): (0x9B9DA2C975933478, 7, 2642979379421184.0),
    ("baseline", "phase"): (0x9B9DA2C975933478, 7, 2651579551555584.0),
}


def custom_model() -> mc.CostModel:
    llm = mc.Tokens(2e-5) + mc.DocumentAttention(3e-10) + mc.PerSample(1e-3)
    return llm.max(mc.PerTile(4e-3, 256, training="trained").in_phase("language"))


@pytest.mark.parametrize("sync", SYNCS)
@pytest.mark.parametrize("kind", ["preset", "custom", "given", "baseline"])
def test_fingerprints_equal_the_crate(kind, sync):
    ids, text, images, loss, costs = batch()
    model = {"preset": "qwen2.5-vl-7b", "baseline": "qwen2.5-vl-7b", "custom": custom_model(), "given": "costs"}[kind]
    planner = microbatch.Planner(model, ranks=4, seq_len=8192, sync=sync)
    kwargs = dict(ids=ids, text_tokens=text, image_tokens=images, loss_tokens=loss)
    if kind == "given":
        kwargs["costs"] = costs
    plan = planner.baseline(**kwargs) if kind == "baseline" else planner.plan(**kwargs)
    fingerprint, micro_steps, predicted = PINS[(kind, sync)]
    assert plan.fingerprint == fingerprint
    assert plan.micro_steps == micro_steps
    assert plan.report.predicted == predicted


def test_forms_of_images_plan_the_same():
    ids, text, images, loss, _ = batch()
    planner = microbatch.Planner("qwen2.5-vl-7b", ranks=4, seq_len=8192)
    a = planner.plan(ids, text, images, loss)
    values = np.concatenate(images)
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in images])])
    b = planner.plan(ids, text, (values, offsets), loss)
    c = planner.plan(ids, text, images, loss, image_units=[np.ones(len(x), dtype=np.int64) for x in images])
    assert a.fingerprint == b.fingerprint == c.fingerprint


@pytest.mark.parametrize("sync", SYNCS)
def test_every_sample_exactly_once(sync):
    ids, text, images, loss, _ = batch(301)
    plan = microbatch.Planner("internvl2.5-8b", ranks=8, seq_len=8192, sync=sync).plan(ids, text, images, loss)
    got = np.concatenate([plan.micro_batch(r, s) for r in range(plan.ranks) for s in range(plan.micro_steps)])
    assert sorted(got.tolist()) == sorted(ids.tolist())
    for r in range(plan.ranks):
        for s in range(plan.micro_steps):
            seqs = plan.sequences(r, s)
            assert len(seqs) == plan.sequences_per_micro_step
            joined = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.uint64)
            assert joined.tolist() == plan.micro_batch(r, s).tolist()
    with pytest.raises(IndexError):
        plan.micro_batch(plan.ranks, 0)


def test_loss_scales():
    ids, text, images, loss, _ = batch()
    plan = microbatch.Planner("qwen2.5-vl-7b", ranks=4, seq_len=8192).plan(ids, text, images, loss)
    assert plan.loss == microbatch.Loss(loss_tokens=53650, samples=200, ranks=4)
    assert plan.loss_scale("token", "sum") == 1 / 53650
    assert plan.loss_scale("token", "mean") == 4 / 53650
    assert plan.loss_scale("sample", "sum") == 1 / 200
    assert plan.loss_scale("sample", "mean") == 4 / 200
    with pytest.raises(microbatch.SettingError) as e:
        plan.loss_scale("tokens", "sum")
    assert e.value.item == "normalization"


def test_report_fields():
    ids, text, images, loss, _ = batch()
    r = microbatch.Planner("qwen2.5-vl-7b", ranks=4, seq_len=8192, sync="phase").plan(ids, text, images, loss).report
    assert r.sync == "phase"
    assert r.lower_bound <= r.predicted <= r.baseline
    assert r.ratio == pytest.approx(r.predicted / r.lower_bound)
    assert r.gain == pytest.approx(r.users_baseline / r.predicted)
    assert r.packed_gain == pytest.approx(r.baseline / r.predicted)
    assert r.users_baseline > 0.0
    assert r.straggler == pytest.approx(r.predicted - r.lower_bound)
    assert r.imbalance_vision >= 1.0 and r.imbalance_language >= 1.0
    assert 0.0 < r.efficiency <= 1.0
    assert r.sequences >= 1 and r.baseline_micro_steps >= 1
    assert isinstance(r.balanced_packing, bool)
    assert r.planning_time is not None and r.planning_time >= 0.0
    with pytest.raises(Exception):
        r.predicted = 0.0  # frozen


def test_json_round_trip_and_corruption_refused():
    ids, text, images, loss, costs = batch()
    for model, kw in (("qwen2.5-vl-7b", {}), ("costs", {"costs": costs})):
        plan = microbatch.Planner(model, ranks=4, seq_len=8192).plan(ids, text, images, loss, **kw)
        doc = plan.to_json()
        back = microbatch.Plan.from_json(doc)
        assert back == plan and back.fingerprint == plan.fingerprint
        assert back.report == plan.report
    data = json.loads(doc)
    data["fingerprint"] = data["fingerprint"] ^ 1
    with pytest.raises(microbatch.InputError) as e:
        microbatch.Plan.from_json(json.dumps(data))
    assert "not a valid plan document" in str(e.value)
    with pytest.raises(microbatch.InputError):
        microbatch.Plan.from_json(doc[: len(doc) // 2])


def step_time(plan, costs_by_id, sync):
    """The step time of ``plan`` recomputed in numpy from the given costs."""
    mb = np.zeros((plan.ranks, plan.micro_steps, 2))
    for r in range(plan.ranks):
        for s in range(plan.micro_steps):
            for seq in plan.sequences(r, s):
                mb[r, s] += np.sum([costs_by_id[int(i)] for i in seq], axis=0) if len(seq) else 0.0
    if sync == "step":
        return mb.sum(axis=2).sum(axis=1).max()
    if sync == "micro-step":
        return mb.sum(axis=2).max(axis=0).sum()
    return mb.max(axis=0).sum()


@pytest.mark.parametrize("sync", SYNCS)
@pytest.mark.parametrize("form", ["array", "dict", "model"])
def test_given_plans_on_exactly_the_given_costs(sync, form):
    rng = np.random.default_rng(7)
    n = 257
    ids = rng.permutation(10_000)[:n]
    text = rng.integers(1, 3000, n)
    costs = np.stack([rng.uniform(0, 1, n) * (rng.uniform(size=n) < 0.5), rng.lognormal(0, 1, n)], axis=1)
    model = mc.Given() if form == "model" else "costs"
    given = {"vision": costs[:, 0], "language": costs[:, 1]} if form == "dict" else costs
    plan = microbatch.Planner(model, ranks=6, seq_len=4096, sync=sync).plan(ids, text, costs=given)
    by_id = dict(zip(ids.tolist(), costs))
    assert plan.report.predicted == pytest.approx(step_time(plan, by_id, sync), rel=1e-12)
    # Against token balancing: the given costs are what the plan balances.
    tokens = microbatch.Planner(mc.Tokens(1.0), ranks=6, seq_len=4096, sync=sync).plan(ids, text)
    assert plan.report.predicted <= step_time(tokens, by_id, sync) * (1 + 1e-12)


def test_custom_model_plans_like_its_costs():
    ids, text, images, loss, _ = batch()
    model = mc.Tokens(1.0) + mc.PerGroup(100.0)
    plan = microbatch.Planner(model, ranks=4, seq_len=8192, sync="step").plan(ids, text, images, loss)
    assert plan.report.predicted > 0
    assert "Tokens" in model.formula and "PerGroup" in model.formula


def test_planner_repr_and_settings():
    p = microbatch.Planner("qwen2.5-vl-7b", ranks=2, seq_len=4096, micro_steps=3, max_units=64, max_images=4)
    assert "qwen2.5-vl-7b" in repr(p)
    plan = p.plan(np.arange(10), np.full(10, 100))
    assert plan.micro_steps == 3


def test_users_baseline_known_answer():
    # DistributedSampler's deal: rank 0 gets ids 0, 2, 4 (600 tokens each;
    # first fit: three rows, all run in the one micro-step), rank 1 ids 1, 3, 5.
    text = [600, 100, 600, 100, 600, 100]
    planner = microbatch.Planner(
        mc.Tokens(1.0), ranks=2, seq_len=1000, micro_steps=1, sequences_per_micro_step=2
    )
    r = planner.plan(ids=list(range(6)), text_tokens=text).report
    assert r.users_baseline == 1800.0
    assert r.gain == 1800.0 / r.predicted
    row = mc.Linear({"language.row_attention": 1.0})
    r = microbatch.Planner(row, ranks=2, seq_len=1000, micro_steps=1, sequences_per_micro_step=2).plan(
        ids=list(range(6)), text_tokens=text
    ).report
    assert r.users_baseline == 3 * 600.0**2


def test_search_effort_reaches_the_crate():
    # The default is the crate's (45); 0 turns the pairing and the search off; a
    # search never raises the step time it starts from, so a longer one is no worse here.
    ids, text, images, loss, _ = batch(512)
    kwargs = dict(ids=ids, text_tokens=text, image_tokens=images, loss_tokens=loss)
    plans = {e: microbatch.Planner("qwen2.5-vl-7b", ranks=16, seq_len=4096, sync="phase", search_effort=e).plan(**kwargs)
             for e in (None, 0, 45, 400)}
    assert plans[None].fingerprint == plans[45].fingerprint
    assert plans[0].fingerprint != plans[45].fingerprint
    assert plans[400].report.predicted <= plans[45].report.predicted < plans[0].report.predicted
    for bad, error in ((-1, microbatch.SettingError), (2**32, microbatch.SettingError), (1.5, microbatch.DtypeError),
                       (True, microbatch.DtypeError)):
        with pytest.raises(error, match="search_effort"):
            microbatch.Planner("qwen2.5-vl-7b", ranks=16, seq_len=4096, search_effort=bad)


def test_fastest_micro_steps_keep_the_plan_of_least_predicted_time():
    # Attention over the packed row (sdpa) and a cost per row: shorter rows in
    # more micro-steps are predicted faster up to a point.
    model = mc.Linear({"language.row_attention": 4e-8, "language.tokens": 1e-5, "language.groups": 5e-3})
    ids, text, images, loss, _ = batch(64)
    kwargs = dict(ids=ids, text_tokens=text, image_tokens=images, loss_tokens=loss)
    smallest = microbatch.Planner(model, ranks=4, seq_len=4096, sync="step").plan(**kwargs)
    a0 = smallest.micro_steps
    by_a = [microbatch.Planner(model, ranks=4, seq_len=4096, sync="step", micro_steps=a).plan(**kwargs)
            for a in range(a0, a0 + 4)]
    best = min(by_a, key=lambda p: p.report.predicted)  # ties to the first: fewer micro-steps
    fastest = microbatch.Planner(model, ranks=4, seq_len=4096, sync="step", fastest_micro_steps=a0 + 3).plan(**kwargs)
    assert fastest.fingerprint == best.fingerprint
    assert fastest.micro_steps > a0 and fastest.report.predicted < smallest.report.predicted
    with pytest.raises(microbatch.SettingError, match="give one"):
        microbatch.Planner(model, ranks=4, seq_len=4096, micro_steps=2, fastest_micro_steps=4)
    with pytest.raises(microbatch.SettingError, match="fastest_micro_steps"):
        microbatch.Planner(model, ranks=4, seq_len=4096, fastest_micro_steps=0).plan(**kwargs)
