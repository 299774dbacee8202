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

package v1alpha1

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons on the Ready and Failed conditions. The first five are OpenSandbox's.
const (
	ReasonRegistryNotConfigured    = "RegistryNotConfigured"
	ReasonBatchSandboxLookupFailed = "BatchSandboxLookupFailed"
	ReasonSourcePodNotFound        = "SourcePodNotFound"
	ReasonNoContainers             = "NoContainers"
	ReasonCommitJobFailed          = "CommitJobFailed"

	ReasonInvalidConfiguration   = "InvalidConfiguration"
	ReasonInvalidSpec            = "InvalidSpec"
	ReasonInvalidImageReference  = "InvalidImageReference"
	ReasonCommitTimedOut         = "CommitTimedOut"
	ReasonCommitCancelled        = "CommitCancelled"
	ReasonCommitOOMKilled        = "CommitOOMKilled"
	ReasonCommitPodEvicted       = "CommitPodEvicted"
	ReasonCommitImagePullFailed  = "CommitImagePullFailed"
	ReasonCommitResolutionFailed = "CommitTaskResolutionFailed"
	ReasonCommitTaskRunMissing   = "CommitTaskRunMissing"
	ReasonCommitResultsInvalid   = "CommitResultsInvalid"
	ReasonCommitConflict         = "CommitConflict"
	// ReasonWaitingForOpenSandboxJob keeps a snapshot whose commit
	// OpenSandbox's own controller started, before the switch to this
	// operator, as it is while that commit Job runs;
	// ReasonOpenSandboxJobEnded fails it once the Job has ended.
	ReasonWaitingForOpenSandboxJob = "WaitingForOpenSandboxJob"
	ReasonOpenSandboxJobEnded      = "OpenSandboxJobEnded"
	// ReasonMemorySnapshotUnsupported fails a memory snapshot on a node
	// that cannot take one; ReasonMemorySnapshotFellBack marks a Succeed
	// one that took a filesystem snapshot there instead.
	ReasonMemorySnapshotUnsupported = "MemorySnapshotUnsupported"
	ReasonMemorySnapshotFellBack    = "MemorySnapshotFellBack"
	ReasonWaitingForCommit          = "WaitingForCommit"
	ReasonCommitting                = "Committing"
	ReasonCommitPodPending          = "CommitPodPending"
	ReasonSucceeded                 = "Succeeded"
)

// Reasons on the events that report a thaw.
const (
	ReasonThawing              = "Thawing"
	ReasonThawed               = "Thawed"
	ReasonThawFailed           = "ThawFailed"
	ReasonDeletionWaitsForThaw = "DeletionWaitsForThaw"
)

// Reasons on the events that report TaskRun retention, image deletion and
// images missing from the registry.
const (
	ReasonTaskRunRemoved        = "TaskRunRemoved"
	ReasonImagesDeleted         = "ImagesDeleted"
	ReasonImageDeletionDeferred = "ImageDeletionDeferred"
	ReasonImagesLeftBehind      = "ImagesLeftBehind"
	// ReasonImageDeletionRefused reports an image a snapshot names but does
	// not own, which is not deleted.
	ReasonImageDeletionRefused = "ImageDeletionRefused"
	ReasonImageMissing         = "ImageMissing"
	ReasonImageRestored        = "ImageRestored"
)

// IsTerminal reports whether the snapshot has reached Succeed or Failed.
// A terminal phase never changes again; only Thaw still reports on a Failed
// snapshot.
func (s *SandboxSnapshotStatus) IsTerminal() bool {
	return s.Phase == PhaseSucceed || s.Phase == PhaseFailed
}

// InitializeConditions marks a new snapshot Pending.
func (s *SandboxSnapshotStatus) InitializeConditions(now metav1.Time) {
	if s.Phase != "" {
		return
	}
	s.Phase = PhasePending
	s.setCondition(ConditionReady, metav1.ConditionFalse, string(PhasePending), "Waiting for the commit to start", now)
}

