/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package e2e holds the control-plane end-to-end tests: the controller runs
// as a local process (test/cluster/run-controller.sh) against a real kube-apiserver
// (test/cluster/cluster-up.sh) that has Tekton's CRDs but no Tekton controller, so the
// tests play Tekton themselves by writing TaskRun statuses. What the tests
// share (a test's Env, sandboxes, snapshots, TaskRun statuses, the local
// controller) is in package framework (test/e2e/framework).
//
// They are behind the e2e build tag. Run them with test/e2e.sh (make e2e),
// which brings the cluster and the controller up and down around
//
//	go test -tags e2e -count=1 -timeout 20m ./test/e2e/...
//
// Against a cluster and controller that are already up, the go test command
// alone works too (KUBECONFIG defaults to _output/cluster/kubeconfig).
package e2e
