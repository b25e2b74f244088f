#!/usr/bin/env bash
# Build .venv-olmo: ai2-olmo-core, the oracle for OLMo-core replay tests and the benchmark.
# Why a separate environment: olmo-core's cached-path dependency pins rich<14, huggingface-hub<2
# and filelock<4, which would downgrade the project's venv. This venv sees the project's packages
# (torch 2.13.0, numpy) through a .pth file placed AFTER its own site-packages, so only the pinned
# packages are installed here and torch is never re-installed. Idempotent.
#   scripts/olmo_oracle_env.sh [PROJECT_PYTHON]   (default: .venv/bin/python of this checkout)
set -euo pipefail
cd "$(dirname "$0")/.."
OLMO_CORE_VERSION=3.0.0
base_py=${1:-.venv/bin/python}
venv=.venv-olmo
stamp="$venv/.olmo-core-$OLMO_CORE_VERSION"
[ -f "$stamp" ] && exit 0
base_site=$("$base_py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
base_exe=$("$base_py" -c "import sys; print(sys._base_executable)")
"$base_exe" -m venv --without-pip "$venv"
own_site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$base_site" > "$own_site/zz_forensics_base.pth"
"$venv/bin/python" -m pip --version >/dev/null  # pip comes from the project's venv via the .pth
# The project's venv may hold ai2-olmo-core too (--no-deps, for the n-gram rule's oracle): put
# this venv's own copy first, then let pip add the pinned dependencies beside it.
"$venv/bin/python" -m pip install -q --no-compile --no-deps --ignore-installed "ai2-olmo-core==$OLMO_CORE_VERSION" 2>&1 | grep -v "is ignored" || true
"$venv/bin/python" -m pip install -q --no-compile "ai2-olmo-core==$OLMO_CORE_VERSION" 2>&1 | grep -v "is ignored" || true
"$venv/bin/python" -c "
import torch, olmo_core, sys
assert torch.__version__.startswith('2.13.0'), torch.__version__
assert olmo_core.__file__.startswith(sys.prefix), olmo_core.__file__
"
touch "$stamp"
