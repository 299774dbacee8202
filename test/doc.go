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

// Package test holds what the end-to-end suites share: the control-plane
// tests in test/e2e (build tag e2e), which play Tekton and the kubelet, and
// the node tests in test/e2e-node (build tag e2e_node), which run the
// operator, Tekton and a kubelet for real. It is an ordinary package, as
// knative's test packages are, so that both suites import it; nothing the
// operator ships does. What only one suite uses is in its own framework
// package: test/e2e/framework and test/e2e-node/nodeframework.
package test
