"""microbatch.cost.Calibrator and Linear: recovery on synthetic timings, planning on the fitted model, bad input."""

import math
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import microbatch
import microbatch.cost as mc
from microbatch.errors import DtypeError, InvalidValueError, SettingError

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "collect_timings.py"

# The truth: the qwen2.5-vl-7b preset's terms in seconds, plus overheads no preset has.
TRUTH = {
    "vision.image_tokens": 2e-6,
    "vision.unit_attention": 3e-12,
    "vision.images": 4e-4,
    "language.tokens": 3e-6,
    "language.document_attention": 1e-10,
    "language.samples": 2e-4,
    "language.groups": 1e-3,
}


def micro_batches(n, seed):
    """``n`` micro-batches of 1..6 samples: (text tokens, image tokens)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 7))
        text = rng.integers(50, 3000, k)
        images = [list(rng.choice([256, 576, 1024], int(rng.choice([0, 0, 1, 2])))) for _ in range(k)]
        out.append((text, images))
    return out


def observe_all(cal, batches, truth, seed, per_phase=True, noise=0.03, slow=0.02):
    """Observes every batch with the truth's times, multiplicative noise and ``slow`` of them 2x; the slowed indices."""
    rng = np.random.default_rng(seed + 1000)
    slowed = []
    for i, (text, images) in enumerate(batches):
        v, l = truth.group_cost(text, images)
        v *= 1 + noise * rng.standard_normal()
        l *= 1 + noise * rng.standard_normal()
        if rng.random() < slow:
            v, l = 2 * v, 2 * l
            slowed.append(i)
        if per_phase:
            cal.observe(text, images, vision_seconds=v, language_seconds=l)
        else:
            cal.observe(text, images, seconds=v + l)
    return slowed


def mean_features_effect(fitted, truth, batches):
    """The largest |c_hat - c| * mean(feature) over the terms, over the mean time, by unit models of each term."""
    times = np.array([sum(truth.group_cost(t, i)) for t, i in batches])
    worst = 0.0
    for term, c in truth.coefficients.items():
        unit = mc.Linear({term: 1.0})
        mean_x = np.mean([sum(unit.group_cost(t, i)) for t, i in batches])
        worst = max(worst, abs(fitted.get(term, 0.0) - c) * mean_x / times.mean())
    return worst


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("per_phase", [True, False])
def test_recovery_with_noise_and_outliers(seed, per_phase):
    truth = mc.Linear(TRUTH)
    # Totals alone tell the phases' terms apart more slowly (the vision and
    # language features of one micro-batch are correlated): more rows.
    n = 600 if per_phase else 1500
    batches = micro_batches(n, seed)
    cal = mc.Calibrator("qwen2.5-vl-7b")
    slowed = observe_all(cal, batches, truth, seed, per_phase=per_phase)
    assert len(cal) == n
    status = cal.refit()
    assert status.fitted and status.reason is None
    # Every term's effect on the mean time within 3%.
    worst = mean_features_effect(status.coefficients, truth, batches)
    assert worst < 0.03, (worst, status)
    # The slowed rows are flagged, and few clean ones.
    assert set(slowed) <= set(status.rejected), (slowed, status.rejected)
    assert len(status.rejected) <= len(slowed) + 0.02 * len(batches)
    assert status.rows == n - len(status.rejected)
    assert 0.9 < status.r_squared <= 1.0
    # The model in use is the fitted one, with the fallback's terms.
    assert cal.model.coefficients == status.coefficients
    assert cal.model.terms == mc.Linear.preset("qwen2.5-vl-7b").terms == cal.fallback.terms


def test_the_fitted_model_plans_better_under_the_truth():
    """A planner on the calibrated model beats the preset's plan when the truth is not the preset."""
    truth = mc.Linear(TRUTH)
    cal = mc.Calibrator("qwen2.5-vl-7b")
    observe_all(cal, micro_batches(400, 7), truth, 7)
    assert cal.refit().fitted
    rng = np.random.default_rng(3)
    n = 256
    text = rng.integers(50, 3000, n)
    images = [list(rng.choice([256, 576, 1024], int(rng.choice([0, 0, 1, 2, 4])))) for _ in range(n)]
    ids = np.arange(n)
    truth_cost = truth.cost(text, images)  # additive terms except the per-group one: near exact

    def step_time(model):
        plan = microbatch.Planner(model, ranks=8, seq_len=8192, sync="phase").plan(ids, text, images)
        # The truth's step time of this plan: per micro-step, the slowest rank per phase.
        total = 0.0
        for j in range(plan.micro_steps):
            worst = np.zeros(2)
            for r in range(plan.ranks):
                mb = plan.micro_batch(r, j)
                if len(mb):
                    worst = np.maximum(worst, truth.group_cost(text[mb], [images[i] for i in mb]))
            total += worst.sum()
        return total

    calibrated, preset, exact = step_time(cal.model), step_time("qwen2.5-vl-7b"), step_time(truth)
    assert truth_cost.shape == (n, 2)
    assert calibrated <= preset, (calibrated, preset)
    assert calibrated <= exact * 1.01, (calibrated, exact)


