"""The version, in a module of its own so that any layer can name it without importing the
package (whose __init__ re-exports the whole API)."""

__version__ = "0.1.0"
# Where the project lives: SARIF rules link their help pages (docs/kinds/) under it.
REPOSITORY_URL = "https://github.com/semcheck/semcheck"
# Where a message that asks the user to report something sends them (pyproject's
# [project.urls] Issues; tests/test_cli.py checks that the two agree).
ISSUES_URL = f"{REPOSITORY_URL}/issues"
