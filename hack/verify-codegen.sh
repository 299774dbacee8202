#!/usr/bin/env bash
# Fails when the generated code under pkg/ is stale: regenerates it in a copy
# of the repository and compares.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT

# The copy must sit at the same depth so that go.mod resolves identically.
tar -C "${REPO_ROOT}" --exclude=./_output --exclude=./.git -cf - . | tar -C "${TMP}" -xf -
mkdir -p "${REPO_ROOT}/_output/codegen-bin"
ln -s "${REPO_ROOT}/_output" "${TMP}/_output"
"${TMP}/hack/update-codegen.sh" >/dev/null

if ! diff -ruN "${REPO_ROOT}/pkg" "${TMP}/pkg"; then
  echo "Generated code is stale. Run hack/update-codegen.sh and commit the result." >&2
  exit 1
fi
echo "Generated code is up to date."
