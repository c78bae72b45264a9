#!/usr/bin/env bash
# The action's install step: semcheck (with JAX, to trace kernel scripts) from the action's
# own checkout, or whatever the `install` input names (a version pin, a wheel, a git URL).
set -euo pipefail
spec="${INPUT_INSTALL:-}"
if [ -z "$spec" ]; then
    spec="${GITHUB_ACTION_PATH:?GITHUB_ACTION_PATH is set by GitHub Actions}[jax]"
fi
python -m pip install --disable-pip-version-check -q "$spec"
python -m semcheck --version