// MarkWaiting keeps the snapshot Pending while another commit of the same
// pod runs; message names that commit.
func (s *SandboxSnapshotStatus) MarkWaiting(now metav1.Time, messageFormat string, args ...any) {
	s.Phase = PhasePending
	s.setCondition(ConditionReady, metav1.ConditionFalse, ReasonWaitingForCommit, fmt.Sprintf(messageFormat, args...), now)
}

// MarkWaitingForOpenSandboxJob keeps the snapshot in its phase, Pending or
// Committing, while the commit Job that OpenSandbox's own controller started
// for it runs; message names that Job.
func (s *SandboxSnapshotStatus) MarkWaitingForOpenSandboxJob(now metav1.Time, messageFormat string, args ...any) {
	s.setCondition(ConditionReady, metav1.ConditionFalse, ReasonWaitingForOpenSandboxJob, fmt.Sprintf(messageFormat, args...), now)
}

// MarkCommitting records the source and the TaskRun committing it, created
// at start.
func (s *SandboxSnapshotStatus) MarkCommitting(now metav1.Time, podName, nodeName string, containers []ContainerSnapshot, taskRun TaskRunReference, start metav1.Time) {
	s.Phase = PhaseCommitting
	s.SourcePodName = podName
	s.SourceNodeName = nodeName
	s.Containers = containers
	s.TaskRunRef = &taskRun
	s.StartTime = &start
	s.MarkCommitRunning(now, taskRun)
}

// MarkCommitRunning records that the commit TaskRun's pod is under way.
func (s *SandboxSnapshotStatus) MarkCommitRunning(now metav1.Time, taskRun TaskRunReference) {
	s.setCondition(ConditionReady, metav1.ConditionFalse, ReasonCommitting,
		fmt.Sprintf("TaskRun %s/%s is committing pod %s on node %s", taskRun.Namespace, taskRun.Name, s.SourcePodName, s.SourceNodeName), now)
}

// MarkCommitPodPending records why the commit TaskRun's pod cannot start yet.
func (s *SandboxSnapshotStatus) MarkCommitPodPending(now metav1.Time, messageFormat string, args ...any) {
	s.setCondition(ConditionReady, metav1.ConditionFalse, ReasonCommitPodPending, fmt.Sprintf(messageFormat, args...), now)
}

// MarkSucceeded records the digests (in the order of Containers) and the
// pause window, and pins each imageUri to its digest: <image>:<tag>@<digest>
// resumes exactly the bytes pushed, wherever the tag points later. The Ready
// condition names taskRun, the commit TaskRun, which OpenSandbox's CRD keeps
// (it prunes taskRunRef).
func (s *SandboxSnapshotStatus) MarkSucceeded(now metav1.Time, digests []string, pauseWindowMillis *int64, taskRun TaskRunReference) {
	for i := range s.Containers {
		tagged, _, _ := strings.Cut(s.Containers[i].ImageURI, "@")
		s.Containers[i].ImageURI = tagged + "@" + digests[i]
		s.Containers[i].ImageDigest = digests[i]
	}
	s.Phase = PhaseSucceed
	s.PauseWindowMilliseconds = pauseWindowMillis
	s.CompletionTime = &now
	s.setCondition(ConditionReady, metav1.ConditionTrue, ReasonSucceeded,
		fmt.Sprintf("Committed and pushed %d container image(s) from pod %s with TaskRun %s/%s",
			len(s.Containers), s.SourcePodName, taskRun.Namespace, taskRun.Name), now)
	s.setCondition(ConditionFailed, metav1.ConditionFalse, ReasonSucceeded, "", now)
}

// MarkFellBackToFilesystem notes, on a Succeed snapshot that asked for a
// memory snapshot, that its node could not take one and a filesystem
// snapshot was taken instead.
func (s *SandboxSnapshotStatus) MarkFellBackToFilesystem(now metav1.Time) {
	s.setCondition(ConditionReady, metav1.ConditionTrue, ReasonMemorySnapshotFellBack,
		fmt.Sprintf("Node %s could not take a memory snapshot: committed and pushed %d filesystem image(s) instead, whose processes start afresh on resume",
			s.SourceNodeName, len(s.Containers)), now)
}

