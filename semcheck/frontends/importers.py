"""The kernel scripts a change reaches through imports (`semcheck verify --changed-files`).

A commit that changes only a helper module (`kernels/common.py`: block sizes, an index
helper, the kernel body itself) changes every kernel script that imports it, directly or
through other modules, while the helper compiles no kernel of its own. So for each changed
file, the kernel scripts that import it are checked as well. semcheck runs every script it
checks, so they are looked for only where kernel scripts are said to be: the changed file's
own folder with its subfolders (a repository's root: its own files only), and the project's
`[tool.semcheck] paths`, each walked as `semcheck verify FOLDER` walks it (`discovery.walk`:
no tooling, tests, environments or git-ignored files). Not the repository's top folder: in
a package (`tpu_inference/kernels/collectives/util.py`, vLLM's TPU backend) the package
`__init__`s chain nearly every module to every helper, and that folder's 88 importers of
one helper were engine cores and Ray executors, no kernel scripts.

An import is read from the source, never run: `import a.b`, `from a import b`, `from . import
b` and `from ..a import b`, at any depth of the file (inside a function or an `if`), resolved
against the importing script's folder (its `sys.path[0]`) and the repository root (a package
imported by its full name). A file that imports relatively is a package's module, not a
script (`python FILE` fails on that import): it links a script to a helper, and is not run.
`importlib.import_module("a.b")` and `__import__("a.b")` with a literal name are imports of
`a.b`; with a computed name (`import_module(f"kernels.{name}")`) the file may import any
module, so it is taken to import every changed one (`Reach.computed` names those scripts): a
hook that skipped it could pass the change that breaks it. A name that resolves to a file
counts: an import that names a module and an attribute the same way (`from a import b`)
counts `a/b.py` where it exists.
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
    # of `scripts`, those reached through a file that imports a computed module name
    computed: tuple[str, ...] = ()


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


def search_area(path: str) -> tuple[str, bool]:
    """Where the kernel scripts that may import `path` are looked for without
    `[tool.semcheck] paths`: its own folder, and whether only that folder's own files (a
    repository's root: its subfolders are the whole project)."""
    folder = os.path.dirname(os.path.abspath(path))
    return folder, _is_repository_root(folder)


def importers_of(changed: list[str], project_paths: Iterable[str] = ()) -> Reach:
    """The kernel scripts (as a folder walk takes them) that import one of the `changed`
    .py files, directly or through other .py files of the same folders; not the changed
    files themselves. Sorted, as paths relative to the working directory where they are
    below it."""
    modules = {os.path.realpath(p) for p in changed if p.endswith(".py") and os.path.isfile(p)}
    if not modules:
        return Reach((), ())
    areas = dict([search_area(p) for p in sorted(modules)])
    areas.update((os.path.abspath(p), False) for p in project_paths if os.path.isdir(p))
    files: dict[str, bool] = {}  # every .py file of the areas -> whether a walk takes it
    for area, top_only in areas.items():
        for path in _python_files(area, recursive=not top_only):
            files.setdefault(os.path.realpath(path), False)
        for path in walk([area], top_only=top_only).files:
            files[os.path.realpath(path)] = True
    importers: dict[str, list[str]] = {}
    package_modules: set[str] = set()
    anything: set[str] = set()  # files importing a computed name: they may import any module
    for path in files:
        imported = _imports(path)
        for module in imported.files:
            importers.setdefault(module, []).append(path)
        if imported.relative:
            package_modules.add(path)
        if imported.computed:
            anything.add(path)
    statically = _importers_closure(modules, importers)
    reached = statically | _importers_closure(anything - modules, importers)
    # a file with a relative import is a package's module, no script: `python FILE` (how
    # semcheck runs a kernel script) fails on its import; it only links a script to a helper
    scripts = [p for p in reached - modules - package_modules if files.get(p)]
    return Reach(tuple(sorted(map(_shown, scripts))), tuple(_shown(a) for a in areas),
                 tuple(sorted(_shown(p) for p in scripts if p not in statically)))


def _importers_closure(modules: Iterable[str], importers: dict[str, list[str]]) -> set[str]:
    """`modules` and every file that imports one of them, directly or through others."""
    reached = set(modules)
    work = deque(reached)
    while work:
        for path in importers.get(work.popleft(), []):
            if path not in reached:
                reached.add(path)
                work.append(path)
    return reached


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


@record(frozen=True)
class _Imports:
    """What one file's source says it imports."""

    files: frozenset[str]  # real paths of the files its imports name, where they exist
    relative: bool  # it imports relatively (`from . import b`): a package's module
    computed: bool  # it imports a module whose name is computed at run time


_IMPORT_CALLS = frozenset({"import_module", "__import__"})


def _import_call(node: ast.AST) -> ast.Call | None:
    """`node` as a call of importlib.import_module or __import__ (by any spelling that ends
    in that name), else None."""
    if not isinstance(node, ast.Call):
        return None
    callee = node.func
    name = callee.attr if isinstance(callee, ast.Attribute) else callee.id if isinstance(callee, ast.Name) else None
    return node if name in _IMPORT_CALLS else None


def _imports(path: str) -> _Imports:
    try:
        with open(path, "rb") as f:
            tree = parse_python(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return _Imports(frozenset(), False, False)
    relative = computed = False
    folder = os.path.dirname(path)
    roots = list(dict.fromkeys([folder, repository_root(path) or folder]))
    names: list[tuple[str, list[str]]] = []  # (a folder to resolve in, dotted parts)
    for node in ast.walk(tree):
        if (call := _import_call(node)) is not None:
            first = call.args[0] if call.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and not first.value.startswith("."):
                names += [(root, first.value.split(".")) for root in roots]
            else:  # a computed name, or one relative to a `package=` argument
                computed = True
        elif isinstance(node, ast.Import):
            names += [(root, alias.name.split(".")) for alias in node.names for root in roots]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                relative = True
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
    return _Imports(frozenset(found), relative, computed)


def _shown(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative
