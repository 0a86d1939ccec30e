#!/usr/bin/env python3
"""Times crosstab's cold-query benchmark queries in DuckDB and Polars and checks every figure.

Run by scripts/bench-engine-peers after `cargo bench -p crosstab-engine --bench peers`,
which wrote the data (raw columns), the queries (as expression trees) and crosstab's
timings and results to RESULTS (crosstab-results.json). Usage:
    bench_engine_peers.py RESULTS
Both peers hold the table in memory: DuckDB as a native table, Polars as a DataFrame
queried lazily. Each peer query runs three times and keeps its best time (they have no
result caches to defeat); crosstab's figure is its first and only run of a never-seen
target (a shape's figure the median over its targets, as the peers' is), and the figures
checked are that run's answer. Every count must equal
crosstab's, every weight sum must agree to f64 rounding, and crosstab's sum must be the
true sum of the two-decimal weights rounded once to f64; the two-target requests' figures
are checked the same way.
"""

import json
import math
import os
import statistics
import sys
import time
from fractions import Fraction

import duckdb
import numpy as np
import polars as pl

ISSUE_SHAPES = 5  # the issue's five shapes come first; the deeper ones follow
RUNS = 3


def number(value):
    return int(value) if float(value).is_integer() else float(value)


def sql(node):
    if "all" in node:
        return "true"
    if "cmp" in node:
        var, op, value = node["cmp"]
        return f'"{var}" {op} {number(value)}'
    if "in" in node:
        var, values = node["in"]
        return f'"{var}" IN ({", ".join(str(number(v)) for v in values)})'
    if "between" in node:
        var, low, high = node["between"]
        return f'"{var}" BETWEEN {number(low)} AND {number(high)}'
    if "not" in node:
        # crosstab's NOT is the complement within all respondents: a missing answer
        # fails the comparison, so it passes the NOT (SQL's NULL would drop it).
        return f"NOT coalesce(({sql(node['not'])}), false)"
    if "and" in node:
        return "(" + " AND ".join(sql(n) for n in node["and"]) + ")"
    if "or" in node:
        return "(" + " OR ".join(sql(n) for n in node["or"]) + ")"
    raise ValueError(node)


def polars(node):
    if "all" in node:
        return pl.lit(True)
    if "cmp" in node:
        var, op, value = node["cmp"]
        col, v = pl.col(var), number(value)
        return {
            "=": col == v,
            "!=": col != v,
            "<": col < v,
            "<=": col <= v,
            ">": col > v,
            ">=": col >= v,
        }[op]
    if "in" in node:
        var, values = node["in"]
        return pl.col(var).is_in([number(v) for v in values])
    if "between" in node:
        var, low, high = node["between"]
        return pl.col(var).is_between(number(low), number(high))
    if "not" in node:
        return ~polars(node["not"]).fill_null(False)
    if "and" in node:
        items = [polars(n) for n in node["and"]]
        out = items[0]
        for item in items[1:]:
            out = out & item
        return out
    if "or" in node:
        items = [polars(n) for n in node["or"]]
        out = items[0]
        for item in items[1:]:
            out = out | item
        return out
    raise ValueError(node)


BASES_SQL = {"ADULTS": "true", "WOMEN": '"GENDER" = 2'}
BASES_POLARS = {"ADULTS": pl.lit(True), "WOMEN": pl.col("GENDER") == 2}


def best_us(fn):
    best, result = math.inf, None
    for _ in range(RUNS):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e6, result


def fmt_us(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} µs"


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def load(data_dir):
    meta = json.load(open(os.path.join(data_dir, "columns.json")))
    columns = {"W": np.fromfile(os.path.join(data_dir, "W.f64"), dtype="<f8")}
    for name in meta["columns"]:
        columns[name] = np.fromfile(os.path.join(data_dir, f"{name}.i16"), dtype="<i2")
    frame = pl.DataFrame(columns)
    # -1 marks a missing answer.
    frame = frame.with_columns(
        [pl.when(pl.col(c) == -1).then(None).otherwise(pl.col(c)).alias(c) for c in meta["columns"]]
    ).rechunk()
    return frame


