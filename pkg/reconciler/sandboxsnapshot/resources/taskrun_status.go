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

package resources

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"knative.dev/pkg/apis"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// failureReasons maps a failed TaskRun's reason to the snapshot's reason.
var failureReasons = map[pipelinev1.TaskRunReason]string{
	pipelinev1.TaskRunReasonTimedOut:         v1alpha1.ReasonCommitTimedOut,
	pipelinev1.TaskRunReasonCancelled:        v1alpha1.ReasonCommitCancelled,
	pipelinev1.TaskRunReasonStepOOM:          v1alpha1.ReasonCommitOOMKilled,
	pipelinev1.TaskRunReasonInitContainerOOM: v1alpha1.ReasonCommitOOMKilled,
	pipelinev1.TaskRunReasonPodEvicted:       v1alpha1.ReasonCommitPodEvicted,
	pipelinev1.TaskRunReasonImagePullFailed:  v1alpha1.ReasonCommitImagePullFailed,
	pipelinev1.TaskRunReasonFailedResolution: v1alpha1.ReasonCommitResolutionFailed,
}

// FailureReason returns the snapshot's reason for a failed TaskRun.
func FailureReason(tr *pipelinev1.TaskRun, cond *apis.Condition) string {
	if t := commitStep(tr); t != nil && t.Terminated != nil {
		switch t.Terminated.ExitCode {
		case task.ExitCodeFrozenElsewhere:
			return v1alpha1.ReasonCommitConflict
		case task.ExitCodeMemoryUnsupported:
			return v1alpha1.ReasonMemorySnapshotUnsupported
		}
	}
	if reason, ok := failureReasons[pipelinev1.TaskRunReason(cond.Reason)]; ok {
		return reason
	}
	return v1alpha1.ReasonCommitJobFailed
}

// FailureMessage describes a failed TaskRun: its condition, the committer's
// own error when it wrote one, and how to read the logs.
func FailureMessage(tr *pipelinev1.TaskRun, cond *apis.Condition) string {
	var b strings.Builder
	fmt.Fprintf(&b, "TaskRun %s/%s failed (%s): %s", tr.Namespace, tr.Name, cond.Reason, cond.Message)
	if msg := resultValue(tr, task.ResultError); msg != "" {
		if len(msg) > task.MaxErrorLength {
			msg = msg[:task.MaxErrorLength] + "..."
		}
		fmt.Fprintf(&b, "; committer: %s", msg)
	}
	fmt.Fprintf(&b, "; see: tkn taskrun logs %s -n %s", tr.Name, tr.Namespace)
	return b.String()
}

// CommitResults parses a successful TaskRun's want digests and pause window.
func CommitResults(tr *pipelinev1.TaskRun, want int) ([]string, *int64, error) {
	digests, err := task.ParseDigests(resultValue(tr, task.ResultDigests), want)
	if err != nil {
		return nil, nil, fmt.Errorf("TaskRun %s/%s: %w", tr.Namespace, tr.Name, err)
	}
	var pause *int64
	if v := resultValue(tr, task.ResultPauseWindowMS); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("TaskRun %s/%s: result %s is %q, not a number of milliseconds", tr.Namespace, tr.Name, task.ResultPauseWindowMS, v)
		}
		pause = &ms
	}
	return digests, pause, nil
}

// PushedImages returns the images a commit TaskRun reported pushing,
// repository@digest: the repository of each container its param names,
// with the digest its result gives that container; none unless it
// succeeded. opts parse the images.
func PushedImages(tr *pipelinev1.TaskRun, opts ...name.Option) ([]name.Digest, error) {
	if !tr.IsSuccessful() {
		return nil, nil
	}
	_, _, containers, err := SourceOf(tr)
	if err != nil {
		return nil, err
	}
	digests, err := task.ParseDigests(resultValue(tr, task.ResultDigests), len(containers))
	if err != nil {
		return nil, fmt.Errorf("TaskRun %s/%s: %w", tr.Namespace, tr.Name, err)
	}
	out := make([]name.Digest, len(containers))
	for i, c := range containers {
		ref, err := name.ParseReference(c.ImageURI, opts...)
		if err != nil {
			return nil, fmt.Errorf("TaskRun %s/%s: param %s: image %q of container %s: %w", tr.Namespace, tr.Name, task.ParamContainers, c.ImageURI, c.ContainerName, err)
		}
		out[i] = ref.Context().Digest(digests[i])
	}
	return out, nil
}

