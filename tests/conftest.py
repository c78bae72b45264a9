import os
import sys

# Tests import the project from this checkout, even when an installed copy exists.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# In-process TPU-frontend tests (semcheck.verify) build meshes of up to 8 fake CPU devices;
# the count must be set before anything imports jax.
if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# No verdict in a test may depend on the machine's speed: checks are bounded by their state
# budgets, and the wall-clock budget is set out of reach (a loaded CI machine must give the
# same results as an idle one). Tests of the time budget itself pass their own.
os.environ.setdefault("SEMCHECK_TIMEOUT", "86400")

# Each (script, device count) is captured once per test session and shared by every module,
# every xdist worker and every `-j N` sweep worker (semcheck/frontends/capture_cache.py): the
# controller makes the folder before the workers start, and they inherit it from the
# environment.
_CAPTURES = "SEMCHECK_CAPTURE_CACHE"


def pytest_configure(config):
    import tempfile

    if _CAPTURES in os.environ or hasattr(config, "workerinput"):
        return
    try:
        parent = str(config.cache.mkdir("semcheck-captures"))
    except AttributeError:  # the cache plugin is off (-p no:cacheprovider)
        parent = None
    os.environ[_CAPTURES] = tempfile.mkdtemp(prefix="session-", dir=parent)
    config._semcheck_captures = os.environ[_CAPTURES]


def pytest_unconfigure(config):
    import shutil

    folder = getattr(config, "_semcheck_captures", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(_CAPTURES, None)
