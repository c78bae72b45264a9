"""semcheck: a model checker for the synchronization protocols of JAX Pallas kernels."""

from semcheck.version import __version__
from semcheck.api import check_protocol, verify, verify_model, verify_path  # noqa: E402
from semcheck.assumptions import assume  # noqa: E402
from semcheck.result import Result, Verdict, Violation  # noqa: E402

__all__ = [
    "assume", "check_protocol", "verify", "verify_model", "verify_path", "Result", "Verdict", "Violation",
    "__version__",
]
