"""Reading docs/results/'s CSVs and the provenance every generated block ends with: the one place that knows
the files' `# key: value` header lines."""

from __future__ import annotations

import csv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CSVS = ROOT / "docs" / "results"


def read(name: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """({provenance key: value} from the `# key: value` lines, rows) of docs/results/NAME."""
    lines = (CSVS / name).read_text().splitlines()
    about = {}
    for line in lines:
        if line.startswith("# ") and ": " in line:
            key, value = line[2:].split(": ", 1)
            about[key] = value
    return about, list(csv.DictReader(line for line in lines if not line.startswith("#")))


def source(*names: str) -> str:
    """The provenance lines under a table: each CSV's link, date, hardware, versions and command."""
    out = []
    for name in names:
        about, _ = read(name)
        out.append(
            f"From [{name}](results/{name}): {about.get('date', 'date not recorded')}; {about.get('hardware', '')}; "
            f"{about.get('versions', '')}; `{about.get('command', '')}`."
            + (f" Run: {about['note']}." if "note" in about else "")
            + (f" Transcribed {about['transcribed']}." if "transcribed" in about else "")
        )
    return "\n".join(out) + "\n"


# Where a run wrote its cells and how long a cell could take: the machine's, not what was measured.
WHERE_ONLY = ("runs_dir=", "timeout=")


def commands(*names: str) -> str:
    """The commands that wrote these CSVs, as a page shows them to run again (WHERE_ONLY's settings left out): a
    page's copy of a command cannot then differ from the command its figures came from."""
    lines = [" ".join(w for w in read(name)[0]["command"].split() if not w.startswith(WHERE_ONLY)) for name in names]
    return "```bash\n" + "\n".join(lines) + "\n```\n"


def block(lines: list[str], *names: str) -> str:
    """A generated block: its table's lines, then the provenance of the CSVs they came from."""
    return "\n".join(lines) + "\n\n" + source(*names)


def ms(value: str) -> str:
    return f"{float(value):.1f}"


def mb(value: str) -> str:
    return f"{float(value):,.0f}"
