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
	"strconv"
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
)

const (
	thawBackoff    = 10 * time.Second
	maxThawBackoff = 5 * time.Minute
)

// thaw starts an unpause TaskRun through the commit gate, so that no commit
// of the pod starts beside it.
func (r *Reconciler) thaw(ctx context.Context, s *v1alpha1.SandboxSnapshot, pod *corev1.Pod) error {
	unlock := r.commits.lock(pod.UID)
	defer unlock()
	cfg, err := r.settingsOn(ctx, config.FromContext(ctx).Snapshot, pod.Spec.NodeName)
	if err != nil {
		return err
	}
	want := resources.MakeUnpauseTaskRun(s, pod, cfg, r.namespace)
	tr, created, err := r.createTaskRun(ctx, s, want)
	if err != nil {
		return err
	}
	if created {
		r.commits.created(tr)
	}
	ref := v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name}
	attempt := thawAttempt(s)
	s.Status.MarkThawing(ref, pod.Name, attempt)
	controller.GetEventRecorder(ctx).Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonThawing,
		"The commit pod may have left pod %s paused; TaskRun %s/%s is unpausing it (attempt %d)", pod.Name, tr.Namespace, tr.Name, attempt)
	return nil
}

// observeThaw follows a failed snapshot's thaw, retrying failed or deleted
// unpause TaskRuns, from the TaskRuns and ThawAttemptAnnotation, not the
// prunable status.thaw. It reports whether the thaw goes on.
func (r *Reconciler) observeThaw(ctx context.Context, s *v1alpha1.SandboxSnapshot) (bool, pkgreconciler.Event) {
	commit := r.cachedCommit(s)
	unpause := r.cachedTaskRun(s, names.UnpauseTaskRun(s))
	needed := unpause != nil || commit != nil && commit.IsDone() && !commit.IsSuccessful() && resources.MayHavePaused(commit) ||
		s.Status.Thaw != nil && s.Status.Thaw.State != v1alpha1.ThawSucceeded
	if !needed {
		return false, nil
	}
	if unpause == nil {
		// One created a moment ago may not be cached yet.
		var err error
		if unpause, err = r.ownTaskRun(ctx, s, names.UnpauseTaskRun(s)); err != nil {
			return true, err
		}
	}
	recorder := controller.GetEventRecorder(ctx)
	switch {
	case unpause != nil && unpause.DeletionTimestamp != nil:
		// A retry's deletion, not over yet; its end is an event.
		return true, controller.NewRequeueAfter(cleanupWait)
	case unpause != nil && !unpause.IsDone():
		// Tekton holds a TaskRun whose pod a ResourceQuota refuses, with
		// no timeout, and tries again every minute: say why it waits.
		if why, ok := resources.PodCannotStart(unpause.Status.GetCondition(apis.ConditionSucceeded)); ok {
			before := s.Status.Thaw
			s.Status.MarkThawWaiting(v1alpha1.TaskRunReference{Namespace: unpause.Namespace, Name: unpause.Name}, s.Status.SourcePodName, thawAttempt(s), why)
			if before == nil || before.Message != s.Status.Thaw.Message {
				recorder.Event(s, corev1.EventTypeWarning, v1alpha1.ReasonThawing, s.Status.Thaw.Message)
			}
		}
		return true, nil
	case unpause != nil && unpause.IsSuccessful():
		if s.Status.Thaw == nil || s.Status.Thaw.State != v1alpha1.ThawSucceeded {
			s.Status.MarkThawed(v1alpha1.TaskRunReference{Namespace: unpause.Namespace, Name: unpause.Name})
			recorder.Event(s, corev1.EventTypeNormal, v1alpha1.ReasonThawed, s.Status.Thaw.Message)
		}
		return false, nil
	}

	podUID := ""
	for _, tr := range []*pipelinev1.TaskRun{commit, unpause} {
		if tr != nil && podUID == "" {
			podUID = tr.Labels[sandbox.SourcePodUIDLabel]
		}
	}
	pod, err := r.sourcePod(ctx, s, types.UID(podUID))
	if err != nil {
		return true, err
	}
	if pod == nil {
		// Deleted, replaced or moved: nothing of it is frozen any more.
		if s.Status.Thaw != nil && s.Status.Thaw.State != v1alpha1.ThawFailed {
			s.Status.MarkThawFailed(s.Status.Thaw.TaskRunRef, "pod %s went away before it was thawed; nothing is left to thaw", s.Status.SourcePodName)
		}
		return false, nil
	}
	attempt := thawAttempt(s)
	if unpause != nil {
		wait := thawBackoffAfter(attempt) - r.clock.Since(completedAt(unpause))
		if wait > 0 {
			why := resources.FailureMessage(unpause, unpause.Status.GetCondition(apis.ConditionSucceeded))
			if s.Status.Thaw == nil || s.Status.Thaw.State != v1alpha1.ThawFailed {
				s.Status.MarkThawFailed(v1alpha1.TaskRunReference{Namespace: unpause.Namespace, Name: unpause.Name},
					"attempt %d: pod %s may still be paused: %s; retrying in %v", attempt, pod.Name, why, wait.Round(time.Second))
				recorder.Event(s, corev1.EventTypeWarning, v1alpha1.ReasonThawFailed, s.Status.Thaw.Message)
			}
			return true, controller.NewRequeueAfter(wait)
		}
		// The next attempt is counted before the failed one goes, so that
		// its backoff is longer whatever status.thaw keeps.
		if err := r.patchAnnotation(ctx, s, sandbox.ThawAttemptAnnotation, strconv.Itoa(attempt+1)); err != nil {
			return true, err
		}
		r.metrics.thawRetried(ctx)
		if err := r.deleteTaskRun(ctx, unpause, metav1.DeletePropagationBackground); err != nil {
			return true, err
		}
		return true, controller.NewRequeueAfter(time.Second)
	}
	return true, r.thaw(ctx, s, pod)
}

// thawBackoffAfter is the wait after the given failed attempt, capped before
// hours of attempts could overflow it.
func thawBackoffAfter(attempt int) time.Duration {
	d := thawBackoff
	for i := 1; i < attempt && d < maxThawBackoff; i++ {
		d *= 2
	}
	return min(d, maxThawBackoff)
}

// thawAttempt is the number of the current attempt to thaw s's sandbox.
func thawAttempt(s *v1alpha1.SandboxSnapshot) int {
	n, err := strconv.Atoi(s.Annotations[sandbox.ThawAttemptAnnotation])
	if err != nil || n < 1 {
		return 1
	}
	return n
}