class Checker:
    """Checks crosstab's figures for a target against DuckDB, Polars and the exact sum."""

    def __init__(self, frame, con, n):
        self.frame, self.con, self.n = frame, con, n
        self.weights = frame["W"].to_numpy()
        self.lazy = frame.lazy()
        self.failures = []
        self.exact = 0
        self.total = 0

    def peers(self, base, target):
        """The peers' (count, sum) timed: DuckDB's and Polars' best of three, in µs."""
        where = f"{BASES_SQL[base]} AND {sql(target)}"
        d_us, (d_count, d_sum) = best_us(
            lambda: self.con.execute(f"SELECT count(*), sum(W) FROM t WHERE {where}").fetchone()
        )
        predicate = BASES_POLARS[base] & polars(target)
        p_us, p_frame = best_us(lambda: self.lazy.filter(predicate).select(pl.len(), pl.col("W").sum()).collect())
        p_count, p_sum = p_frame.row(0)
        return (d_us, d_count, d_sum or 0.0), (p_us, p_count, p_sum or 0.0)

    def check(self, label, base, query, duck=None, pol=None):
        """Compares `query`'s count and weight (crosstab's timed answer) with the peers'
        (run here if not given) and with the true sum rounded once."""
        if duck is None:
            duck, pol = self.peers(base, query["ast"])
        predicate = BASES_POLARS[base] & polars(query["ast"])
        # The truth: the selected two-decimal weights summed exactly.
        mask = self.frame.select(predicate.fill_null(False)).to_series().to_numpy()
        cents = int(np.round(self.weights[mask] * 100).astype(np.int64).sum())
        true_sum = float(Fraction(cents, 100))
        label = f"{self.n} {label}: {query['target']}"
        ours = query["weight"]
        self.total += 1
        self.exact += ours == true_sum
        for peer, (_, count, wsum) in (("DuckDB", duck), ("Polars", pol)):
            if count != query["count"]:
                self.failures.append(f"{label}: {peer} counts {count}, crosstab {query['count']}")
            elif abs(wsum - ours) > 1e-12 * max(abs(ours), 1.0) * max(math.log2(self.n), 1.0):
                self.failures.append(f"{label}: {peer} sums {wsum!r}, crosstab {ours!r}")
        # The weights are decimals, summed exactly: the figure is the true sum rounded
        # once, to the last bit.
        if ours != true_sum:
            self.failures.append(f"{label}: crosstab sums {ours!r}, the true sum rounded is {true_sum!r}")


def main():
    results = json.load(open(sys.argv[1]))
    failures = []
    summary = []
    for size in results:
        n = size["respondents"]
        frame = load(size["data_dir"])
        # DuckDB loads the same frame through Parquet into a table of its own, in memory.
        parquet = os.path.join(size["data_dir"], "frame.parquet")
        frame.write_parquet(parquet)
        con = duckdb.connect()
        con.execute(f"CREATE TABLE t AS SELECT * FROM read_parquet('{parquet}')")
        checker = Checker(frame, con, n)
        read_us = size["weight_read_us"]
        print(f"\n== {n:,} respondents; one read of the weight column (crosstab's bench): {fmt_us(read_us)} ==")
        print(
            f"{'shape':<44} {'crosstab cold':>13} {'warm':>10} {'DuckDB':>10} {'Polars':>10}"
            f" {'vs DuckDB':>9} {'vs Polars':>9} {'/ read':>7}"
        )
        rows = []
        for shape in size["shapes"]:
            duck_times, polars_times = [], []
            for query in shape["queries"]:
                duck, pol = checker.peers(shape["base"], query["ast"])
                duck_times.append(duck[0])
                polars_times.append(pol[0])
                checker.check(shape["label"], shape["base"], query, duck, pol)
            cold = shape["cold_us"]
            duck = statistics.median(duck_times)
            pol = statistics.median(polars_times)
            rows.append((shape["label"], cold, duck, pol))
            print(
                f"{shape['label']:<44} {fmt_us(cold):>13} {fmt_us(shape['warm_us']):>10} {fmt_us(duck):>10}"
                f" {fmt_us(pol):>10} {duck / cold:>8.2f}x {pol / cold:>8.2f}x {cold / read_us:>6.2f}x"
            )
        for label, chosen in (("the issue's five shapes", rows[:ISSUE_SHAPES]), ("all eight shapes", rows)):
            g_cold = geomean([r[1] for r in chosen])
            g_duck = geomean([r[2] / r[1] for r in chosen])
            g_pol = geomean([r[3] / r[1] for r in chosen])
            line = (
                f"{n:,} respondents, cold, geometric mean over {label}: {fmt_us(g_cold)}; "
                f"{g_duck:.2f}x faster than DuckDB, {g_pol:.2f}x faster than Polars, "
                f"{g_cold / read_us:.2f}x the weight-column read"
            )
            print(line)
            summary.append(line)
        for request in size["two_targets"]:
            for query in request:
                checker.check("two targets", "ADULTS", query)
        low, high = size["two_targets_quartiles_us"]
        line = (
            f"{n:,} respondents, two fresh targets in one request, cold: {fmt_us(size['two_targets_cold_us'])} "
            f"(quartiles {fmt_us(low)}-{fmt_us(high)}, {len(size['two_targets'])} requests)"
        )
        print(line)
        summary.append(line)
        failures += checker.failures
        line = (
            f"{n:,} respondents: crosstab's sum equals the exactly rounded decimal sum in "
            f"{checker.exact}/{checker.total} targets (both targets of the two-target requests too)"
        )
        print(line)
        summary.append(line)
        con.close()
    print("\n== summary ==")
    for line in summary:
        print(line)
    if failures:
        print(f"\n{len(failures)} figures disagree:")
        for failure in failures[:40]:
            print("  " + failure)
        sys.exit(1)
    print("every count and sum agrees with DuckDB, Polars and the exact sum")


if __name__ == "__main__":
    main()
