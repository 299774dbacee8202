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

package testing

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"knative.dev/pkg/system"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
)

// Now is the time of the fake clock the table tests reconcile at.
var Now = metav1.NewTime(time.Date(2026, time.November, 29, 12, 0, 0, 0, time.UTC))

// SnapshotOption changes a SandboxSnapshot.
type SnapshotOption func(*v1alpha1.SandboxSnapshot)

// Snapshot returns a SandboxSnapshot of the named sandbox, at generation 1.
func Snapshot(namespace, name, sandboxName string, opts ...SnapshotOption) *v1alpha1.SandboxSnapshot {
	s := &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:  namespace,
			Name:       name,
			UID:        types.UID(name + "-uid"),
			Generation: 1,
		},
		Spec: v1alpha1.SandboxSnapshotSpec{SandboxName: sandboxName},
	}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// WithFinalizers sets the snapshot's finalizers.
func WithFinalizers(finalizers ...string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) { s.Finalizers = finalizers }
}

// WithCreationTimestamp sets when the snapshot was created.
func WithCreationTimestamp(t metav1.Time) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) { s.CreationTimestamp = t }
}

// WithDeletionTimestamp marks the snapshot as being deleted.
func WithDeletionTimestamp(s *v1alpha1.SandboxSnapshot) {
	s.DeletionTimestamp = ptr.To(Now)
}

// WithResourceVersion sets the snapshot's resource version.
func WithResourceVersion(rv string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) { s.ResourceVersion = rv }
}

// WithAnnotation sets one annotation.
func WithAnnotation(key, value string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) { metav1.SetMetaDataAnnotation(&s.ObjectMeta, key, value) }
}

// WithControllerOwner makes the BatchSandbox the snapshot's controller, as
// OpenSandbox's pause does.
func WithControllerOwner(sb *v1alpha1.BatchSandbox) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) {
		s.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(sb, v1alpha1.SchemeGroupVersion.WithKind("BatchSandbox"))}
	}
}

// WithPending gives the snapshot the status of its first reconcile.
func WithPending(s *v1alpha1.SandboxSnapshot) {
	s.Status.ObservedGeneration = s.Generation
	s.Status.InitializeConditions(Now)
}

// WithCommitting records the commit TaskRun, as MarkCommitting does. The
// start time is the TaskRun's creation time, which the fake clients leave
// empty.
func WithCommitting(pod, node string, containers []v1alpha1.ContainerSnapshot, taskRunNamespace, taskRunName string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) {
		WithPending(s)
		s.Status.MarkCommitting(Now, pod, node, containers, v1alpha1.TaskRunReference{Namespace: taskRunNamespace, Name: taskRunName}, metav1.Time{})
	}
}

// WithWaiting keeps the snapshot Pending behind another commit, as
// MarkWaiting does.
func WithWaiting(message string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) {
		WithPending(s)
		s.Status.MarkWaiting(Now, "%s", message)
	}
}

// WithCommitPodPending records why the commit pod cannot start.
func WithCommitPodPending(message string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) { s.Status.MarkCommitPodPending(Now, "%s", message) }
}

// WithSucceeded marks the snapshot Succeed with the given digests, committed
// by its commit TaskRun in the system namespace.
func WithSucceeded(pauseWindowMillis int64, digests ...string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) {
		s.Status.Containers = append([]v1alpha1.ContainerSnapshot(nil), s.Status.Containers...)
		s.Status.MarkSucceeded(Now, digests, &pauseWindowMillis,
			v1alpha1.TaskRunReference{Namespace: system.Namespace(), Name: names.CommitTaskRun(s)})
	}
}

// WithFellBackToFilesystem notes that a Succeed snapshot's memory snapshot
// fell back to a filesystem one.
func WithFellBackToFilesystem(s *v1alpha1.SandboxSnapshot) {
	s.Status.MarkFellBackToFilesystem(Now)
}

// WithFailed marks the snapshot Failed.
func WithFailed(reason, message string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) {
		if s.Status.Phase == "" {
			WithPending(s)
		}
		s.Status.MarkFailed(Now, reason, "%s", message)
	}
}

// WithUnpauseTaskRun records the TaskRun thawing the sandbox.
func WithUnpauseTaskRun(namespace, name string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) {
		s.Status.MarkThawing(v1alpha1.TaskRunReference{Namespace: namespace, Name: name}, s.Status.SourcePodName, 1)
	}
}

// WithThawed records that the unpause TaskRun thawed the sandbox.
func WithThawed(s *v1alpha1.SandboxSnapshot) {
	s.Status.MarkThawed(s.Status.Thaw.TaskRunRef)
}

// WithThawFailed records that the sandbox may still be paused.
func WithThawFailed(message string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) { s.Status.MarkThawFailed(s.Status.Thaw.TaskRunRef, "%s", message) }
}

// WithWaitingForOpenSandboxJob sets the Ready condition as
// MarkWaitingForOpenSandboxJob does, keeping the phase.
func WithWaitingForOpenSandboxJob(message string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) { s.Status.MarkWaitingForOpenSandboxJob(Now, "%s", message) }
}

// WithOpenSandboxCommitting gives the snapshot the status OpenSandbox's own
// controller writes once its commit Job is created: Committing, with the
// source and the images, and no TaskRun.
func WithOpenSandboxCommitting(pod, node string, containers []v1alpha1.ContainerSnapshot) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) {
		s.Status.ObservedGeneration = s.Generation
		s.Status.Phase = v1alpha1.PhaseCommitting
		s.Status.SourcePodName = pod
		s.Status.SourceNodeName = node
		s.Status.Containers = containers
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonCommitting, Message: "Snapshot commit job is running", LastTransitionTime: Now})
	}
}

// WithOpenSandboxSucceeded gives the snapshot the status OpenSandbox's own
// controller writes once its commit Job succeeded: Succeed, each container's
// imageUri left as its tag and imageDigest set to nerdctl's image ID (the
// image's config digest), in container order.
func WithOpenSandboxSucceeded(imageIDs ...string) SnapshotOption {
	return func(s *v1alpha1.SandboxSnapshot) {
		s.Status.Containers = append([]v1alpha1.ContainerSnapshot(nil), s.Status.Containers...)
		for i := range s.Status.Containers {
			s.Status.Containers[i].ImageDigest = imageIDs[i]
		}
		s.Status.Phase = v1alpha1.PhaseSucceed
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: "SnapshotReady", Message: "Snapshot is ready", LastTransitionTime: Now})
	}
}
