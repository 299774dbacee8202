#!/usr/bin/env bash
# Regenerates deepcopy, clientset, listers, informers, injection and the
# genreconciler for pkg/apis. The generators are pinned by go.mod through
# hack/tools.go, so the output is reproducible.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODULE="github.com/opensandbox-group/sandbox-snapshot-operator"
APIS="${MODULE}/pkg/apis/sandbox/v1alpha1"
CLIENT="${MODULE}/pkg/client"
HEADER="${REPO_ROOT}/hack/boilerplate/boilerplate.go.txt"
GOBIN="${REPO_ROOT}/_output/codegen-bin"

cd "${REPO_ROOT}"
mkdir -p "${GOBIN}"
GOBIN="${GOBIN}" go install \
  k8s.io/code-generator/cmd/deepcopy-gen \
  k8s.io/code-generator/cmd/client-gen \
  k8s.io/code-generator/cmd/lister-gen \
  k8s.io/code-generator/cmd/informer-gen \
  knative.dev/pkg/codegen/cmd/injection-gen

rm -rf "${REPO_ROOT}/pkg/client"
rm -f "${REPO_ROOT}/pkg/apis/sandbox/v1alpha1/zz_generated.deepcopy.go"

echo "deepcopy"
"${GOBIN}/deepcopy-gen" --go-header-file "${HEADER}" \
  --output-file zz_generated.deepcopy.go \
  "${APIS}"

echo "clientset"
"${GOBIN}/client-gen" --go-header-file "${HEADER}" \
  --output-dir "${REPO_ROOT}/pkg/client/clientset" \
  --output-pkg "${CLIENT}/clientset" \
  --clientset-name versioned \
  --input-base "" \
  --input "${APIS}"

echo "listers"
"${GOBIN}/lister-gen" --go-header-file "${HEADER}" \
  --output-dir "${REPO_ROOT}/pkg/client/listers" \
  --output-pkg "${CLIENT}/listers" \
  "${APIS}"

echo "informers"
"${GOBIN}/informer-gen" --go-header-file "${HEADER}" \
  --output-dir "${REPO_ROOT}/pkg/client/informers" \
  --output-pkg "${CLIENT}/informers" \
  --versioned-clientset-package "${CLIENT}/clientset/versioned" \
  --listers-package "${CLIENT}/listers" \
  "${APIS}"

echo "injection and genreconciler"
"${GOBIN}/injection-gen" --go-header-file "${HEADER}" \
  --input-dirs "${APIS}" \
  --versioned-clientset-package "${CLIENT}/clientset/versioned" \
  --external-versions-informers-package "${CLIENT}/informers/externalversions" \
  --listers-package "${CLIENT}/listers" \
  --output-package "${CLIENT}/injection" \
  --output-dir "${REPO_ROOT}/pkg/client/injection"

echo "config/ example checksums"
for f in "${REPO_ROOT}"/config/config-*.yaml; do
  go run knative.dev/pkg/configmap/hash-gen "${f}"
done
