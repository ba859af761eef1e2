"""How often the validator's verdict on a config.json disagrees with what the judging msprobe
release really did with it: every example of tests/examples/msprobe/releases/cases, judged with
--msprobe-version X, against its outcome measured on X (extract.py --examples). A verdict is
wrong when "has an error" differs from "that release did not dump" (the three deliberate
differences the tests document are counted too, and named).

    python bench/msprobe_release_verdicts.py [-v]"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from verl_pdbg_conf.checks.msprobe import check_msprobe  # noqa: E402
from verl_pdbg_conf.context import MsprobeContext  # noqa: E402
from verl_pdbg_conf.core.findings import Severity  # noqa: E402
from verl_pdbg_conf.core.loaders import load_json  # noqa: E402

EXAMPLES = ROOT / "tests" / "examples" / "msprobe" / "releases"


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    rows = []
    for p in sorted((EXAMPLES / "outcomes").glob("msprobe-*.json"), key=lambda p: [
            int(x) if x.isdigit() else 0 for x in p.stem.split("-")[1].replace("post", "").split(".")]):
        data = json.loads(p.read_text())
        version, wrong = data["version"], []
        for name, outcome in sorted(data["outcomes"].items()):
            found = check_msprobe(load_json(str(EXAMPLES / "cases" / f"{name}.json")), MsprobeContext(msprobe=version))
            has_error = any(f.severity is Severity.ERROR for f in found)
            if has_error != (outcome["outcome"] != "dumped"):
                wrong.append(f"{name} ({outcome['outcome']}, {'error' if has_error else 'no error'})")
        rows.append((version, len(data["outcomes"]) - len(wrong), len(data["outcomes"]), wrong))
    print("| release | right | wrong |\n|---|---:|---|")
    for version, right, total, wrong in rows:
        print(f"| {version} | {right}/{total} | {'; '.join(wrong) if verbose else len(wrong)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
