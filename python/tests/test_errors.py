"""Every crate error reachable from the planner and cost APIs raises its class with
``kind`` and ``item``; bad arrays raise the binding's errors with useful messages; errors pickle."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import microbatch
import microbatch.cost as mc
from microbatch import errors as E


def planner(model="qwen2.5-vl-7b", ranks=1, seq_len=100, **kw):
    return microbatch.Planner(model, ranks=ranks, seq_len=seq_len, **kw)


def raises(cls, kind, item, fragment, f):
    with pytest.raises(cls) as e:
        f()
    assert type(e.value) is cls, type(e.value)
    assert e.value.kind == kind
    assert e.value.item == item
    assert fragment in str(e.value), str(e.value)
    return e.value


# ------------------------------------------------------------- crate errors


def test_duplicate_id():
    raises(E.DuplicateIdError, "DuplicateId", 5, "more than once", lambda: planner().plan([5, 5], [10, 10]))


def test_oversize_names_the_sample_id():
    raises(E.OversizeError, "Oversize", 6, "101 tokens > 100", lambda: planner().plan([5, 6], [10, 101]))
    raises(
        E.OversizeError,
        "Oversize",
        6,
        "units",
        lambda: planner(seq_len=10_000, max_units=2).plan([5, 6], [10, 10], [[256], [256, 256, 256]]),
    )


def test_loss_tokens():
    raises(E.InvalidValueError, "LossTokens", 6, "11 loss tokens", lambda: planner().plan([5, 6], [10, 10], loss_tokens=[3, 11]))


@pytest.mark.parametrize("setting", ["ranks", "seq_len", "sequences_per_micro_step"])
def test_invalid_setting(setting):
    kw = {"ranks": 1, "seq_len": 100, "sequences_per_micro_step": 1}
    kw[setting] = 0
    model = kw.pop("ranks"), kw.pop("seq_len")
    raises(
        E.SettingError,
        "InvalidSetting",
        setting,
        "must be at least 1",
        lambda: microbatch.Planner("qwen2.5-vl-7b", ranks=model[0], seq_len=model[1], **kw).plan([1, 2], [3, 4]),
    )


def test_too_few_samples():
    raises(E.SettingError, "TooFewSamples", None, "every rank needs", lambda: planner(ranks=4, seq_len=4096).plan([1, 2], [3, 4]))


def test_micro_steps_infeasible():
    raises(
        E.InfeasibleError,
        "MicroStepsInfeasible",
        None,
        "smallest feasible number is 3",
        lambda: planner(micro_steps=1).plan([1, 2, 3], [90, 90, 90]),
    )


def test_unknown_name():
    raises(E.SettingError, "UnknownName", None, "gpt-2", lambda: planner("gpt-2"))
    raises(E.SettingError, "UnknownName", None, "gpt-2", lambda: mc.preset("gpt-2"))


def test_invalid_cost_of_a_model():
    # Each term finite, the sum infinite: the planner refuses the sample, naming its id.
    model = mc.Tokens(1e308) + mc.Tokens(1e308)
    raises(E.InvalidValueError, "InvalidCost", 5, "inf", lambda: planner(model).plan([5, 6], [10, 10]))


def test_cost_overflow_of_given_costs():
    raises(
        E.LimitError,
        "CostOverflow",
        None,
        "beyond f64::MAX",
        lambda: planner("costs").plan([5, 6], [10, 10], costs=[[0.0, 1.7e308], [0.0, 1.7e308]]),
    )


@pytest.mark.parametrize("bad, phase", [(np.nan, "vision"), (np.inf, "vision"), (-1.0, "language")])
def test_given_costs_refused_naming_the_sample(bad, phase):
    costs = np.array([[0.0, 1.0], [0.0, 1.0]])
    costs[1, 0 if phase == "vision" else 1] = bad
    e = raises(
        E.InvalidValueError,
        "InvalidCoefficient",
        6,
        f"`{phase} cost`",
        lambda: planner("costs").plan([5, 6], [10, 10], costs=costs),
    )
    assert "sample 1 (id 6)" in str(e)
    # The same through the model, naming the index.
    raises(E.InvalidValueError, "InvalidCoefficient", 1, "sample 1", lambda: mc.Given().cost([1, 2], costs=costs))


def test_invalid_coefficient():
    raises(E.InvalidValueError, "InvalidCoefficient", "per_token", "NaN", lambda: mc.Tokens(float("nan")))
    raises(E.InvalidValueError, "InvalidCoefficient", "factor", "negative", lambda: mc.Tokens(1.0).scale(-2.0))


def test_fit_errors():
    raises(E.FitError, "TooFewRows", None, "more rows than features", lambda: mc.fit([[1.0, 2.0]], [1.0]))
    raises(E.FitError, "InvalidMeasurement", 1, "time NaN", lambda: mc.fit([[1.0], [2.0], [3.0]], [1.0, np.nan, 2.0]))
    raises(E.FitError, "InvalidMeasurement", 1, "feature 0 = NaN", lambda: mc.fit([[1.0], [np.nan], [3.0]], [1.0, 2.0, 3.0]))
    raises(
        E.FitError, "RankDeficient", 1, "zero in every row", lambda: mc.fit([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]], [1.0, 2.0, 3.0])
    )
    raises(
        E.FitError, "CoefficientRange", 0, "beyond the range", lambda: mc.fit([[1e-300], [2e-300], [3e-300]], [1e300, 2e300, 3e300])
    )


# ----------------------------------------------------------- binding checks


def test_bad_dtypes():
    raises(E.DtypeError, "Binding", "ids", "round or cast", lambda: planner().plan([5.0, 6.0], [10, 10]))
    raises(E.DtypeError, "Binding", "text_tokens", "integers", lambda: planner().plan([5, 6], ["a", "b"]))
    raises(E.DtypeError, "Binding", "ids", "1-D", lambda: planner().plan([[5, 6]], [10, 10]))
    raises(E.DtypeError, "Binding", "costs", "numbers", lambda: planner("costs").plan([5, 6], [10, 1], costs=[["a", "b"], ["c", "d"]]))
    raises(E.DtypeError, "Binding", "model", "preset name", lambda: planner(3))
    raises(E.DtypeError, "Binding", "features", "numbers", lambda: mc.fit([["x"]], [1.0]))


def test_negative_values():
    raises(E.InvalidValueError, "Binding", 1, "text_tokens[1] is -1", lambda: planner().plan([5, 6], [10, -1]))
    raises(E.InvalidValueError, "Binding", 0, "non-negative", lambda: planner().plan([-5, 6], [10, 1]))
    raises(E.InvalidValueError, "Binding", 1, "image_tokens[1][0]", lambda: planner(seq_len=1000).plan([5, 6], [10, 1], [[1], [-3]]))
    raises(E.InvalidValueError, "Binding", 6, "0 units", lambda: planner(seq_len=1000).plan([5, 6], [10, 10], [[4], [4]], image_units=[[1], [0]]))


def test_wrong_lengths():
    raises(E.DtypeError, "Binding", "text_tokens", "expected 2", lambda: planner().plan([5, 6], [10]))
    raises(E.DtypeError, "Binding", "image_tokens", "expected 2", lambda: planner().plan([5, 6], [10, 1], [[1]]))
    raises(E.DtypeError, "Binding", "loss_tokens", "expected 2", lambda: planner().plan([5, 6], [10, 1], loss_tokens=[1]))
    raises(E.DtypeError, "Binding", "costs", "shape (2, 2)", lambda: planner("costs").plan([5, 6], [10, 1], costs=[[1, 2, 3], [1, 2, 3]]))
    raises(E.DtypeError, "Binding", "costs", "shape (2,)", lambda: planner("costs").plan([5, 6], [10, 1], costs={"vision": [1.0]}))
    raises(E.DtypeError, "Binding", "costs", "'audio'", lambda: planner("costs").plan([5, 6], [10, 1], costs={"audio": [1.0, 2.0]}))
    raises(E.DtypeError, "Binding", "times", "one time per row", lambda: mc.fit([[1.0], [2.0]], [1.0, 2.0, 3.0]))


def test_costs_required_or_refused():
    raises(E.SettingError, "Binding", "costs", "pass costs=", lambda: planner("costs").plan([5, 6], [10, 1]))
    raises(E.SettingError, "Binding", "costs", "only read by the Given", lambda: planner().plan([5, 6], [10, 1], costs=[[0, 1], [0, 1]]))


def test_bad_names():
    raises(E.SettingError, "Binding", "sync model", "unknown sync model", lambda: planner(sync="none"))
    raises(E.SettingError, "Binding", "phase", "unknown phase", lambda: mc.Tokens(1.0).in_phase("audio"))


def test_setting_names_are_read_by_the_crate():
    """The crate parses the names of the settings (its ``FromStr``) and lists them: the message, class, kind and
    item are those Python's own checks gave before, for any object (a non-string too)."""
    from microbatch import partition as P

    torch = pytest.importorskip("torch")
    import microbatch.torch as T

    plan = planner().plan([5], [10])
    cases = [
        ("sync model", "'none'", "'step', 'micro-step', 'phase'", lambda: planner(sync="none")),
        ("sync model", "3", "'step', 'micro-step', 'phase'", lambda: planner(sync=3)),
        ("group scope", "'team'", "'micro-batch', 'rank'", lambda: planner(group_scope="team")),
        ("normalization", "'tokens'", "'token', 'sample'", lambda: plan.loss_scale("tokens", "sum")),
        ("reduction", "None", "'sum', 'mean'", lambda: plan.loss_scale("token", None)),
        ("algorithm", "'greedy'", "'lpt', 'karmarkar_karp', 'exact'", lambda: P.partition([3, 2], 2, algorithm="greedy")),
        ("objective", "b'spread'", "'max_part', 'spread'", lambda: P.partition([3, 2], 2, objective=b"spread")),
        ("dims", "'per-dim'", "'combined', 'per_dim'", lambda: P.partition([3, 2], 2, dims="per-dim")),
        ("training", "'warm'", "'frozen', 'trained'", lambda: mc.PerTile(1.0, 256, training="warm")),
        ("training", "True", "'frozen', 'trained'", lambda: mc.PerImage(1.0, 0.5, 4, training=True)),
        ("training", "'Trained'", "'frozen', 'trained'", lambda: mc.Windowed(1.0, 0.0, 64, 0.0, 4, training="Trained")),
        ("phase", "'audio'", "'vision', 'language'", lambda: mc.Tokens(1.0).in_phase("audio")),
        ("phase", "0", "'vision', 'language'", lambda: mc.Tokens(1.0).in_phase(0)),
        # The native reader for Python code that normalizes by itself, and that code: summed_loss reads the
        # name through it (never its own list), before it looks at the tensors.
        ("normalization", "'mean'", "'token', 'sample'", lambda: microbatch._native.normalization("mean")),
        ("normalization", "'mean'", "'token', 'sample'",
         lambda: T.summed_loss(np.zeros((1, 2, 3)), np.zeros((1, 2)), [0, 2], "mean")),
        ("normalization", "None", "'token', 'sample'",
         lambda: T.summed_loss(torch.zeros(1, 2, 3), {"labels": torch.zeros(1, 2)}, None, None)),
    ]
    for item, value, known, f in cases:
        e = raises(E.SettingError, "Binding", item, "", f)
        assert str(e) == f"unknown {item} {value}: use one of {known}", str(e)
    costs = raises(E.DtypeError, "Binding", "costs", "", lambda: planner("costs").plan([5], [10], costs={"audio": [1.0]}))
    assert str(costs) == "costs has the key 'audio': use 'vision' and/or 'language'"
    # Every name the package lists is one the crate reads.
    for sync in microbatch.plan.SYNC_MODELS:
        for scope in microbatch.plan.GROUP_SCOPES:
            assert planner(sync=sync, group_scope=scope).sync == sync
    for normalization in microbatch.plan.NORMALIZATIONS:
        assert microbatch._native.normalization(normalization) == normalization
        for reduction in microbatch.plan.REDUCTIONS:
            assert plan.loss_scale(normalization, reduction) > 0.0
    for preset in mc.PRESETS:
        assert planner(preset).plan([5], [10]).report.predicted > 0.0
    for phase in mc.PHASES:
        assert mc.Tokens(1.0).in_phase(phase).cost([3])[0][mc.PHASES.index(phase)] == 3.0
    for training in mc.TRAINING:
        assert mc.PerTile(1.0, 256, training=training).cost([0], [[256]])[0][0] > 0.0
    native = microbatch._native
    for algorithm in native.ALGORITHM_NAMES:
        for objective in native.OBJECTIVE_NAMES:
            for dims in native.DIMS_NAMES:
                assert P.partition([3, 2, 2], 2, algorithm=algorithm, objective=objective, dims=dims).objective >= 0


def test_errors_pickle():
    for build in (lambda: planner().plan([5, 5], [10, 10]), lambda: planner().plan([5, 6], [10, 101]), lambda: mc.fit([[1.0]], [np.nan])):
        with pytest.raises(microbatch.Error) as e:
            build()
        back = pickle.loads(pickle.dumps(e.value))
        assert type(back) is type(e.value)
        assert (back.kind, back.item, str(back)) == (e.value.kind, e.value.item, str(e.value))
        assert isinstance(back, ValueError)


def test_internal_error_is_not_a_value_error():
    assert issubclass(E.InternalError, RuntimeError) and not issubclass(E.InternalError, ValueError)
