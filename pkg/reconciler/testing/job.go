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
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/kmeta"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
)

// JobOption changes a Job.
type JobOption func(*batchv1.Job)

// OpenSandboxCommitJob returns the commit Job of s as OpenSandbox's own
// controller makes it (buildCommitJob): <name>-commit in s's namespace,
// labelled with s's name and controlled by s, running.
func OpenSandboxCommitJob(s *v1alpha1.SandboxSnapshot, opts ...JobOption) *batchv1.Job {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       s.Namespace,
			Name:            names.OpenSandboxCommitJob(s),
			Labels:          map[string]string{sandbox.SnapshotNameLabel: s.Name},
			OwnerReferences: []metav1.OwnerReference{*kmeta.NewControllerRef(s)},
		},
		Status: batchv1.JobStatus{Active: 1},
	}
	for _, opt := range opts {
		opt(job)
	}
	return job
}

// WithJobComplete marks the Job complete, as the Job controller does.
func WithJobComplete(job *batchv1.Job) {
	job.Status.Active = 0
	job.Status.Succeeded = 1
	job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue})
}

// WithJobFailed marks the Job failed with a reason and message, as the Job
// controller does.
func WithJobFailed(reason, message string) JobOption {
	return func(job *batchv1.Job) {
		job.Status.Active = 0
		job.Status.Failed = 1
		job.Status.Conditions = append(job.Status.Conditions,
			batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, Message: message})
	}
}

// WithJobControlledBy makes the Job controlled by s instead, as a Job left by
// an earlier snapshot of the same name is.
func WithJobControlledBy(s *v1alpha1.SandboxSnapshot) JobOption {
	return func(job *batchv1.Job) { job.OwnerReferences = []metav1.OwnerReference{*kmeta.NewControllerRef(s)} }
}