def test_fallback_until_identified_and_drift():
    cal = mc.Calibrator("llava-1.5-7b", window=64)
    s = cal.status
    assert not s.fitted and s.reason == "not refitted yet" and s.r_squared is None
    assert cal.model.coefficients == mc.Linear.preset("llava-1.5-7b").coefficients
    cal.observe([100, 200], seconds=0.01)
    s = cal.refit()
    assert not s.fitted and s.reason.startswith("too few rows"), s
    assert s.identified == ()
    truth = mc.Linear({"language.tokens": 1e-5, "language.samples": 1e-3})
    for text, images in micro_batches(40, 1):
        cal.observe(text, seconds=sum(truth.group_cost(text)))
    s = cal.refit()
    assert s.fitted and "language.tokens" in s.identified and "vision.images" not in s.identified
    assert s.drift == mc.Drift(0, 0.0, 0.0, 0.0)  # the previous refit fell back
    # The costs double: the model predicts half.
    for text, images in micro_batches(5, 2):
        cal.observe(text, seconds=2 * sum(truth.group_cost(text)))
    d = cal.drift
    assert d.rows == 5 and math.isclose(d.bias, -0.5, abs_tol=1e-6), d
    assert cal.refit().drift == d


def test_the_window_is_bounded_and_follows_a_change():
    cal = mc.Calibrator("llava-1.5-7b", window=50)
    assert cal.window == 50
    old = mc.Linear({"language.tokens": 1e-5})
    new = mc.Linear({"language.tokens": 3e-5})
    for text, _ in micro_batches(80, 4):
        cal.observe(text, seconds=sum(old.group_cost(text)))
    for text, _ in micro_batches(50, 5):
        cal.observe(text, seconds=sum(new.group_cost(text)))
    assert len(cal) == 50
    s = cal.refit()
    assert math.isclose(s.coefficients["language.tokens"], 3e-5, rel_tol=1e-6), s


def test_deterministic():
    def run():
        cal = mc.Calibrator("internvl2.5-8b")
        observe_all(cal, micro_batches(200, 9), mc.Linear(TRUTH), 9)
        return cal.refit()

    assert run() == run()


def test_linear_model():
    m = mc.Linear({"language.tokens": 2.0, "vision.tiles(256)": 5.0})
    assert m.terms == ("language.tokens", "vision.tiles(256)")
    assert m.coefficients == {"language.tokens": 2.0, "vision.tiles(256)": 5.0}
    assert m.group_cost([10], [[512]]) == (10.0, 2.0 * 522)
    assert repr(m) == "Linear({'language.tokens': 2.0, 'vision.tiles(256)': 5.0})"
    assert "Tokens" in m.formula or "tokens" in m.formula
    # Composes like any model, and plans.
    plan = microbatch.Planner(m + mc.PerGroup(1.0), ranks=2, seq_len=1024).plan([0, 1, 2], [10, 20, 30])
    assert len(plan) == 3
    p = mc.Linear.preset("qwen2.5-vl-7b")
    a = p.cost([300, 40], [[1024, 256], []])
    b = mc.preset("qwen2.5-vl-7b").cost([300, 40], [[1024, 256], []])
    np.testing.assert_allclose(a, b, rtol=1e-12)


def _instance(template):
    """A TERMS entry with its parameters filled in."""
    return template.replace("(W,P)", "(64,4)").replace("(T)", "(576)")


def _template(name):
    """A term name with its parameters written as in TERMS."""
    name = re.sub(r"^vision\.window_attention\(\d+,\d+\)$", "vision.window_attention(W,P)", name)
    return re.sub(r"^vision\.tiles\(\d+\)$", "vision.tiles(T)", name)


def test_the_listed_terms_are_the_crates():
    # Python's TERMS is written out for the docs; the crate parses the names.
    # Every listed term is one the crate knows and prints back alike ...
    names = [_instance(t) for t in mc.TERMS]
    assert len(set(mc.TERMS)) == len(mc.TERMS)
    m = mc.Linear({name: 1.0 for name in names})
    assert m.terms == tuple(names)
    # ... and every term of every preset is listed.
    for preset in mc.PRESETS:
        for name in mc.Linear.preset(preset).terms:
            assert _template(name) in mc.TERMS, (preset, name)


