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
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestOpenSandboxJobEnded(t *testing.T) {
	for _, tc := range []struct {
		name       string
		conditions []batchv1.JobCondition
		want       string
		ended      bool
	}{
		{name: "running"},
		{name: "about to succeed, its pods not yet gone",
			conditions: []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}}},
		{name: "about to fail, its pods not yet gone",
			conditions: []batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}}},
		{name: "complete", conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}},
			want: "succeeded", ended: true},
		{name: "failed", conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue,
			Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline"}},
			want: "failed (DeadlineExceeded: Job was active longer than specified deadline)", ended: true},
		{name: "failed without a word", conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}},
			want: "failed", ended: true},
		{name: "a condition that is not true", conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionFalse}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ended := OpenSandboxJobEnded(&batchv1.Job{Status: batchv1.JobStatus{Conditions: tc.conditions}})
			if got != tc.want || ended != tc.ended {
				t.Errorf("OpenSandboxJobEnded() = %q, %v, want %q, %v", got, ended, tc.want, tc.ended)
			}
		})
	}
}
