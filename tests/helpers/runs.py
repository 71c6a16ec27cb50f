"""A run folder's metrics, as the CSV logger writes them."""

import csv


def metrics_rows(run):
    with open(run / "metrics.csv") as f:
        return list(csv.DictReader(f))


def epoch_value(rows, key):
    return {int(r["epoch"]): float(r[key]) for r in rows if r.get(key)}
