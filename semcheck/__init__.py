"""semcheck: a model checker for the synchronization protocols of JAX Pallas kernels."""

__version__ = "0.1.0"
# Where the project lives: SARIF rules link their help pages (docs/kinds/) under it.
REPOSITORY_URL = "https://github.com/semcheck/semcheck"

from semcheck.api import check_protocol, verify, verify_model, verify_path  # noqa: E402
from semcheck.assumptions import assume  # noqa: E402
from semcheck.result import Result, Verdict, Violation  # noqa: E402

__all__ = [
    "assume", "check_protocol", "verify", "verify_model", "verify_path", "Result", "Verdict", "Violation",
    "__version__",
]
