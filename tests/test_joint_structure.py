"""The joint statistics of per-query tables, and the fit of the call model's joint structure: exact statistics on
hand-made tables, and recovery of known parameters from tables the simulator's own per-call model draws."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from parasim.calibration.joint_fit import (
    StructureModel,
    chance_agreement,
    design_strata,
    design_theta,
    fit_agreement,
    fit_correctness,
    fit_design_shift,
    structure_pool,
    temperature_spread,
    zipf_exponent,
)
from parasim.calibration.joint_stats import joint_statistics, majority_vote, matrix_statistics, outcome_matrices
from parasim.calibration.simulate import simulated_consensus, simulated_outcomes
from parasim.pools.pool import PoolSpec, expected_accuracy, parse_pool, pool_file, solve_skill
from parasim.tasks.suites import BENCHMARK_INDEX, BENCHMARKS


def _table() -> dict:
    # two models on four questions, one sample each; B repeats A's wrong answer on q3
    return {"model": ["A"] * 4 + ["B"] * 4, "question": ["q1", "q2", "q3", "q4"] * 2,
            "correct": [1, 0, 0, 1, 1, 1, 0, 0], "answer": ["x", "y", "z", "x", "x", "x", "z", "w"]}


def test_statistics_of_a_hand_made_table() -> None:
    st = joint_statistics(_table())[""]
    assert st["accuracy"] == {"A": 0.5, "B": 0.5}
    # phi of (1,0,0,1) and (1,1,0,0): covariance 0 -> 0
    assert st["phi"]["A|B"] == pytest.approx(0.0)
    assert st["oracle"]["A|B"] == pytest.approx(0.75)  # q1, q2, q4
    assert st["oracle_gain"]["A|B"] == pytest.approx(0.25)
    assert st["same_wrong"]["A|B"] == 1.0 and st["same_wrong_pairs"]["A|B"] == 1  # q3 only: both wrong, both "z"
    assert st["vote"] == {} and st["spread"] == {}


def test_repeated_samples_give_votes_and_spread() -> None:
    table = {"model": ["A"] * 3, "question": ["q1", "q2", "q3"], "correct": [1.0, 0.0, 0.6], "n_samples": [5, 5, 5]}
    st = joint_statistics(table)[""]
    assert st["spread"]["A"] == {"zero": pytest.approx(1 / 3), "one": pytest.approx(1 / 3),
                                 "between": pytest.approx(1 / 3), "samples": 5}
    # 3 of 5 samples right: a majority of 3 drawn without replacement is right with 7/10
    assert majority_vote(np.array([3]), np.array([5]), 3)[0] == pytest.approx(7 / 10)
    assert st["vote"]["A"]["3"] == pytest.approx((1 + 0 + 0.7) / 3)
    assert st["vote"]["A"]["5"] == pytest.approx((1 + 0 + 1) / 3)


def test_bad_rows_are_refused_with_the_row() -> None:
    with pytest.raises(ValueError, match=r"row 1: correct = 1.5"):
        outcome_matrices({"model": ["A", "A"], "question": ["1", "2"], "correct": [1.0, 1.5]})
    with pytest.raises(ValueError, match="column 'question' is missing"):
        outcome_matrices({"model": ["A"], "correct": [1.0]})


def _base() -> dict:
    with open(pool_file("paramanager"), encoding="utf-8") as f:
        return json.load(f)


def _theta(spec: PoolSpec, bench: str, m: int) -> float:
    b = BENCHMARKS[BENCHMARK_INDEX[bench]]
    return float(spec.skill[m, BENCHMARK_INDEX[bench]] + spec.bonus[0, int(b.domain)] - b.mu)


def test_structure_pool_sets_theta_and_families() -> None:
    models = [StructureModel("a", 0.5, 1.0, 0.7, 0.5, "F", 0.4, 0.3),
              StructureModel("b", -1.0, 1.0, 0.7, 0.5, "F", 0.4), StructureModel("c", 0.0, 2.0, 0.6, 0.2)]
    spec = parse_pool(structure_pool(_base(), "LiveCodeBench", models, "assumed"))
    assert [round(_theta(spec, "LiveCodeBench", m), 6) for m in range(3)] == [0.5, -1.0, 0.0]
    assert list(spec.family) == [0, 0, -1] and list(spec.family_share) == [0.4, 0.4, 0.0]
    assert list(spec.family_wrong) == [0.3, 0.0, 0.0]


def test_family_members_share_effects_in_the_simulator() -> None:
    """Two family members agree with each other more often than with a third model of the same accuracy."""
    models = [StructureModel("a", 0.0, 3.0, 0.7, 0.0, "F", 0.8), StructureModel("b", 0.0, 3.0, 0.7, 0.0, "F", 0.8),
              StructureModel("c", 0.0, 3.0, 0.7, 0.0)]
    om = simulated_outcomes(parse_pool(structure_pool(_base(), "LiveCodeBench", models, "assumed")), "LiveCodeBench",
                            4000, sigma=1.0, seed=1)
    phi = matrix_statistics(om)["phi"]
    assert phi["a|b"] > phi["a|c"] + 0.2 and phi["a|b"] > phi["b|c"] + 0.2


def test_kind_members_share_effects_across_families_in_the_simulator() -> None:
    """Two models of one kind and different families agree more often than with a model of the other kind; with the
    kind share at 0 the kind names change no draw (a pool without kinds consumes its stream as before)."""
    def table(share: float, named: bool = True) -> object:
        models = [StructureModel("a", 0.0, 3.0, 0.7, 0.0, "F", 0.0, kind="r" if named else None, kind_share=share),
                  StructureModel("b", 0.0, 3.0, 0.7, 0.0, "G", 0.0, kind="r" if named else None, kind_share=share),
                  StructureModel("c", 0.0, 3.0, 0.7, 0.0, "F2", 0.0, kind="c" if named else None, kind_share=share)]
        return simulated_outcomes(parse_pool(structure_pool(_base(), "LiveCodeBench", models, "assumed")),
                                  "LiveCodeBench", 4000, sigma=1.0, seed=1)

    phi = matrix_statistics(table(0.8))["phi"]
    assert phi["a|b"] > phi["a|c"] + 0.2 and phi["a|b"] > phi["b|c"] + 0.2
    assert np.array_equal(table(0.0).hits, table(0.0, named=False).hits)


def test_pool_refuses_shares_over_one_variance() -> None:
    raw = structure_pool(_base(), "LiveCodeBench", [StructureModel("a", 0.0, 1.0, 0.7, 0.0, "F", 0.6, kind="r",
                                                                   kind_share=0.5),
                                                    StructureModel("b", 0.0, 1.0, 0.7, 0.0)], "assumed")
    with pytest.raises(ValueError, match=r"models\[0\]\.interaction\.kind_share: family_share \+ kind_share must "
                                         r"be at most 1"):
        parse_pool(raw)


def test_families_must_nest_in_kinds() -> None:
    om = simulated_outcomes("paramanager", "LiveCodeBench", 20, seed=0)
    names = list(om.models)
    with pytest.raises(ValueError, match="families must nest in kinds"):
        fit_correctness(om, {names[0]: "F", names[1]: "F"}, kind={names[0]: "r", names[1]: "c"})


@pytest.mark.slow
def test_correctness_fit_recovers_a_kind_share() -> None:
    """Two kinds, one of them with two families: sigma, tau, w and the kind share v within 3 SEs of the truth."""
    models = [StructureModel("a", 1.0, 2.0, 0.7, 0.5, "F", 0.3, kind="r", kind_share=0.3),
              StructureModel("b", -0.5, 2.0, 0.7, 0.5, "F", 0.3, kind="r", kind_share=0.3),
              StructureModel("c", 0.0, 2.0, 0.7, 0.5, kind="r", kind_share=0.3),
              StructureModel("d", 2.0, 2.0, 0.7, 0.5, kind="c", kind_share=0.3),
              StructureModel("e", 0.5, 2.0, 0.7, 0.5, kind="c", kind_share=0.3)]
    spec = parse_pool(structure_pool(_base(), "LiveCodeBench", models, "assumed"))
    om = simulated_outcomes(spec, "LiveCodeBench", 700, 6, models=[m.name for m in models], sigma=3.0, seed=11)
    fit = fit_correctness(om, {"a": "F", "b": "F"}, kind={m.name: m.kind for m in models})
    assert fit.estimate.converged
    for got, se, truth in ((fit.sigma, fit.sigma_se, 3.0), (fit.tau, fit.tau_se, 2.0), (fit.share, fit.share_se, 0.3),
                           (fit.kind_share, fit.kind_share_se, 0.3)):
        assert abs(got - truth) < 3 * se and se < 0.5, (got, se, truth)


@pytest.mark.slow
def test_correctness_fit_recovers_simulated_parameters() -> None:
    """sigma, tau, the family share and every theta within 3 SEs of the values the simulator drew from."""
    models = [StructureModel("a", 1.0, 2.0, 0.7, 0.5, "F", 0.5), StructureModel("b", -0.5, 2.0, 0.7, 0.5, "F", 0.5),
              StructureModel("c", 0.0, 2.0, 0.7, 0.5), StructureModel("d", 2.0, 2.0, 0.7, 0.5)]
    spec = parse_pool(structure_pool(_base(), "LiveCodeBench", models, "assumed"))
    om = simulated_outcomes(spec, "LiveCodeBench", 800, 6, models=["a", "b", "c", "d"], sigma=3.0, seed=7)
    fit = fit_correctness(om, {"a": "F", "b": "F"})
    assert fit.estimate.converged
    assert abs(fit.sigma - 3.0) < 3 * fit.sigma_se and fit.sigma_se < 0.5
    assert abs(fit.tau - 2.0) < 3 * fit.tau_se and fit.tau_se < 0.5
    assert abs(fit.share - 0.5) < 3 * fit.share_se and fit.share_se < 0.2
    truth = np.array([m.theta for m in models])
    assert np.all(np.abs(fit.theta - truth) < 3 * fit.theta_se), (fit.theta, fit.theta_se)


def test_agreement_fit_recovers_the_accuracy_curve() -> None:
    """Wrong answers drawn with kappa * affinity on a curve sigmoid(a0 + a1 logit(acc)) and a family term d: the fit
    recovers a0, a1 and d within 3 sandwich SEs."""
    a0, a1, d, kappa, tau, sigma = -0.2, 0.8, 0.25, 0.9, 1.0, 1.5
    thetas = [-1.5, -0.5, 0.3, 1.0, 1.8, 2.5]
    mu = BENCHMARKS[BENCHMARK_INDEX["MMLU-Pro"]].mu
    models = []
    for i, th in enumerate(thetas):
        acc = float(expected_accuracy(np.array(th + mu), np.array(mu), np.array(math.hypot(sigma, tau))))
        c = 1 / (1 + math.exp(-(a0 + a1 * math.log(acc / (1 - acc)))))
        g = c / kappa
        fam = "F" if i in (1, 2) else None
        models.append(StructureModel(f"m{i}", th, tau, kappa, g, fam, 0.0, d / (kappa * (1 - g)) if fam else 0.0))
    spec = parse_pool(structure_pool(_base(), "MMLU-Pro", models, "assumed"))
    om = simulated_outcomes(spec, "MMLU-Pro", 6000, models=[m.name for m in models], sigma=sigma, seed=3)
    s_chance = chance_agreement(BENCHMARKS[BENCHMARK_INDEX["MMLU-Pro"]].zipf_s, 10)
    fit = fit_agreement(om, s_chance, {"m1": "F", "m2": "F"})
    got, se = np.array([fit.a0, fit.a1, fit.d]), fit.se
    assert np.all(np.abs(got - [a0, a1, d]) < 3 * se) and np.all(se < 0.5), (got, se)


def test_zipf_exponent_inverts_the_chance_agreement() -> None:
    w = np.arange(1, 10, dtype=np.float64) ** -1.0
    assert chance_agreement(1.0, 10) == pytest.approx(float(((w / w.sum()) ** 2).sum()))
    assert chance_agreement(0.0, 16) == pytest.approx(1 / 15)
    for s in (0.0, 0.4, 0.85, 2.5):
        assert zipf_exponent(chance_agreement(s, 16), 16) == pytest.approx(s, abs=1e-6)
    with pytest.raises(ValueError, match=r"outside \[0.0667, 1\) for 16 answers"):
        zipf_exponent(0.05, 16)


def test_agreement_fit_recovers_a_free_form_answer_space() -> None:
    """Free-form answers whose distractor weights have Zipf exponent 0.6 (not the catalogue's 1.2): with S fitted,
    S and the curve come back within 3 sandwich SEs, and the exponent from S near 0.6."""
    a0, a1, kappa, tau, sigma, zipf = -1.0, 1.0, 0.8, 1.0, 1.5, 0.6
    models = []
    for i, th in enumerate([-2.0, -1.0, -0.3, 0.5, 1.2, 2.0, 2.8]):
        acc = float(expected_accuracy(np.array(th), np.array(0.0), np.array(math.hypot(sigma, tau))))
        c = 1 / (1 + math.exp(-(a0 + a1 * math.log(acc / (1 - acc)))))
        models.append(StructureModel(f"m{i}", th, tau, kappa, c / kappa))
    spec = parse_pool(structure_pool(_base(), "generic_math", models, "assumed"))
    om = simulated_outcomes(spec, "generic_math", 6000, models=[m.name for m in models], sigma=sigma, zipf_s=zipf,
                            seed=5)
    fit = fit_agreement(om, None, answers=16)
    truth = chance_agreement(zipf, 16)
    assert abs(fit.s_chance - truth) < 3 * fit.s_se and fit.s_se < 0.03, (fit.s_chance, fit.s_se, truth)
    assert abs(fit.a0 - a0) < 3 * fit.se[0] and abs(fit.a1 - a1) < 3 * fit.se[1], (fit.a0, fit.a1, fit.se)
    assert abs(zipf_exponent(fit.s_chance, 16) - zipf) < 0.25
    with pytest.raises(ValueError, match="fitting S needs the answer count"):
        fit_agreement(om, None)


def test_simulated_same_wrong_rate_follows_the_zipf_override() -> None:
    """Models without a preferred answer (kappa 0) agree on a wrong answer at the weights' chance rate S."""
    models = [StructureModel("a", -1.0, 0.5, 0.0, 0.0), StructureModel("b", -1.0, 0.5, 0.0, 0.0)]
    spec = parse_pool(structure_pool(_base(), "generic_math", models, "assumed"))
    for zipf in (0.3, 1.5):
        st = matrix_statistics(simulated_outcomes(spec, "generic_math", 20000, sigma=1.0, zipf_s=zipf, seed=2))
        assert st["same_wrong"]["a|b"] == pytest.approx(chance_agreement(zipf, 16), abs=0.02)
    with pytest.raises(ValueError, match="zipf_s must be a finite number >= 0"):
        simulated_outcomes(spec, "generic_math", 10, zipf_s=-1.0)


def test_consensus_is_the_plurality_of_the_samples() -> None:
    """One sample: the plurality is the sample. Many samples of a model right with p_q > 1/2 on every question
    (no spread): the plurality is right far more often than one sample; with p_q spread to near 0 or 1 it gains
    little."""
    flat = [StructureModel("a", 0.8, 0.0, 0.0, 0.0), StructureModel("b", 0.8, 0.0, 0.0, 0.0)]
    spec = parse_pool(structure_pool(_base(), "generic_math", flat, "assumed"))
    om, plural = simulated_consensus(spec, "generic_math", 500, 1, sigma=1e-6, seed=4)
    assert np.array_equal(plural, om.hits)
    om, plural = simulated_consensus(spec, "generic_math", 500, 15, sigma=1e-6, seed=4)
    assert om.rate.mean() == pytest.approx(1 / (1 + math.exp(-0.8)), abs=0.02)
    assert plural.mean() > 0.95
    spread = [StructureModel("a", 0.8, 10.0, 0.0, 0.0), StructureModel("b", 0.8, 10.0, 0.0, 0.0)]
    om, plural = simulated_consensus(parse_pool(structure_pool(_base(), "generic_math", spread, "assumed")),
                                     "generic_math", 2000, 15, sigma=20.0, seed=4)
    assert abs(plural.mean() - om.rate.mean()) < 0.03


def test_temperature_spread_scales_a_spread_by_the_temperature_ratio() -> None:
    """A spread fitted at T_ref is spread * T_ref / T at T: tighter when hotter, unchanged at T_ref, and carried
    there and back it is the same; a zero spread stays zero; temperatures must be positive and spreads >= 0."""
    assert temperature_spread(5.0, 0.2, 1.0) == pytest.approx(1.0)
    assert temperature_spread(5.0, 0.2, 0.6) == pytest.approx(5.0 / 3.0)
    assert temperature_spread(5.0, 0.6, 0.6) == pytest.approx(5.0)
    assert temperature_spread(temperature_spread(5.0, 0.2, 0.7), 0.7, 0.2) == pytest.approx(5.0)
    assert temperature_spread(0.0, 0.2, 1.0) == 0.0
    for bad in ((1.0, 0.0, 1.0), (1.0, 0.2, -1.0), (1.0, float("nan"), 1.0), (-1.0, 0.2, 1.0)):
        with pytest.raises(ValueError, match="temperature_spread"):
            temperature_spread(*bad)


def test_a_hotter_temperature_makes_a_vote_gain_more() -> None:
    """What the law does to the consensus check: the same expected accuracy with the spreads scaled down (sampling
    hotter than the fit's temperature) leaves p_qm nearer 1/2 on more questions, so the plurality of 15 samples
    gains more over one sample."""
    def gain(sd: float) -> float:
        theta = float(solve_skill(np.array(0.6), np.array(0.0), np.array(math.hypot(sd, sd))))
        models = [StructureModel("a", theta, sd, 0.0, 0.0), StructureModel("b", theta, sd, 0.0, 0.0)]
        om, plural = simulated_consensus(parse_pool(structure_pool(_base(), "generic_math", models, "assumed")),
                                         "generic_math", 3000, 15, sigma=sd, seed=5)
        return float(plural[:, 0].mean() - om.rate[:, 0].mean())

    cold, hot = gain(6.0), gain(temperature_spread(6.0, 0.2, 0.6))
    assert hot > cold + 0.03


@pytest.mark.slow
def test_a_design_stratum_and_its_difficulty_shift_are_recovered() -> None:
    """A table drawn with the script's design (a harder stratum of questions two of three models were not run on):
    ``design_strata`` finds its strata and patterns, and the script's two stages (the structure on every question,
    then the shift with every theta) recover the shift within 3 SEs."""
    import joint_structure as js  # scripts/ is on the tests' path (pyproject's pythonpath)

    models = [StructureModel("a", 1.0, 1.0, 0.7, 0.5), StructureModel("b", -0.5, 1.0, 0.7, 0.5),
              StructureModel("c", 0.5, 1.0, 0.7, 0.5)]
    observed = np.array([[True, True, True], [True, False, False]])
    design = js.Design(_base(), "LiveCodeBench", models, np.array([0.0, 1.5]), observed, np.array([600, 300]),
                       [4, 4, 4], 2.0, None)
    om = design.draw(1, 11)
    strata, seen = design_strata(om)
    assert np.bincount(strata).tolist() == [600, 300] and (seen == observed).all()
    assert (om.samples[strata == 1][:, 1:] == 0).all() and (om.samples[strata == 1][:, 0] == 4).all()
    pooled = fit_correctness(om)  # the script's two stages: the structure on every question, then the shift
    shift, se = fit_design_shift(om, pooled, strata)
    assert shift[0] == 0.0 and abs(shift[1] - 1.5) < 3 * se[1] and 0 < se[1] < 0.5, (shift, se)


def test_design_theta_inverts_the_accuracy_over_the_strata_a_model_answered() -> None:
    sd, shifts, theta = 2.5, np.array([0.0, 1.2]), np.array([0.3, -1.0])
    weights = np.array([[700.0, 700.0], [300.0, 0.0]])  # the second model never answered stratum 1
    acc = np.array([sum(weights[g, j] / weights[:, j].sum()
                        * float(expected_accuracy(np.array(theta[j] - shifts[g]), np.array(0.0), np.array(sd)))
                        for g in range(2)) for j in range(2)])
    np.testing.assert_allclose(design_theta(acc, weights, shifts, sd), theta, atol=1e-8)
    one = design_theta(acc, weights[:1], shifts[:1], sd)
    np.testing.assert_array_equal(one, solve_skill(acc, np.array(0.0), np.array(sd)))