// MarkFailed fails the snapshot for good with a reason and a message that
// names the object at fault.
func (s *SandboxSnapshotStatus) MarkFailed(now metav1.Time, reason, messageFormat string, args ...any) {
	message := fmt.Sprintf(messageFormat, args...)
	s.Phase = PhaseFailed
	s.CompletionTime = &now
	s.setCondition(ConditionReady, metav1.ConditionFalse, reason, message, now)
	s.setCondition(ConditionFailed, metav1.ConditionTrue, reason, message, now)
}

// MarkThawing records the unpause TaskRun started, as the given attempt, for
// a commit pod that may have ended with the sandbox paused.
func (s *SandboxSnapshotStatus) MarkThawing(taskRun TaskRunReference, podName string, attempt int) {
	s.Thaw = &ThawStatus{TaskRunRef: taskRun, State: ThawRunning,
		Message: fmt.Sprintf("TaskRun %s/%s is unpausing pod %s (attempt %d)", taskRun.Namespace, taskRun.Name, podName, attempt)}
}

// MarkThawWaiting records that the unpause TaskRun's pod cannot start yet,
// and why.
func (s *SandboxSnapshotStatus) MarkThawWaiting(taskRun TaskRunReference, podName string, attempt int, why string) {
	s.Thaw = &ThawStatus{TaskRunRef: taskRun, State: ThawRunning,
		Message: fmt.Sprintf("TaskRun %s/%s, unpausing pod %s (attempt %d), cannot start its pod yet: %s", taskRun.Namespace, taskRun.Name, podName, attempt, why)}
}

// MarkThawed records that the unpause TaskRun thawed the sandbox.
func (s *SandboxSnapshotStatus) MarkThawed(taskRun TaskRunReference) {
	s.Thaw = &ThawStatus{TaskRunRef: taskRun, State: ThawSucceeded,
		Message: fmt.Sprintf("TaskRun %s/%s unpaused pod %s", taskRun.Namespace, taskRun.Name, s.SourcePodName)}
}

// MarkThawFailed records that the sandbox may still be paused, and why.
func (s *SandboxSnapshotStatus) MarkThawFailed(taskRun TaskRunReference, messageFormat string, args ...any) {
	s.Thaw = &ThawStatus{TaskRunRef: taskRun, State: ThawFailed, Message: fmt.Sprintf(messageFormat, args...)}
}

// GetCondition returns the condition of the given type, or nil.
func (s *SandboxSnapshotStatus) GetCondition(conditionType string) *metav1.Condition {
	return meta.FindStatusCondition(s.Conditions, conditionType)
}

// maxConditionMessage is the longest condition message the API accepts.
const maxConditionMessage = 32768

func (s *SandboxSnapshotStatus) setCondition(conditionType string, status metav1.ConditionStatus, reason, message string, now metav1.Time) {
	if len(message) > maxConditionMessage {
		message = message[:maxConditionMessage-3] + "..."
	}
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type:               conditionType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		LastTransitionTime: now,
	})
}

// MarkTaskRunRemoved records that a completed TaskRun was deleted after its
// retention. Containers keeps the digests it pushed.
func (s *SandboxSnapshotStatus) MarkTaskRunRemoved(now metav1.Time, taskRun TaskRunReference) {
	for _, r := range s.RemovedTaskRuns {
		if r.Namespace == taskRun.Namespace && r.Name == taskRun.Name {
			return
		}
	}
	s.RemovedTaskRuns = append(s.RemovedTaskRuns, RemovedTaskRun{Namespace: taskRun.Namespace, Name: taskRun.Name, RemovalTime: now})
}

// MarkImagesMissing records the images the registry no longer holds; none
// clears the mark.
func (s *SandboxSnapshotStatus) MarkImagesMissing(images []string) {
	s.MissingImages = images
}
