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

package sandboxsnapshot

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
)

// thaw starts an unpause TaskRun on the source pod's node, for a commit pod
// that may have ended with the sandbox paused. The unpause TaskRun carries
// the commit's run ID, so it thaws only what that commit froze.
func (r *Reconciler) thaw(ctx context.Context, s *v1alpha1.SandboxSnapshot, pod *corev1.Pod) error {
	want := resources.MakeUnpauseTaskRun(s, pod, config.FromContext(ctx).Snapshot, r.namespace)
	tr, _, err := r.createTaskRun(ctx, s, want)
	if err != nil {
		return err
	}
	ref := v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name}
	s.Status.MarkThawing(ref, pod.Name)
	controller.GetEventRecorder(ctx).Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonThawing,
		"The commit pod may have left pod %s paused; TaskRun %s/%s is unpausing it", pod.Name, tr.Namespace, tr.Name)
	return nil
}

// observeThaw reports how the unpause TaskRun of a failed snapshot ended.
// The TaskRun is found by its name, so this works where status.thaw is
// pruned; there the outcome is reported by its event alone.
func (r *Reconciler) observeThaw(ctx context.Context, s *v1alpha1.SandboxSnapshot) pkgreconciler.Event {
	if s.Status.Thaw != nil && s.Status.Thaw.State != v1alpha1.ThawRunning {
		return nil
	}
	tr, err := r.findTaskRun(ctx, names.UnpauseTaskRun(s), true)
	if err != nil {
		return err
	}
	if tr != nil && !ownedBy(tr, s) {
		tr = nil
	}
	recorder := controller.GetEventRecorder(ctx)
	switch {
	case tr == nil && s.Status.Thaw == nil:
		// No thaw was needed.
		return nil
	case tr == nil:
		ref := s.Status.Thaw.TaskRunRef
		s.Status.MarkThawFailed(ref, "TaskRun %s/%s was deleted before it completed; pod %s may still be paused",
			ref.Namespace, ref.Name, s.Status.SourcePodName)
	case !tr.IsDone():
		return nil
	case tr.IsSuccessful():
		ref := v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name}
		s.Status.MarkThawed(ref)
		recorder.Event(s, corev1.EventTypeNormal, v1alpha1.ReasonThawed, s.Status.Thaw.Message)
		return nil
	default:
		ref := v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name}
		s.Status.MarkThawFailed(ref, "pod %s may still be paused: %s", s.Status.SourcePodName,
			failureMessage(tr, tr.Status.GetCondition(apis.ConditionSucceeded)))
	}
	recorder.Event(s, corev1.EventTypeWarning, v1alpha1.ReasonThawFailed, s.Status.Thaw.Message)
	return nil
}
