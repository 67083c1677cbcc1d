#!/usr/bin/env bash
# The main job (README quick start): set up, build, then `python -m xpress_ext` on the best
# available device.  Extra arguments go to it (see `python -m xpress_ext --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
${PYTHON:-python3} -m xpress_ext "$@"
