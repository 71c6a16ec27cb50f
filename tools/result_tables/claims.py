"""A headline claim and the small arithmetic the claims share: each subject's module states its own claim beside its
table (tools/result_tables/headline.py gathers them for results.md's headline table and the README's)."""

from __future__ import annotations

from dataclasses import dataclass

from result_tables.csvs import read


@dataclass
class Claim:
    claim: str
    figure: str
    names: tuple[str, ...]  # the CSVs, for the date and the machine
    anchor: str  # the section of docs/results.md with the table and the commands
    short: str = ""  # the README's figure, where it is shorter
    brief: str = ""  # the README's claim, where it is shorter


def f(value: str | float) -> float:
    return float(value)


def x(a: float, b: float) -> str:
    return f"{a / b:.2f}x"


def one(name: str, **match: str) -> dict[str, str]:
    return next(r for r in read(name)[1] if all(r[k] == v for k, v in match.items()))
