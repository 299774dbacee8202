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

// Package sandbox holds the API group name and the well-known labels and
// annotations shared by OpenSandbox and this operator.
package sandbox

const (
	// GroupName is the API group of SandboxSnapshot and BatchSandbox.
	GroupName = "sandbox.opensandbox.io"

	// SnapshotNameLabel names the SandboxSnapshot a TaskRun works for.
	SnapshotNameLabel = GroupName + "/sandbox-snapshot-name"
	// SnapshotNamespaceLabel names the namespace of the SandboxSnapshot a TaskRun works for.
	SnapshotNamespaceLabel = GroupName + "/sandbox-snapshot-namespace"
	// SnapshotUIDLabel records the UID of the SandboxSnapshot a TaskRun works
	// for, so that a TaskRun left by an earlier snapshot of the same name is
	// never adopted.
	SnapshotUIDLabel = GroupName + "/sandbox-snapshot-uid"
	// SandboxNameLabel names the BatchSandbox a TaskRun snapshots.
	SandboxNameLabel = GroupName + "/sandbox-name"
	// SourcePodUIDLabel records the UID of the pod a TaskRun commits or
	// thaws, so that the commits of one pod can be found and run one at a
	// time.
	SourcePodUIDLabel = GroupName + "/source-pod-uid"
	// ManagedByLabel is the standard Kubernetes label naming the managing app.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is this operator's value for ManagedByLabel.
	ManagedByValue = "sandbox-snapshot-operator"

	// ClassAnnotation selects which controller handles a SandboxSnapshot, so
	// that this operator can run beside OpenSandbox's own controller.
	ClassAnnotation = GroupName + "/snapshot-class"
	// TektonClass is the ClassAnnotation value handled by this operator.
	TektonClass = "tekton"

	// ImageDeletionPolicyAnnotation overrides, on one SandboxSnapshot, the
	// image-deletion-policy of config-snapshot: Retain or Delete.
	ImageDeletionPolicyAnnotation = GroupName + "/image-deletion-policy"
	// SnapshotModeAnnotation asks, on one SandboxSnapshot, for a Filesystem
	// or a Memory snapshot (processes and memory too), overriding the
	// snapshot-mode of config-snapshot. An annotation, because OpenSandbox's
	// CRD prunes spec fields it does not know.
	SnapshotModeAnnotation = GroupName + "/snapshot-mode"
	// ImageMissingAnnotation marks a Succeed SandboxSnapshot whose images the
	// registry no longer holds; its value lists them, comma-separated.
	ImageMissingAnnotation = GroupName + "/image-missing"
	// ThawAttemptAnnotation counts, on a Failed SandboxSnapshot, the attempts
	// to thaw the sandbox its commit may have left paused.
	ThawAttemptAnnotation = GroupName + "/thaw-attempt"

	// AllocStatusAnnotation is the BatchSandbox annotation in which
	// OpenSandbox records the pods allocated to a sandbox, as {"pods":[...]}.
	AllocStatusAnnotation = GroupName + "/alloc-status"
	// BatchSandboxPodLabel labels the pods OpenSandbox creates for a BatchSandbox.
	BatchSandboxPodLabel = "batch-sandbox." + GroupName + "/name"
	// SnapshotFinalizer is the finalizer this operator puts on every
	// snapshot it handles, holding it until its TaskRuns are gone.
	SnapshotFinalizer = GroupName + "/taskrun-cleanup"
	// OpenSandboxSnapshotFinalizer is the finalizer OpenSandbox's own
	// SandboxSnapshot controller puts on every snapshot it reconciles.
	OpenSandboxSnapshotFinalizer = "sandboxsnapshot." + GroupName + "/cleanup"
)
