"""Run by tests/test_warm_start.py, cold and warm: this process's own `python` children, started with subprocess.run
as the product starts a benchmark cell or a device count. Prints what each reported, as JSON."""

import json
import subprocess
import sys


def run(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], **kwargs)


got = run(
    "import sys; print('torch' in sys.modules); print('err', file=sys.stderr); sys.exit(3)",
    capture_output=True,
    text=True,
)
facts = [got.returncode, got.stdout, got.stderr]
with open(sys.argv[1], "w") as f:
    facts.append(
        run("import sys; print('out'); print('err', file=sys.stderr)", stdout=f, stderr=subprocess.STDOUT).stdout
    )
try:
    run("import time; time.sleep(60)", timeout=1)
except subprocess.TimeoutExpired:
    facts.append("timed out")
try:
    run("raise SystemExit(2)", check=True, capture_output=True)
except subprocess.CalledProcessError as e:
    facts.append(e.returncode)
print(json.dumps(facts))
