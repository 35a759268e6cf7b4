"""Cost models built in Python equal the crate's formulas on small inputs; compositions,
bad coefficients and fit."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import microbatch
import microbatch.cost as mc


def test_terms_equal_the_formulas():
    text = [10, 3, 0]
    images = [[], [5, 7], [4]]
    T = np.array([10, 15, 4], dtype=float)
    lang = lambda m: m.cost(text, images)[:, 1]  # noqa: E731
    assert mc.Tokens(2.0).cost([10]).tolist() == [[0.0, 20.0]]
    assert lang(mc.Tokens(2.0)).tolist() == (2 * T).tolist()
    assert lang(mc.PerSample(0.5)).tolist() == [0.5, 0.5, 0.5]
    assert lang(mc.PerGroup(5.0)).tolist() == [5.0, 5.0, 5.0]
    assert lang(mc.DocumentAttention(1.0)).tolist() == (T**2).tolist()
    assert lang(mc.FullAttention(1.0)).tolist() == (T**2).tolist()
    # Groups: document attention sums squares, full attention squares the sum.
    assert mc.DocumentAttention(1.0).group_cost(text, images) == (0.0, float((T**2).sum()))
    assert mc.FullAttention(1.0).group_cost(text, images) == (0.0, float(T.sum() ** 2))
    assert mc.PerGroup(5.0).group_cost(text, images) == (0.0, 5.0)
    # Vision: 512 tokens in tiles of 256 -> 2 tiles, x3 when trained.
    assert mc.PerTile(4.0, 256, training="frozen").cost([0], [[512]]).tolist() == [[8.0, 0.0]]
    assert mc.PerTile(4.0, 256).cost([0], [[512]]).tolist() == [[24.0, 0.0]]
    # Qwen2-VL: P = 4 * 10 patches: per_patch * P + per_patch_pair * P^2.
    assert mc.PerImage(1.0, 0.5, 4, training="frozen").cost([0], [[10]]).tolist() == [[40.0 + 0.5 * 1600, 0.0]]
    assert mc.Windowed(1.0, 0.0, 64, 0.0, 4, training="frozen").cost([0], [[10]]).tolist() == [[40.0, 0.0]]


def test_units_split_tiles():
    # 2 units of 256 tokens (one tile each) vs 1 unit of 512 (two tiles): same tile count here,
    # but PerImage squares per unit: 2 * (4 * 256)^2 vs (4 * 512)^2.
    m = mc.PerImage(0.0, 1.0, 4, training="frozen")
    one = m.cost([0], [[512]])[0, 0]
    two = m.cost([0], [[512]], image_units=[[2]])[0, 0]
    assert one == (4 * 512) ** 2 and two == 2 * (4 * 256) ** 2


def test_composition():
    t, s, g = mc.Tokens(1.0), mc.PerSample(10.0), mc.PerGroup(100.0)
    text = [5, 7]
    assert (t + s).group_cost(text) == (0.0, 12.0 + 20.0)
    assert sum([t, s, g]).group_cost(text) == (0.0, 12.0 + 20.0 + 100.0)
    assert t.scale(3.0).group_cost(text) == (0.0, 36.0)
    assert t.scale(0.0).group_cost(text) == (0.0, 0.0)
    assert (t + s).in_phase("vision").group_cost(text) == (32.0, 0.0)
    assert t.max(g).group_cost(text) == (0.0, 100.0)
    assert t.max(s.scale(0.01)).group_cost(text) == (0.0, 12.0)
    both = t + s.in_phase("vision")
    assert both.group_cost(text) == (20.0, 12.0)
    assert repr(both) == "Tokens(1.0) + PerSample(10.0).in_phase('vision')"
    assert both.formula == "Tokens { per_token: 1.0 } + vision(PerSample { cost: 10.0 })"


def test_presets():
    assert mc.PRESETS == ("llava-1.5-7b", "qwen2.5-vl-7b", "internvl2.5-8b")
    for name in mc.PRESETS:
        c = mc.preset(name).cost([300, 100], [[576], []])
        assert c.shape == (2, 2) and (c >= 0).all() and c[1, 0] == 0.0
    # The preset plans as its name does.
    ids, text = np.arange(64), 100 + (np.arange(64) * 37) % 900
    a = microbatch.Planner("qwen2.5-vl-7b", ranks=4, seq_len=8192).plan(ids, text)
    b = microbatch.Planner(mc.preset("qwen2.5-vl-7b"), ranks=4, seq_len=8192).plan(ids, text)
    assert a.fingerprint == b.fingerprint
    with pytest.raises(microbatch.SettingError) as e:
        mc.preset("gpt-2")
    assert e.value.kind == "UnknownName"


def test_given_costs():
    g = mc.Given()
    assert g.needs_costs and (g + mc.Tokens(1.0)).needs_costs and not mc.Tokens(1.0).needs_costs
    costs = np.array([[0.5, 2.0], [0.0, 1.0]])
    assert g.cost([1, 2], costs=costs).tolist() == costs.tolist()
    assert g.group_cost([1, 2], costs=costs) == (0.5, 3.0)
    assert (g + mc.Tokens(1.0)).group_cost([1, 2], costs={"language": [1.0, 1.0]}) == (0.0, 5.0)
    with pytest.raises(microbatch.SettingError) as e:
        g.cost([1, 2])
    assert e.value.item == "costs"
    with pytest.raises(microbatch.SettingError):
        mc.Tokens(1.0).cost([1], costs=[[0.0, 1.0]])


@pytest.mark.parametrize(
    "build, name",
    [
        (lambda v: mc.Tokens(v), "per_token"),
        (lambda v: mc.PerSample(v), "cost"),
        (lambda v: mc.PerGroup(v), "cost"),
        (lambda v: mc.DocumentAttention(v), "per_token_pair"),
        (lambda v: mc.FullAttention(v), "per_token_pair"),
        (lambda v: mc.PerTile(v, 256), "per_tile"),
        (lambda v: mc.PerImage(1.0, v, 4), "per_patch_pair"),
        (lambda v: mc.Windowed(1.0, v, 64, 1.0, 4), "per_window_pair"),
        (lambda v: mc.Tokens(1.0).scale(v), "factor"),
    ],
)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_bad_coefficients(build, name, value):
    with pytest.raises(microbatch.InvalidValueError) as e:
        build(value)
    assert e.value.kind == "InvalidCoefficient" and e.value.item == name


def test_bad_arguments():
    with pytest.raises(microbatch.DtypeError) as e:
        mc.Tokens("1.0")
    assert e.value.item == "per_token"
    with pytest.raises(microbatch.SettingError) as e:
        mc.PerTile(1.0, 0)
    assert e.value.kind == "InvalidSetting" and e.value.item == "tokens_per_tile"
    with pytest.raises(microbatch.SettingError):
        mc.PerTile(1.0, 256, training="frozen-ish")
    with pytest.raises(microbatch.SettingError) as e:
        mc.Tokens(1.0).in_phase("audio")
    assert e.value.item == "phase"


def test_fit():
    rng = np.random.default_rng(1)
    T = rng.integers(100, 8000, size=(40, 8)).astype(float)
    features = np.stack([T.sum(1), (T**2).sum(1), np.full(40, 8.0)], axis=1)
    times = features @ np.array([2e-5, 3e-10, 1e-3])
    f = mc.fit(features, times)
    assert f.rows == 40 and f.coefficients.shape == (3,)
    assert f.r_squared > 1 - 1e-9 and f.max_relative_error < 1e-6
    assert np.allclose(f.coefficients, [2e-5, 3e-10, 1e-3], rtol=1e-6)
    assert f.predict(features[0]) == pytest.approx(times[0], rel=1e-9)
    assert np.allclose(f.predict(features), times, rtol=1e-9)
    assert 0 <= f.worst_row < 40
    model = mc.Tokens(f.coefficients[0]) + mc.DocumentAttention(f.coefficients[1]) + mc.PerSample(f.coefficients[2])
    assert model.group_cost(T[0].astype(int))[1] == pytest.approx(times[0], rel=1e-6)


def test_errors_pickle():
    with pytest.raises(microbatch.InvalidValueError) as e:
        mc.Tokens(-1.0)
    back = pickle.loads(pickle.dumps(e.value))
    assert type(back) is microbatch.InvalidValueError
    assert (back.kind, back.item, str(back)) == (e.value.kind, e.value.item, str(e.value))


def test_fit_terms_recovers_known_coefficients_and_plans():
    """Times generated from known coefficients over the same terms: fit_terms
    recovers them, and the fitted model equals the hand-built one."""
    rng = np.random.default_rng(11)
    truth = {"tokens": 3e-6, "attention": 2e-10, "group": 4e-3}
    groups, times = [], []
    for _ in range(40):
        text = rng.integers(50, 3000, int(rng.integers(1, 6)))
        groups.append({"text_tokens": text})
        times.append(truth["tokens"] * text.sum() + truth["attention"] * (text.astype(float) ** 2).sum()
                     + truth["group"])
    terms = [mc.Tokens(1.0), mc.DocumentAttention(1.0), mc.PerGroup(1.0)]
    model, f = mc.fit_terms(terms, groups, times)
    np.testing.assert_allclose(f.coefficients, list(truth.values()), rtol=1e-6)
    assert f.rows == 40 and f.r_squared > 0.999999
    by_hand = mc.Tokens(truth["tokens"]) + mc.DocumentAttention(truth["attention"]) + mc.PerGroup(truth["group"])
    probe = {"text_tokens": [700, 1200]}
    np.testing.assert_allclose(model.group_cost(**probe), by_hand.group_cost(**probe), rtol=1e-6)
    plan = microbatch.Planner(model, ranks=2, seq_len=4096).plan(ids=[0, 1, 2, 3], text_tokens=[900, 100, 500, 500])
    assert len(plan) == 4


def test_fit_terms_refuses_what_it_cannot_fit():
    with pytest.raises(microbatch.FitError):  # fewer rows than terms + 1
        mc.fit_terms([mc.Tokens(1.0), mc.PerGroup(1.0)], [([10], None), ([20], None)], [1.0, 2.0])
    with pytest.raises(microbatch.DtypeError) as e:
        mc.fit_terms([mc.Tokens(1.0)], [[1, 2, 3]], [1.0])
    assert e.value.item == 0
    with pytest.raises(microbatch.DtypeError):
        mc.fit_terms([], [([10], None)], [1.0])


def test_terms_come_from_the_crate():
    from microbatch import _native

    assert mc.TERMS == tuple(_native.TERM_NAMES)
    assert mc.TERMS[0] == "vision.image_tokens" and mc.TERMS[-1] == "vision.groups"
    assert len(set(mc.TERMS)) == len(mc.TERMS) == 12


def _group(rng, n):
    text = rng.integers(0, 3000, n)
    images = [rng.integers(1, 2000, int(k)) for k in rng.integers(0, 3, n)]
    return text, images


def test_compositions_follow_the_combinators_rules():
    """Every combinator, nested, on random groups, against the rules computed
    here from the terms' own costs: a sum adds, a scale multiplies (a zero
    factor gives zero, even on an infinite cost), in_phase moves the total,
    max is phase-wise; per sample and per group."""
    rng = np.random.default_rng(5)
    t, a, g = mc.Tokens(2e-3), mc.DocumentAttention(1e-7), mc.PerGroup(0.5)
    v = mc.PerTile(4e-3, 256, training="trained")
    huge = mc.Tokens(1e308)  # every non-empty sample overflows to infinity
    for _ in range(20):
        text, images = _group(rng, int(rng.integers(1, 8)))
        c = lambda m: np.array(m.group_cost(text, images))  # noqa: E731
        k = float(rng.uniform(0.0, 3.0))
        assert (c(t + a + g) == c(t) + c(a) + c(g)).all()
        assert (c((t + a).scale(k)) == (c(t) + c(a)) * k).all()
        assert (c(huge.scale(0.0)) == 0.0).all() and np.isinf(c(huge)[1])
        assert (c(v.in_phase("language")) == [0.0, c(v).sum()]).all()
        assert (c(t.max(g)) == np.maximum(c(t), c(g))).all()
        deep = (t + a).scale(k).max(g.in_phase("vision")) + v + huge.scale(0.0)
        want = np.maximum((c(t) + c(a)) * k, [c(g).sum(), 0.0]) + c(v) + 0.0
        assert (c(deep) == want).all()
        # Each sample's own cost, through the same composition.
        per = deep.cost(text, images)
        for i in range(len(text)):
            one = np.array(deep.group_cost(text[i : i + 1], images[i : i + 1]))
            assert (per[i] == one).all()
    fixed = (t + a).scale(1.5).max(g.in_phase("vision")) + huge.scale(0.0)
    assert fixed.formula == (
        "max(1.5 * (Tokens { per_token: 0.002 } + DocumentAttention { per_token_pair: 1e-7 }), "
        "vision(PerGroup { cost: 0.5 })) + 0.0 * (Tokens { per_token: 1e308 })"
    )


def test_compositions_plan_as_their_formula_says():
    """A planner over a composition built in Python reports the composition's
    cost: the predicted step time is at least the heaviest sample's own cost."""
    rng = np.random.default_rng(9)
    text, images = _group(rng, 200)
    ids = np.arange(200)
    model = (mc.Tokens(2e-5) + mc.DocumentAttention(3e-10)).max(mc.PerSample(1e-3)) + mc.PerTile(
        4e-3, 256
    ).in_phase("vision")
    plan = microbatch.Planner(model, ranks=4, seq_len=16384, sync="phase").plan(ids, text, images)
    assert len(plan) == 200
    own = model.cost(text, images)
    assert plan.report.predicted >= own.sum(axis=1).max()
    # The same model built twice plans the same.
    again = (mc.Tokens(2e-5) + mc.DocumentAttention(3e-10)).max(mc.PerSample(1e-3)) + mc.PerTile(
        4e-3, 256
    ).in_phase("vision")
    replan = microbatch.Planner(again, ranks=4, seq_len=16384, sync="phase").plan(ids, text, images)
    assert replan.fingerprint == plan.fingerprint
