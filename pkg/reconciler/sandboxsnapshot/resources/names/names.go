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

// Package names derives the names of the objects made for a SandboxSnapshot.
package names

import (
	"knative.dev/pkg/kmeta"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// CommitTaskRun is the name of a snapshot's commit TaskRun. TaskRuns of all
// namespaces share the operator's namespace, so the name includes the
// snapshot's namespace; kmeta.ChildName keeps it within 63 characters.
func CommitTaskRun(s *v1alpha1.SandboxSnapshot) string {
	return kmeta.ChildName(s.Namespace+"-"+s.Name, "-commit")
}

// UnpauseTaskRun is the name of the TaskRun that thaws a snapshot's sandbox
// after its commit pod died mid-pause.
func UnpauseTaskRun(s *v1alpha1.SandboxSnapshot) string {
	return kmeta.ChildName(s.Namespace+"-"+s.Name, "-unpause")
}