// resultValue returns the trimmed value of one of tr's results.
func resultValue(tr *pipelinev1.TaskRun, name string) string {
	for _, r := range tr.Status.Results {
		if r.Name == name {
			return strings.TrimSpace(r.Value.StringVal)
		}
	}
	return ""
}

// Reasons Tekton gives a running TaskRun whose pod cannot start. Its
// pkg/pod exports them, but importing it brings SPIRE and k8schain along.
const (
	tektonPodPending            = "Pending"
	tektonExceededNodeResources = "ExceededNodeResources"
	tektonExceededResourceQuota = "ExceededResourceQuota"
	tektonPullImageFailed       = "PullImageFailed"
)

// PodPending reports whether Tekton says a running TaskRun's pod is pending.
func PodPending(cond *apis.Condition) bool {
	return cond != nil && cond.Reason == tektonPodPending
}

// PodCannotStart reports why a running TaskRun's pod cannot start. Tekton
// reports an unschedulable pod as reason Pending with the PodScheduled
// condition in its message.
func PodCannotStart(cond *apis.Condition) (string, bool) {
	if cond == nil {
		return "", false
	}
	switch cond.Reason {
	case tektonExceededNodeResources, tektonExceededResourceQuota, tektonPullImageFailed:
		return cond.Message, true
	case tektonPodPending:
		return cond.Message, strings.Contains(cond.Message, `"PodScheduled":"False"`)
	}
	return "", false
}

// MayHavePaused reports whether a failed TaskRun's commit step started and
// ended without thawing itself: killed, out of memory, timed out or
// cancelled. Tekton marks a step that never ran terminated with the TaskRun's
// reason, but without the image ID a created container has.
func MayHavePaused(tr *pipelinev1.TaskRun) bool {
	step := commitStep(tr)
	switch {
	case step == nil || step.Running == nil && step.Terminated == nil:
		return false
	case step.Running != nil:
		return true
	}
	t := step.Terminated
	stoppedByTekton := t.Reason == pipelinev1.TaskRunReasonCancelled.String() || t.Reason == pipelinev1.TaskRunReasonTimedOut.String()
	if stoppedByTekton && step.ImageID == "" {
		return false
	}
	ended := t.Reason == "Completed" || t.Reason == "Error"
	return !ended || (t.ExitCode != 0 && t.ExitCode != task.ExitCodeThawed && t.ExitCode != task.ExitCodeFrozenElsewhere &&
		t.ExitCode != task.ExitCodeMemoryUnsupported)
}

// FellBackToFilesystem reports whether a memory snapshot was taken as a filesystem one.
func FellBackToFilesystem(tr *pipelinev1.TaskRun) bool {
	return paramValue(tr, task.ParamSnapshotMode) == task.SnapshotModeMemory &&
		resultValue(tr, task.ResultSnapshotMode) != task.SnapshotModeMemory
}

// IsCommit reports whether tr is a commit TaskRun, not unpause or release.
func IsCommit(tr *pipelinev1.TaskRun) bool {
	mode := paramValue(tr, task.ParamMode)
	return mode == "" || mode == task.ModeCommit
}

// commitStep returns the state of tr's commit step, or nil.
func commitStep(tr *pipelinev1.TaskRun) *pipelinev1.StepState {
	for i := range tr.Status.Steps {
		if tr.Status.Steps[i].Name == task.StepCommit {
			return &tr.Status.Steps[i]
		}
	}
	return nil
}

// paramValue returns the string value of one of tr's params.
func paramValue(tr *pipelinev1.TaskRun, name string) string {
	for _, p := range tr.Spec.Params {
		if p.Name == name {
			return p.Value.StringVal
		}
	}
	return ""
}
