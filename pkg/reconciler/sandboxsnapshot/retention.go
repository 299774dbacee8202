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
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
)

// retainTaskRuns deletes a terminal snapshot's TaskRuns once both are done and
// the retention is over, the commit first: the finalizer thaws again after a
// commit that may have paused and has no unpause TaskRun.
func (r *Reconciler) retainTaskRuns(ctx context.Context, s *v1alpha1.SandboxSnapshot) pkgreconciler.Event {
	cfg := config.FromContext(ctx).Snapshot
	succeeded := s.Status.Phase == v1alpha1.PhaseSucceed
	retention := cfg.TaskRunRetention(succeeded)
	if retention == config.KeepTaskRuns {
		return nil
	}
	var done []*pipelinev1.TaskRun
	var last time.Time
	for _, name := range []string{names.CommitTaskRun(s), names.UnpauseTaskRun(s)} {
		// The informer alone: a terminal snapshot's TaskRuns were cached
		// long ago, and a resync must not cost an API read per snapshot.
		tr, err := r.findTaskRun(ctx, name, false)
		if err != nil {
			return err
		}
		if tr == nil || !ownedBy(tr, s) || tr.DeletionTimestamp != nil {
			continue
		}
		if !tr.IsDone() {
			// Its end is an event of its own.
			return nil
		}
		done = append(done, tr)
		if t := completedAt(tr); t.After(last) {
			last = t
		}
	}
	if len(done) == 0 {
		return nil
	}
	if wait := last.Add(retention).Sub(r.clock.Now()); wait > 0 {
		return controller.NewRequeueAfter(wait)
	}
	key := config.TaskRunRetentionFailedKey
	if succeeded {
		key = config.TaskRunRetentionSucceededKey
	}
	now := metav1.NewTime(r.clock.Now())
	for _, tr := range done {
		if err := r.deleteTaskRun(ctx, tr, metav1.DeletePropagationBackground); err != nil {
			return err
		}
		s.Status.MarkTaskRunRemoved(now, v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name})
		controller.GetEventRecorder(ctx).Eventf(s, corev1.EventTypeNormal, v1alpha1.ReasonTaskRunRemoved,
			"Deleted TaskRun %s/%s and its pod, complete since %s, after the %v of config-snapshot %s; status.containers keeps the image digests",
			tr.Namespace, tr.Name, completedAt(tr).UTC().Format(time.RFC3339), retention, key)
	}
	return nil
}

// completedAt is when a done TaskRun completed: its completion time, else
// when its Succeeded condition last changed, else its creation.
func completedAt(tr *pipelinev1.TaskRun) time.Time {
	if tr.Status.CompletionTime != nil {
		return tr.Status.CompletionTime.Time
	}
	if c := tr.Status.GetCondition(apis.ConditionSucceeded); c != nil && !c.LastTransitionTime.Inner.IsZero() {
		return c.LastTransitionTime.Inner.Time
	}
	return tr.CreationTimestamp.Time
}
