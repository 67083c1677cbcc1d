#!/usr/bin/env bash
# The test command (README quick start; .ci/run runs exactly this): set up, build, run pytest.
# GPU tests skip without a GPU; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
${PYTHON:-python3} -m pytest -q tests "$@"
