"""The version, in a module of its own so that any layer can name it without importing the
package (whose __init__ re-exports the whole API)."""

__version__ = "0.1.0"
# Where the project lives: SARIF rules link their help pages (docs/kinds/) under it.
REPOSITORY_URL = "https://github.com/semcheck/semcheck"
