"""The action's check step: run `semcheck verify` once with the action's inputs, with
workflow annotations on stdout (`--format github`), the SARIF in a file, and the job
summary appended to $GITHUB_STEP_SUMMARY; then say in $GITHUB_OUTPUT whether the gate
fails. This step itself never fails, so the SARIF upload still runs; the action's last
step fails the job when `fail` is true.

Inputs come as INPUT_* environment variables (action.yml maps them).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

# Exit codes of semcheck verify (docs/cli.md, "Synopsis and exit codes"): which ones fail the step for each fail-on.
FAILING = {
    "violation": {1, 2},
    "inconclusive": {1, 2, 3},
    "error": {2},
    "never": set(),
}
WORDS = {0: "safe", 1: "violation", 2: "error", 3: "inconclusive"}


def flag(name: str) -> str:
    return os.environ.get(f"INPUT_{name}", "").strip()


def command() -> list[str]:
    argv = [sys.executable, "-m", "semcheck", "verify", *shlex.split(flag("PATHS"))]
    for name, option in (("DEVICES", "--devices"), ("ENGINE", "--engine"), ("BASELINE", "--baseline"),
                         ("CATEGORY", "--category")):
        if flag(name):
            argv += [option, flag(name)]
    argv += ["--jobs", jobs()]
    if flag("EXPECTATIONS").lower() in ("yes", "true", "1", ""):
        argv.append("--expectations")
    argv += ["--format", "github", "--sarif", sarif_path()]
    return argv


def jobs() -> str:
    """The `jobs` input, or by default (action.yml) the runner's cores."""
    return flag("JOBS") or str(os.cpu_count() or 1)


def sarif_path() -> str:
    return flag("SARIF") or "semcheck.sarif"


def write_outputs(values: dict[str, str]) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        for key, value in values.items():
            f.write(f"{key}={value}\n")


def main() -> int:
    fail_on = flag("FAIL_ON") or "violation"
    if fail_on not in FAILING:
        print(f"::error title=semcheck::fail-on must be one of {', '.join(FAILING)}, got {fail_on!r}")
        write_outputs({"exit-code": "2", "fail": "true", "reason": f"bad fail-on input {fail_on!r}", "sarif": ""})
        return 0
    argv = command()
    workspace = os.environ.get("GITHUB_WORKSPACE") or os.getcwd()
    sarif = os.path.join(workspace, sarif_path())
    os.makedirs(os.path.dirname(sarif), exist_ok=True)
    print("$ " + shlex.join(["semcheck", *argv[3:]]), flush=True)
    code = subprocess.run(argv, cwd=workspace).returncode
    written = os.path.exists(sarif)
    fail = code in FAILING[fail_on] or code not in WORDS
    reason = f"semcheck verify exited {code} ({WORDS.get(code, 'unexpected exit code')}; fail-on: {fail_on})"
    write_outputs({"exit-code": str(code), "fail": "true" if fail else "false", "reason": reason,
                   "sarif": sarif_path() if written else ""})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
