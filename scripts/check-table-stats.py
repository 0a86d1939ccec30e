#!/usr/bin/env python3
"""Cross-checks the engine's table statistics against Python's survey-statistics packages.

The native helper (target/npm/native_crosstab, built by scripts/build-npm.sh) writes the
20,000-respondent demo survey and computes tables from it, exactly as `Survey.table` does;
this script recomputes every cell from the respondent CSV with pandas and compares:

- the weighted total and its standard error with samplics' `TaylorEstimator(total)` for a
  design with weights only (each respondent its own PSU, with replacement) over the group's
  respondents (or all), the base a domain of it (y is 0 outside the base: R's
  `survey::svytotal(~y, subset(svydesign(ids = ~1, weights = ~w), base))`), the interval as
  T ± qnorm(1 − α/2)·SE (scipy) at each confidence (90, 95, 99%), the RSE, Σw², n_eff,
  respondents, the percentages and index;
- the standard errors of the vertical and horizontal percentages with samplics'
  `TaylorEstimator(ratio)` (R's `svyratio`) of the cell over the column, and over the row,
  and the intervals the app draws for them (the helper prints them beside each table) with
  statsmodels' `proportion_confint(method="wilson")` at the effective size n* = p(1-p)/SE^2
  of samplics' error, at most the column's (or row's) respondents (a share of 0% or 100%
  at the column's (or row's) Kish size);
- the column test with statsmodels' `proportions_ztest` (pooled two-proportion z-test) on
  effective sample sizes, the column against the rest of the base, where both have an
  effective size of at least 30 and the row holds at least 5 (effective) respondents of
  the two and leaves at least 5 out, significant where its p-value is under α; and the
  pairwise test (`higherThan`), the same z-test between every two columns with no
  respondent in common, its p-value under α, or corrected by statsmodels' `multipletests`
  (Bonferroni's or Holm's method) for the m such pairs whose columns both have an
  effective size of 30 or more (a pair a rare row leaves untested counted with p = 1).

Everything to 1e-9 relative. R itself is not installable here (CRAN is unreachable).
Usage: check-table-stats.py [NATIVE_HELPER]   (run with the venv scripts/setup makes:
~/.cache/crosstab-stats-venv/bin/python, numpy pandas scipy statsmodels samplics)
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from samplics import PopParam, TaylorEstimator  # noqa: E402
from scipy.stats import norm  # noqa: E402
from statsmodels.stats.multitest import multipletests  # noqa: E402
from statsmodels.stats.proportion import proportion_confint, proportions_ztest  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NATIVE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/npm/native_crosstab")
RELATIVE = 1e-9
# Shares' intervals compared; of them, those whose normal interval would pass below 0,
# those at 0% or 100%, and those whose n* was more than the whole's respondents (counts,
# so that a check that compares none of a kind fails).
INTERVALS_CHECKED = [0, 0, 0, 0]
# (confidence %, correction of the letters): each design's table is asked at each.
SETTINGS = [(95, "none"), (90, "none"), (99, "none"), (95, "bonferroni"), (95, "holm")]


def mask(data, expression):
    """The respondents an expression of the forms used here selects (missing: none)."""
    if expression == "*":
        return pd.Series(True, index=data.index)
    if m := re.fullmatch(r"(\w+) BETWEEN (\S+) AND (\S+)", expression):
        column = data[m[1]]
        return (column >= float(m[2])) & (column <= float(m[3]))
    if m := re.fullmatch(r"(\w+) (=|>=|<=) (\S+)", expression):
        column, value = data[m[1]], float(m[3])
        return {"=": column == value, ">=": column >= value, "<=": column <= value}[m[2]]
    if m := re.fullmatch(r"\((.+)\) AND \((.+)\)", expression):
        return mask(data, m[1]) & mask(data, m[2])
    raise ValueError(f"not an expression this check reads: {expression}")


def close(what, got, expected):
    if expected is None or got is None:
        assert got is None and expected is None, f"{what}: got {got}, expected {expected}"
        return
    scale = max(abs(got), abs(expected))
    assert abs(got - expected) <= RELATIVE * scale, f"{what}: got {got!r}, expected {expected!r}"


def svytotal(y, w):
    """Total and standard error of y over the design, by samplics (which divides by the
    total, so an empty cell's 0 and 0 are written here)."""
    if not y.any():
        return 0.0, 0.0
    estimator = TaylorEstimator(PopParam.total)
    estimator.estimate(y=y.astype(float), samp_weight=w, remove_nan=False)
    return float(estimator.point_est), float(estimator.stderror)


def svyratio_se(y, x, w):
    """Standard error of the share Σwy / Σwx in percentage points, by samplics' ratio
    estimator (R's `svyratio`; `None` when x has no weight, 0 when y has no members)."""
    if float(w[x].sum()) <= 0:
        return None
    if not y.any():
        return 0.0
    estimator = TaylorEstimator(PopParam.ratio)
    estimator.estimate(y=y.astype(float), x=x.astype(float), samp_weight=w, remove_nan=False)
    return 100 * float(estimator.stderror)


def share_interval(share, se, whole, w, z):
    """The interval the app draws for a share (percent) of `whole` with error `se` (points),
    by statsmodels: Wilson's score interval at the effective size the error implies, n* =
    p(1 - p) / SE^2, but no more than the whole's respondents; a share of 0% or 100% (no
    spread) at the whole's Kish size; none without a share."""
    if share is None or se is None:
        return None
    p, variance = share / 100, (se / 100) ** 2
    if p == 0 or math.isclose(p, 1, rel_tol=1e-12):
        weights = w[whole.astype(bool)]
        p, n = round(p), weights.sum() ** 2 / (weights**2).sum()
        INTERVALS_CHECKED[2] += 1
    else:
        respondents = int(whole.astype(bool).sum())
        n = min(p * (1 - p) / variance, respondents)
        INTERVALS_CHECKED[3] += n == respondents
    low, high = proportion_confint(p * n, n, alpha=2 * norm.sf(z), method="wilson")
    return 100 * low, 100 * high


def check_cell(what, got, y, w, row, column, base_weight, threshold, z, intervals):
    total, se = svytotal(y, w)
    members = y.astype(bool)
    squares = float((w[members] ** 2).sum())
    assert got["resps"] == int(members.sum()), what
    close(f"{what} weight", got["weight"], total)
    close(f"{what} weightSquared", got["weightSquared"], squares)
    close(f"{what} effectiveN", got["effectiveN"], total**2 / squares if squares > 0 else None)
    close(f"{what} standardError", got["standardError"], se)
    close(f"{what} ciLow", got["ciLow"], total - z * se)
    close(f"{what} ciHigh", got["ciHigh"], total + z * se)
    rse = se / total if total != 0 else None
    close(f"{what} relativeStandardError", got["relativeStandardError"], rse)
    row_weight, column_weight = float(w[row].sum()), float(w[column].sum())
    vertical = 100 * total / column_weight if column_weight > 0 else None
    close(f"{what} verticalPct", got["verticalPct"], vertical)
    close(f"{what} horizontalPct", got["horizontalPct"], 100 * total / row_weight if row_weight > 0 else None)
    # A share of a total the cell is all of has no spread: samplics gives 0 up to rounding.
    shares = (("verticalPct", column_weight, column), ("horizontalPct", row_weight, row))
    for (share, whole_weight, whole), drawn in zip(shares, intervals):
        expected = svyratio_se(y, whole, w)
        if expected is not None and np.array_equal(y.astype(bool), whole.astype(bool)):
            assert got[share + "Se"] == 0.0 and expected < 1e-9, f"{what}: {got[share + 'Se']}, {expected}"
        else:
            close(f"{what} {share}Se", got[share + "Se"], expected)
        # The app's interval of the share, from the pandas share and samplics' error.
        value = 100 * total / whole_weight if whole_weight > 0 else None
        wilson = share_interval(value, expected, whole, w, z)
        assert (drawn is None) == (wilson is None), f"{what} {share} interval: {drawn} vs {wilson}"
        if wilson is not None:
            # At 0% statsmodels' lower end is 0 up to rounding (5e-18, say): absolute there.
            for end, got_end, want in (("low", drawn[0], wilson[0]), ("high", drawn[1], wilson[1])):
                assert abs(got_end - want) <= max(RELATIVE * abs(want), 1e-12), \
                    f"{what} {share} interval {end}: got {got_end!r}, expected {want!r}"
            INTERVALS_CHECKED[0] += 1
            INTERVALS_CHECKED[1] += value - z * expected < 0
    index = vertical / (100 * row_weight / base_weight) * 100 if vertical is not None and row_weight > 0 else None
    close(f"{what} index", got["index"], index)
    reasons = (["lowRespondents"] if members.sum() <= threshold else []) + (
        ["highRse"] if rse is None or rse > 0.3 else []
    )
    assert got["unstableReasons"] == reasons, f"{what}: {got['unstableReasons']} vs {reasons}"


def effective_size(side, w):
    """Kish's effective sample size of the respondents in `side`; None without weight."""
    weights = w[side]
    return weights.sum() ** 2 / (weights**2).sum() if weights.sum() > 0 else None


def two_sides_test(row, first, second, w, alpha):
    """[`two_sides_z`]'s test at level `alpha`: "higher", "lower" or None (not significant,
    or not tested)."""
    tested = two_sides_z(row, first, second, w)
    if tested is None:
        return None
    z, p = tested
    assert abs(p / alpha - 1) > 1e-6, f"p {p} too near {alpha} to decide"
    if p >= alpha:
        return None
    return "higher" if z > 0 else "lower"


def two_sides_z(row, first, second, w):
    """statsmodels' pooled z on effective sizes of the row's share of `first` against its
    share of `second` (disjoint), and its two-sided p-value; None when not tested (an
    effective size under 30, nothing to test, or a rare row)."""
    sizes = []
    shares = []
    for side in (first, second):
        size = effective_size(side, w)
        if size is None:
            return None
        sizes.append(size)
        shares.append(w[side & row].sum() / w[side].sum())
    if min(sizes) < 30:
        return None
    pooled = (sizes[0] * shares[0] + sizes[1] * shares[1]) / (sizes[0] + sizes[1])
    if pooled <= 0 or pooled >= 1:
        return None
    # A rare row is not tested: at least 5 (effective) respondents in and out of it.
    if min(sum(sizes) * pooled, sum(sizes) * (1 - pooled)) < 5:
        return None
    return proportions_ztest([shares[0] * sizes[0], shares[1] * sizes[1]], sizes)


def row_pairs_apart(row, column_masks, w, alpha, correction, m):
    """The pairs (a, b), a < b, of disjoint columns whose shares of `row` are apart at
    `alpha`, corrected for `m` pairs by `correction`, each with its z (a's share against
    b's)."""
    tested = [(a, b, *found) for a in range(len(column_masks)) for b in range(a + 1, len(column_masks))
              if not (column_masks[a] & column_masks[b]).any()
              and (found := two_sides_z(row, column_masks[a], column_masks[b], w)) is not None]
    if not tested:
        return {}
    p = [found[3] for found in tested]
    if correction == "none":
        adjusted = p
    else:
        # Pairs this row leaves untested are still of the family: p = 1 never rejects.
        assert m >= len(p), (m, len(p))
        adjusted = multipletests(p + [1.0] * (m - len(p)), alpha=alpha, method=correction)[1][: len(p)]
    apart = {}
    for (a, b, z, _), q in zip(tested, adjusted):
        assert abs(q / alpha - 1) > 1e-6, f"adjusted p {q} too near {alpha} to decide"
        if q < alpha:
            apart[(a, b)] = z
    return apart


def column_test(row, column, w, base, alpha):
    """The column against the rest of the base."""
    return two_sides_test(row, column, base & ~column, w, alpha)


def main():
    work = tempfile.mkdtemp(prefix="crosstab-table-stats-")
    try:
        check(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check(work):
    subprocess.run([NATIVE, "demo", work, "20000"], check=True, stdout=subprocess.DEVNULL)
    data = pd.read_csv(os.path.join(work, "respondents.csv"))
    flags = [c for c in data.columns if c.startswith("P_")][:8]
    # The last, a row of four respondents all aged 55 or more: the z-test alone would mark
    # it against the rest of the base, the rare-row rule leaves it untested.
    # Two more flags whose regions differ moderately: Holm's step-down gives them letters
    # Bonferroni's takes back.
    rows = [f"{flag} = 1" for flag in flags] + ["P_FAST_FOOD_02 = 1", "P_BEER_08 = 1"] + [
        "SMOKER = 1", "INCOME >= 5", "(AGE = 58) AND (INCOME = 1)"]
    columns = ["REGION = 1", "REGION = 2", "REGION = 3", "REGION = 4", "GENDER = 2",
               "AGE BETWEEN 18 AND 34", "AGE >= 55", "*"]
    designs = [("ADULTS", "*", None), ("WOMEN", "GENDER = 2", "3"), ("A18_34", "AGE BETWEEN 18 AND 34", None)]
    asked = [(design, setting) for design in designs for setting in SETTINGS]
    requests = [
        {"populationBase": base, "group": group, "confidence": confidence,
         "bonferroni": correction == "bonferroni", "holm": correction == "holm",
         "rows": [{"expression": r} for r in rows], "columns": [{"expression": c} for c in columns]}
        for (base, _, group), (confidence, correction) in asked
    ]
    with open(os.path.join(work, "requests.json"), "w") as out:
        json.dump(requests, out)
    answers = json.loads(subprocess.run(
        [NATIVE, "table-shares", os.path.join(work, "survey.toml"), os.path.join(work, "respondents.csv"),
         os.path.join(work, "requests.json")], check=True, capture_output=True, text=True).stdout)
    figures = 0
    pairs = {setting: 0 for setting in SETTINGS}
    verdicts = {setting: set() for setting in SETTINGS}
    arrows = {setting: 0 for setting in SETTINGS}
    for ((base, base_expression, group), setting), answer in zip(asked, answers):
        assert answer["status"] == 200, answer
        table = answer["body"]
        shares = answer["shareIntervals"]
        confidence, correction = setting
        said = {(False, False): "none", (True, False): "bonferroni", (False, True): "holm"}[
            (table["bonferroni"], table["holm"])]
        assert (table["confidence"], said) == setting, (table["confidence"], said)
        alpha = 1 - confidence / 100
        z = norm.ppf(1 - alpha / 2)
        sample = data if group is None else data[data["REGION"] == float(group)]
        w = sample["WEIGHT"].to_numpy(dtype=float)
        everyone = mask(sample, base_expression).to_numpy()
        base_weight = float(w[everyone].sum())
        threshold = table["unstableMaxResps"]
        row_masks = [mask(sample, r).to_numpy() & everyone for r in rows]
        column_masks = [mask(sample, c).to_numpy() & everyone for c in columns]
        # The corrections' m: the disjoint pairs of columns whose effective sizes are tested (30+).
        def tested(side):
            size = effective_size(side, w)
            return size is not None and size >= 30
        compared_pairs = sum(
            1 for a in range(len(columns)) for b in range(a + 1, len(columns))
            if tested(column_masks[a]) and tested(column_masks[b])
            and not (column_masks[a] & column_masks[b]).any())
        assert table["comparedPairs"] == compared_pairs, (table["comparedPairs"], compared_pairs)
        for r, row in enumerate(row_masks):
            apart = row_pairs_apart(row, column_masks, w, alpha, correction, compared_pairs)
            for c, column in enumerate(column_masks):
                what = f"{base}/{group} [{rows[r]}] x [{columns[c]}]"
                cell = table["cells"][r][c]
                check_cell(what, cell, row & column, w, row, column, base_weight, threshold, z,
                           shares["cells"][r][c])
                expected = column_test(row, column, w, everyone, alpha)
                assert cell["significance"] == expected, f"{what}: {cell['significance']} vs {expected}"
                verdicts[setting].add(expected)
                arrows[setting] += expected is not None
                higher = [other for other in range(len(column_masks))
                          if (other > c and apart.get((c, other), 0) > 0)
                          or (other < c and apart.get((other, c), 0) < 0)]
                assert cell.get("higherThan", []) == higher, f"{what}: higherThan {cell.get('higherThan')} vs {higher}"
                pairs[setting] += len(higher)
                figures += 1
            check_cell(f"{base} [{rows[r]}] total", table["rowTotals"][r], row, w, row, everyone,
                       base_weight, threshold, z, shares["rowTotals"][r])
        for c, column in enumerate(column_masks):
            compared = column.any() and any(
                other != c and mask_b.any() and not (column & mask_b).any()
                for other, mask_b in enumerate(column_masks))
            assert table["columns"][c].get("compared", False) == compared, f"{base} [{columns[c]}] compared"
            check_cell(f"{base} total x [{columns[c]}]", table["columnTotals"][c], column, w,
                       everyone, column, base_weight, threshold, z, shares["columnTotals"][c])
        check_cell(f"{base} total", table["total"], everyone, w, everyone, everyone, base_weight, threshold, z,
                   shares["total"])
    at_95 = (95, "none")
    intervals, rare, ends, capped = INTERVALS_CHECKED
    assert intervals > 0 and rare > 0 and ends > 0 and capped > 0, INTERVALS_CHECKED
    assert {"higher", "lower", None} <= verdicts[at_95], verdicts
    assert pairs[at_95] > 0, "the pairwise test found no column apart: the check checks nothing"
    # The levels and the correction decide some verdicts, so they are checked too.
    assert arrows[(90, "none")] > arrows[at_95] > arrows[(99, "none")], arrows
    assert pairs[(95, "bonferroni")] < pairs[at_95], pairs
    assert pairs[(95, "bonferroni")] < pairs[(95, "holm")] <= pairs[at_95], pairs
    print(f"table statistics: {figures} cells of {len(asked)} tables (and their totals; {len(designs)} designs at "
          f"{', '.join(f'{c}%' + ('' if k == 'none' else f' with {k.title()}') for c, k in SETTINGS)}) agree with "
          f"samplics (svytotal, svyratio), statsmodels (proportions_ztest, multipletests; column pairs apart: "
          f"{', '.join(str(pairs[s]) for s in SETTINGS)}; proportion_confint: {intervals} shares' Wilson "
          f"intervals, {rare} where the normal one passes below 0, {ends} at 0% or 100%, {capped} with n* "
          f"bounded by the respondents) and scipy to {RELATIVE:g} relative")


if __name__ == "__main__":
    main()
