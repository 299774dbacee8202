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
	"crypto/sha256"
	"encoding/hex"

	"knative.dev/pkg/kmeta"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// CommitTaskRun is the name of a snapshot's commit TaskRun.
func CommitTaskRun(s *v1alpha1.SandboxSnapshot) string {
	return taskRun(s, "commit")
}

// UnpauseTaskRun is the name of a snapshot's unpause TaskRun.
func UnpauseTaskRun(s *v1alpha1.SandboxSnapshot) string {
	return taskRun(s, "unpause")
}

// ReleaseTaskRun is the name of a snapshot's release TaskRun.
func ReleaseTaskRun(s *v1alpha1.SandboxSnapshot) string {
	return taskRun(s, "release")
}

// OpenSandboxCommitJob is the name of the commit Job that OpenSandbox's own
// SandboxSnapshot controller makes for a snapshot, in its namespace.
func OpenSandboxCommitJob(s *v1alpha1.SandboxSnapshot) string {
	return s.Name + "-commit"
}

// taskRun names a TaskRun <namespace>-<name>-<hash>-<purpose>: the hash of
// namespace/name keeps team/a-b and team-a/b apart in the one namespace.
func taskRun(s *v1alpha1.SandboxSnapshot, purpose string) string {
	sum := sha256.Sum256([]byte(s.Namespace + "/" + s.Name))
	return kmeta.ChildName(s.Namespace+"-"+s.Name, "-"+hex.EncodeToString(sum[:])[:6]+"-"+purpose)
}
