"""Which files of a folder are the user's kernels and models.

semcheck runs every file it checks (a model file's `model()`, a kernel script as `python
FILE`), so a folder walk must not run what is not a kernel: packaging and tooling scripts
(`setup.py`, `noxfile.py`, `conftest.py`, a Sphinx `docs/conf.py`), virtual environments,
`node_modules`, build output, hidden folders, private and test files, and anything git
ignores. A file named on the command line is always taken: the user asked for it.
"""

from __future__ import annotations

import enum
import os
from collections import Counter
from dataclasses import field

from semcheck.records import record

TOOLING_FILES = frozenset({"setup.py", "noxfile.py", "conftest.py", "fabfile.py", "tasks.py"})
DOCS_FOLDERS = frozenset({"doc", "docs"})  # their conf.py is Sphinx's configuration
ENVIRONMENT_FOLDERS = frozenset({"venv", "node_modules", "build", "dist", "site-packages", "__pycache__"})
# Never worth a mention: nobody keeps kernels there.
UNMENTIONED_FOLDERS = frozenset({".git", ".hg", ".svn", "__pycache__"})


class Why(str, enum.Enum):
    TOOLING = "tooling"
    ENVIRONMENT = "environment"
    HIDDEN = "hidden"
    PRIVATE_OR_TEST = "private_or_test"
    GIT_IGNORED = "git_ignored"
    NO_KERNEL = "no_kernel"  # ran to completion without compiling a Pallas kernel


# How the summary line names each reason: (one, several).
_PHRASES = {
    Why.TOOLING: ("tooling file", "tooling files"),
    Why.ENVIRONMENT: ("environment or build folder", "environment or build folders"),
    Why.HIDDEN: ("hidden or private folder", "hidden or private folders"),
    Why.PRIVATE_OR_TEST: ("private or test file", "private or test files"),
    Why.GIT_IGNORED: ("git-ignored file", "git-ignored files"),
    Why.NO_KERNEL: ("file that compiles no Pallas kernel", "files that compile no Pallas kernel"),
}


@record(frozen=True)
class Skipped:
    path: str
    why: Why
    folder: bool = False


@record
class Walk:
    files: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def summary(self) -> str | None:
        return summarize(self.skipped)


def summarize(skipped: list[Skipped]) -> str | None:
    """One line saying what was left out, or None."""
    shown = [s for s in skipped if os.path.basename(s.path) not in UNMENTIONED_FOLDERS]
    if not shown:
        return None
    parts = []
    for why in Why:
        items = [s for s in shown if s.why is why]
        if not items:
            continue
        counts = Counter(_short_name(s) for s in items)
        listed = ", ".join(n if c == 1 else f"{n} x{c}" for n, c in sorted(counts.items())[:4])
        more = ", ..." if len(counts) > 4 else ""
        one, several = _PHRASES[why]
        parts.append(f"{len(items)} {one if len(items) == 1 else several} ({listed}{more})")
    line = "skipped " + "; ".join(parts)
    if any(s.why is Why.NO_KERNEL for s in shown):
        line += " (a file that declares `# semcheck: expect ...` must compile a kernel)"
    return line


def _short_name(skipped: Skipped) -> str:
    name = os.path.basename(skipped.path)
    if skipped.folder:
        return name + "/"
    if name == "conf.py":  # docs/conf.py says more than conf.py
        return os.path.join(os.path.basename(os.path.dirname(skipped.path)), name)
    return name


def _folder_skip(name: str, full_path: str) -> Why | None:
    if name.startswith("."):
        return Why.HIDDEN
    if name.startswith("_"):
        return Why.HIDDEN
    if name in ENVIRONMENT_FOLDERS or os.path.isfile(os.path.join(full_path, "pyvenv.cfg")):
        return Why.ENVIRONMENT
    return None


def _file_skip(name: str, folder: str) -> Why | None:
    if name in TOOLING_FILES or (name == "conf.py" and os.path.basename(folder) in DOCS_FOLDERS):
        return Why.TOOLING
    if name.startswith(("_", "test_")) or name.endswith("_test.py"):
        return Why.PRIVATE_OR_TEST
    return None


def walk(paths: list[str], top_only: bool = False) -> Walk:
    """Files to check: each file as given; each folder's .py files (recursively, sorted;
    with `top_only`, its own files only) that are not skipped by the rules above."""
    result = Walk()
    for path in paths:
        if not os.path.isdir(path):
            result.files.append(path)
            continue
        candidates: list[str] = []
        for root, dirs, files in os.walk(path):
            if top_only:
                dirs[:] = []
            kept = []
            for d in sorted(dirs):
                why = _folder_skip(d, os.path.join(root, d))
                if why is None:
                    kept.append(d)
                else:
                    result.skipped.append(Skipped(os.path.join(root, d), why, folder=True))
            dirs[:] = kept
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                why = _file_skip(name, root)
                if why is None:
                    candidates.append(os.path.join(root, name))
                else:
                    result.skipped.append(Skipped(os.path.join(root, name), why))
        ignored = git_ignored(path, candidates)
        for candidate in candidates:
            if candidate in ignored:
                result.skipped.append(Skipped(candidate, Why.GIT_IGNORED))
            else:
                result.files.append(candidate)
    return result


def discover(paths: list[str]) -> list[str]:
    """The files `walk` takes."""
    return walk(paths).files


def git_ignored(folder: str, candidates: list[str]) -> set[str]:
    """Those of `candidates` that git ignores, asked once per folder (`git check-ignore`);
    nothing when the folder is not in a git work tree or git is not installed."""
    import shutil
    import subprocess  # (imported here: a run over named files never needs it)

    git = shutil.which("git")
    if not candidates or git is None:
        return set()
    try:
        proc = subprocess.run(
            [git, "-C", folder, "check-ignore", "--stdin", "-z"],
            input="\0".join(os.path.relpath(c, folder) for c in candidates) + "\0",
            capture_output=True, text=True, timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    if proc.returncode not in (0, 1):  # 128: not a git repository
        return set()
    return {os.path.join(folder, p) for p in proc.stdout.split("\0") if p}
