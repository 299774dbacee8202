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
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// OpenSandboxJobEnded reports whether a commit Job of OpenSandbox's own
// controller has ended, and how: "succeeded", or "failed (<reason>:
// <message>)" from its Failed condition. The Job controller sets Complete or
// Failed once the Job's pods have terminated, so none of them still holds
// the sandbox paused.
func OpenSandboxJobEnded(job *batchv1.Job) (string, bool) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return "succeeded", true
		case batchv1.JobFailed:
			if why := strings.Trim(c.Reason+": "+c.Message, ": "); why != "" {
				return "failed (" + why + ")", true
			}
			return "failed", true
		}
	}
	return "", false
}
