#!/usr/bin/env python3
"""Writes the SPSS import fixtures with pyreadstat (a writer no one here wrote).

Usage: make-sav-fixtures.py OUT_DIR

Writes into OUT_DIR the same 300 respondents five ways:
  labelled.sav        uncompressed
  labelled-rows.sav   bytecode ("row") compressed
  labelled.zsav       zlib compressed
  respondents.parquet the CSV's figures written by pyarrow (nulls where the CSV is empty)
  respondents.csv     the figures the SPSS files must import to (user-missing values
                      and system-missing values are empty cells; the date is days since
                      1970-01-01)
and labels.json, every variable and value label written, for the codebook checks.
Deterministic: the same files (up to SPSS's creation time stamp) on every run.
The venv `scripts/setup` makes has pyreadstat: $HOME/.cache/crosstab-venv/bin/python.
"""

import csv
import datetime
import json
import math
import random
import sys
from pathlib import Path

import pandas as pd
import pyreadstat

N = 300


def rows():
    rng = random.Random(19)
    epoch = datetime.date(1970, 1, 1)
    for i in range(N):
        age = rng.randint(18, 90)
        if rng.random() < 0.05:
            age = 99  # user-missing (discrete)
        elif rng.random() < 0.05:
            age = math.nan  # system-missing
        sat = rng.choice([1, 2, 3, 4, 5, 5, 8, 9])  # 8-9 user-missing (range)
        income = round(rng.uniform(5000, 150000), 2) if rng.random() > 0.1 else math.nan
        visited = epoch + datetime.timedelta(days=rng.randint(19000, 20500))
        yield {
            "RESPID": f"R{i + 1:04d}",
            "WEIGHT": round(rng.uniform(0.25, 4.0), 2),
            "REGION": float(rng.randint(1, 4)),
            "GENDER": float(rng.randint(1, 2)),
            "AGE": float(age),
            "SAT": float(sat),
            "INCOME": income,
            "SCORE": round(rng.gauss(0, 1), 3),
            "COMMENT": rng.choice(["", "great", "ok", "never again"]),
            "VISITED": visited,
        }


LABELS = {
    "REGION": "Region",
    "GENDER": "Gender",
    "AGE": "Age in years",
    "SAT": "Satisfaction (1-5)",
    "INCOME": "Household income",
    "SCORE": "Standardised score",
    "VISITED": "Date of last visit",
    "WEIGHT": "Projection weight",
}
VALUE_LABELS = {
    "REGION": {1: "Northeast", 2: "Midwest", 3: "South", 4: "West"},
    "GENDER": {1: "Male", 2: "Female"},
    "SAT": {1: "Very unhappy", 5: "Very happy", 8: "Don't know", 9: "Refused"},
    "AGE": {99: "No answer"},
}
MISSING = {"AGE": [99], "SAT": [{"lo": 8, "hi": 9}]}


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    data = list(rows())
    frame = pd.DataFrame(data)
    options = dict(
        file_label="Fixture survey",
        column_labels=LABELS,
        variable_value_labels=VALUE_LABELS,
        missing_ranges=MISSING,
    )
    pyreadstat.write_sav(frame, str(out / "labelled.sav"), **options)
    pyreadstat.write_sav(frame, str(out / "labelled-rows.sav"), row_compress=True, **options)
    pyreadstat.write_sav(frame, str(out / "labelled.zsav"), compress=True, **options)

    epoch = datetime.date(1970, 1, 1)
    columns = ["RESPID", "WEIGHT", "REGION", "GENDER", "AGE", "SAT", "INCOME", "SCORE", "VISITED"]

    def cell(name, value):
        if name == "VISITED":
            return str((value - epoch).days)
        if isinstance(value, str):
            return value
        if math.isnan(value):
            return ""
        if name == "AGE" and value == 99:
            return ""
        if name == "SAT" and 8 <= value <= 9:
            return ""
        return repr(int(value)) if value == int(value) else repr(value)

    with open(out / "respondents.csv", "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(columns)
        for row in data:
            writer.writerow([cell(c, row[c]) for c in columns])

    # Parquet by pyarrow, from the CSV: integer columns stay integers, missing are nulls.
    pd.read_csv(out / "respondents.csv", dtype={"RESPID": str}).to_parquet(
        out / "respondents.parquet", index=False, engine="pyarrow"
    )

    labels = {
        name: {
            "label": LABELS.get(name),
            "values": {str(k): v for k, v in VALUE_LABELS.get(name, {}).items()},
        }
        for name in columns
        if name not in ("RESPID", "WEIGHT")
    }
    (out / "labels.json").write_text(json.dumps(labels, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