def test_bad_input_names_the_item():
    with pytest.raises(SettingError) as e:
        mc.Linear({"language.tokens": 1.0, "language.colour": 1.0})
    assert e.value.item == 1 and "known" in str(e.value)
    with pytest.raises(InvalidValueError) as e:
        mc.Linear({"language.tokens": -1.0})
    assert e.value.item == "language.tokens"
    with pytest.raises(DtypeError) as e:
        mc.Linear([("language.tokens", 1.0)])
    assert e.value.item == "coefficients"
    with pytest.raises(SettingError):
        mc.Linear.preset("gpt-2")
    with pytest.raises(DtypeError) as e:
        mc.Calibrator(mc.Tokens(1.0))
    assert e.value.item == "model"
    with pytest.raises(SettingError) as e:
        mc.Calibrator("llava-1.5-7b", window=0)
    assert e.value.item == "window"
    cal = mc.Calibrator("llava-1.5-7b")
    for kwargs in (
        {},
        {"vision_seconds": 1.0},
        {"language_seconds": 1.0, "seconds": 2.0},
        {"vision_seconds": 1.0, "language_seconds": 1.0, "seconds": 2.0},
    ):
        with pytest.raises(SettingError) as e:
            cal.observe([10], **kwargs)
        assert e.value.item == "seconds", kwargs
    for kwargs, item in (
        ({"seconds": float("nan")}, "seconds"),
        ({"seconds": -1.0}, "seconds"),
        ({"vision_seconds": float("inf"), "language_seconds": 1.0}, "vision_seconds"),
        ({"vision_seconds": 0.0, "language_seconds": -0.5}, "language_seconds"),
    ):
        with pytest.raises(InvalidValueError) as e:
            cal.observe([10], **kwargs)
        assert e.value.item == item and e.value.kind == "InvalidTiming", (kwargs, e.value)
    with pytest.raises(DtypeError) as e:
        cal.observe([10], seconds="1")
    assert e.value.item == "seconds"
    with pytest.raises(DtypeError):
        cal.observe([10, 20], [[5]], seconds=1.0)
    with pytest.raises(InvalidValueError):
        cal.observe([-1], seconds=1.0)
    assert len(cal) == 0  # nothing stored by a refused row
    cal.observe([], seconds=0.0)  # an empty micro-batch is a row
    assert len(cal) == 1


def test_example_collect_timings_runs(capsys):
    argv = sys.argv
    sys.argv = [str(EXAMPLE), "--steps", "4", "--ranks", "2"]
    try:
        result = runpy.run_path(str(EXAMPLE), run_name="collect_timings")["main"](None)
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert "step 3:" in out, out
    history = result["history"]
    assert len(history) == 4 and history[-1].fitted, history[-1]
    assert isinstance(result["model"], mc.Linear)
    whole = runpy.run_path(str(EXAMPLE), run_name="collect_timings")["main"](["--steps", "3", "--whole"])
    assert whole["history"][-1].rows > 0


def test_example_collect_timings_under_torchrun():
    # Two processes (gloo over loopback), as the example's docs say: each rank
    # times only its own micro-batches, the rows are all-gathered, and every
    # rank fits the same model on them.
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    done = subprocess.run(
        command + [str(EXAMPLE), "--steps", "4"], capture_output=True, text=True, timeout=300, env=env
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    models = dict(re.findall(r"rank (\d): model (\{[^}]*\})", out))
    assert sorted(models) == ["0", "1"], out
    assert models["0"] == models["1"], out
    # Rank 0 reports its own micro-batches; the window holds both ranks' rows
    # (kept and rejected).
    timed = [int(b) for b in re.findall(r"step \d+: \d+ micro-steps, (\d+) micro-batches timed", out)]
    assert len(timed) == 4, out
    last = re.search(r"step 3: .*? fitted on (\d+) rows \((\d+) rejected\)", out)
    assert last is not None, out
    assert int(last.group(1)) + int(last.group(2)) == 2 * sum(timed), out


def test_dense_preset_and_row_attention_recovered():
    dense = mc.Linear.preset("llava-1.5-7b", attention="dense")
    varlen = mc.Linear.preset("llava-1.5-7b")
    assert "language.row_attention" in dense.terms and "language.document_attention" not in dense.terms
    assert dense.coefficients["language.row_attention"] == varlen.coefficients["language.document_attention"]
    with pytest.raises(SettingError):
        mc.Linear.preset("llava-1.5-7b", attention="flash")
    # Synthetic micro-batches of 1..3 packed rows; the truth sees each row's tokens squared.
    truth = {"language.tokens": 3e-6, "language.row_attention": 2e-9, "language.groups": 1e-3}
    rng = np.random.default_rng(22)
    c = mc.Calibrator("llava-1.5-7b", attention="dense")
    for _ in range(200):
        k = int(rng.integers(1, 7))
        text = rng.integers(50, 1500, k)
        rows = rng.integers(0, 3, k)
        seconds = 0.0
        for row in np.unique(rows):
            t = float(text[rows == row].sum())
            seconds += truth["language.tokens"] * t + truth["language.row_attention"] * t * t + truth["language.groups"]
        c.observe(text, seconds=seconds, rows=rows)
    status = c.refit()
    assert status.fitted
    got = c.model.coefficients
    assert got["language.row_attention"] == pytest.approx(2e-9, rel=1e-6)
    assert got["language.tokens"] == pytest.approx(3e-6, rel=1e-6)
    with pytest.raises((SettingError, DtypeError)):
        c.observe([100, 200], seconds=0.1, rows=[0])
