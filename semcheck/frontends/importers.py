"""The kernel scripts a change reaches through imports (`semcheck verify --changed-files`).

A commit that changes only a helper module (`kernels/common.py`: block sizes, an index
helper, the kernel body itself) changes every kernel script that imports it, directly or
through other modules, while the helper compiles no kernel of its own. So for each changed
file, the kernel scripts that import it are checked as well. They are looked for where
kernel scripts are: the changed file's top folder in its repository (`kernels/` for
`kernels/ops/common.py`; the repository root's own files, not its subfolders, for a file
at the root), and the project's `[tool.semcheck] paths`, each walked as `semcheck verify
FOLDER` walks it (`discovery.walk`: no tooling, tests, environments or git-ignored files),
since semcheck runs every script it checks.

An import is read from the source, never run: `import a.b`, `from a import b`, `from . import
b` and `from ..a import b`, at any depth of the file (inside a function or an `if`), resolved
against the importing script's folder (its `sys.path[0]`) and the repository root (a package
imported by its full name). An `importlib.import_module` or `__import__` call with a computed
name is not followed. A name that resolves to a file counts: an import that names a module
and an attribute the same way (`from a import b`) counts `a/b.py` where it exists.
"""

from __future__ import annotations

import ast
import os
from collections import deque
from collections.abc import Iterable

from semcheck.frontends.discovery import walk
from semcheck.parsing import parse_python
from semcheck.records import record


@record(frozen=True)
class Reach:
    """The kernel scripts found to import the changed files, and the folders looked in."""

    scripts: tuple[str, ...]
    searched: tuple[str, ...]


def repository_root(path: str) -> str | None:
    """The nearest folder at or above `path`'s folder that holds `.git` (a folder, or a
    work tree's file); None outside a repository."""
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def search_area(path: str) -> str:
    """Where the kernel scripts that may import `path` are: its top folder in its repository
    (outside one, its own folder); for a file at the repository root, the root (its own
    files only: `importers_of` does not walk below a root)."""
    root = repository_root(path) or os.path.dirname(os.path.abspath(path))
    relative = os.path.relpath(os.path.abspath(path), root)
    top = relative.split(os.sep, 1)[0]
    return root if top == relative else os.path.join(root, top)


def importers_of(changed: list[str], project_paths: Iterable[str] = ()) -> Reach:
    """The kernel scripts (as a folder walk takes them) that import one of the `changed`
    .py files, directly or through other .py files of the same folders; not the changed
    files themselves. Sorted, as paths relative to the working directory where they are
    below it."""
    modules = {os.path.realpath(p) for p in changed if p.endswith(".py") and os.path.isfile(p)}
    if not modules:
        return Reach((), ())
    areas = dict.fromkeys([search_area(p) for p in sorted(modules)]
                          + [os.path.abspath(p) for p in project_paths if os.path.isdir(p)])
    files: dict[str, bool] = {}  # every .py file of the areas -> whether a walk takes it
    for area in areas:
        top_only = _is_repository_root(area)
        for path in _python_files(area, recursive=not top_only):
            files.setdefault(os.path.realpath(path), False)
        for path in walk([area], top_only=top_only).files:
            files[os.path.realpath(path)] = True
    importers: dict[str, list[str]] = {}
    for path in files:
        for imported in _imported_files(path):
            importers.setdefault(imported, []).append(path)
    reached = set(modules)
    work = deque(modules)
    while work:
        for path in importers.get(work.popleft(), []):
            if path not in reached:
                reached.add(path)
                work.append(path)
    scripts = sorted(_shown(p) for p in reached - modules if files.get(p))
    return Reach(tuple(scripts), tuple(_shown(a) for a in areas))


def _is_repository_root(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, ".git"))


def _python_files(folder: str, recursive: bool) -> list[str]:
    """Every .py file under `folder` but in hidden folders (`.git`, `.venv`), for the imports
    between them: a private helper (`_util.py`) links a kernel to the file it imports."""
    if not recursive:
        return [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.endswith(".py")]
    found: list[str] = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        found.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(".py"))
    return found


def _imported_files(path: str) -> set[str]:
    """The files `path`'s imports name (real paths), wherever they exist."""
    try:
        with open(path, "rb") as f:
            tree = parse_python(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return set()
    folder = os.path.dirname(path)
    roots = list(dict.fromkeys([folder, repository_root(path) or folder]))
    names: list[tuple[str, list[str]]] = []  # (a folder to resolve in, dotted parts)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(root, alias.name.split(".")) for alias in node.names for root in roots]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = folder
                for _ in range(node.level - 1):
                    base = os.path.dirname(base)
                bases = [base]
                names.append((base, ["__init__"]))
            else:
                bases = roots
            module = node.module.split(".") if node.module else []
            for base in bases:
                names += [(base, module + [alias.name]) for alias in node.names if alias.name != "*"]
                if module:
                    names.append((base, module))
    found: set[str] = set()
    for base, parts in names:
        for k in range(1, len(parts) + 1):  # `import a.b.c` runs a/__init__.py and a/b/__init__.py too
            stem = os.path.join(base, *parts[:k])
            for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
                if os.path.isfile(candidate):
                    found.add(os.path.realpath(candidate))
    return found


def _shown(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative
