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
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
)

// TaskRunOption changes a TaskRun.
type TaskRunOption func(*pipelinev1.TaskRun)

// TaskRun returns a copy of tr, as built by the resources package, with the
// options applied.
func TaskRun(tr *pipelinev1.TaskRun, opts ...TaskRunOption) *pipelinev1.TaskRun {
	tr = tr.DeepCopy()
	for _, opt := range opts {
		opt(tr)
	}
	return tr
}

// WithTaskRunRunning marks the TaskRun running.
func WithTaskRunRunning(tr *pipelinev1.TaskRun) {
	tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionUnknown, Reason: "Running"})
}

// WithTaskRunWaiting marks the TaskRun running, held back with a Tekton
// reason such as Pending.
func WithTaskRunWaiting(reason, message string) TaskRunOption {
	return func(tr *pipelinev1.TaskRun) {
		tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionUnknown, Reason: reason, Message: message})
	}
}

// WithStartedAt sets the TaskRun's start time.
func WithStartedAt(t metav1.Time) TaskRunOption {
	return func(tr *pipelinev1.TaskRun) { tr.Status.StartTime = &t }
}

// WithCompletedAt sets the TaskRun's completion time.
func WithCompletedAt(t metav1.Time) TaskRunOption {
	return func(tr *pipelinev1.TaskRun) { tr.Status.CompletionTime = &t }
}

// WithTaskRunDeleting marks the TaskRun as being deleted.
func WithTaskRunDeleting(tr *pipelinev1.TaskRun) {
	tr.DeletionTimestamp = &Now
}

// WithTaskRunSucceeded marks the TaskRun succeeded.
func WithTaskRunSucceeded(tr *pipelinev1.TaskRun) {
	tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionTrue, Reason: "Succeeded"})
}

// WithTaskRunFailed marks the TaskRun failed with a Tekton reason.
func WithTaskRunFailed(reason pipelinev1.TaskRunReason, message string) TaskRunOption {
	return func(tr *pipelinev1.TaskRun) {
		tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionFalse, Reason: reason.String(), Message: message})
	}
}

// WithResult adds a string result.
func WithResult(name, value string) TaskRunOption {
	return func(tr *pipelinev1.TaskRun) {
		tr.Status.Results = append(tr.Status.Results, pipelinev1.TaskRunResult{Name: name, Type: pipelinev1.ResultsTypeString, Value: *pipelinev1.NewStructuredValues(value)})
	}
}

// WithStep adds a step state.
func WithStep(name string, state corev1.ContainerState) TaskRunOption {
	return func(tr *pipelinev1.TaskRun) {
		tr.Status.Steps = append(tr.Status.Steps, pipelinev1.StepState{Name: name, ContainerState: state})
	}
}

// WithCancelled marks the TaskRun's spec cancelled.
func WithCancelled(tr *pipelinev1.TaskRun) {
	tr.Spec.Status = pipelinev1.TaskRunSpecStatusCancelled
	tr.Spec.StatusMessage = "SandboxSnapshot deleted"
}
