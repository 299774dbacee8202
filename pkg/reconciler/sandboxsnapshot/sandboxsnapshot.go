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

// Package sandboxsnapshot reconciles SandboxSnapshots onto TaskRuns of the
// sandbox-commit Task and mirrors those TaskRuns back into their status.
package sandboxsnapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	pipelineclientset "github.com/tektoncd/pipeline/pkg/client/clientset/versioned"
	pipelinelisters "github.com/tektoncd/pipeline/pkg/client/listers/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	sandboxclientset "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/clientset/versioned"
	snapshotreconciler "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/reconciler/sandbox/v1alpha1/sandboxsnapshot"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
)

// unpauseWait is how often deletion re-checks a running unpause TaskRun, in
// case its completion event is missed.
const unpauseWait = 10 * time.Second

// Reconciler maps SandboxSnapshots onto commit TaskRuns.
type Reconciler struct {
	kubeClient     kubernetes.Interface
	sandboxClient  sandboxclientset.Interface
	pipelineClient pipelineclientset.Interface
	taskRunLister  pipelinelisters.TaskRunLister
	clock          clock.PassiveClock
	// namespace is where TaskRuns run: the operator's own namespace, where
	// the commit Task and the push Secret live.
	namespace string
}

var (
	_ snapshotreconciler.Interface = (*Reconciler)(nil)
	_ snapshotreconciler.Finalizer = (*Reconciler)(nil)
)

// ReconcileKind starts a snapshot's commit TaskRun, mirrors it, and writes
// the snapshot's status.
//
// The status is written here, not by the generated reconciler (the
// controller sets SkipStatusUpdates): on a snapshot's first pass the
// generated code patches our finalizer in and would then write status from
// its informer copy, taken before that patch, so the write would conflict.
// s carries the patch's resource version.
func (r *Reconciler) ReconcileKind(ctx context.Context, s *v1alpha1.SandboxSnapshot) pkgreconciler.Event {
	before := s.Status.DeepCopy()
	event := r.reconcile(ctx, s)
	if equality.Semantic.DeepEqual(before, &s.Status) {
		return event
	}
	if err := r.updateStatus(ctx, s); err != nil {
		return err
	}
	return event
}

func (r *Reconciler) reconcile(ctx context.Context, s *v1alpha1.SandboxSnapshot) pkgreconciler.Event {
	now := metav1.NewTime(r.clock.Now())
	// A terminal phase is frozen; only the thaw of a failed commit reports on.
	if s.Status.IsTerminal() {
		if s.Status.IsThawing() {
			return r.observeThaw(ctx, s, now)
		}
		return nil
	}
	s.Status.ObservedGeneration = s.Generation
	s.Status.InitializeConditions(now)

	if s.Status.TaskRunRef == nil {
		return r.startCommit(ctx, s, now)
	}
	tr, err := r.getTaskRun(ctx, *s.Status.TaskRunRef)
	if apierrs.IsNotFound(err) {
		// Its pod went with it, maybe before the committer could thaw.
		pod, err := r.sourcePod(ctx, s)
		if err != nil {
			return err
		}
		if pod != nil {
			if err := r.thaw(ctx, s, pod, now); err != nil {
				return err
			}
		}
		s.Status.MarkFailed(now, v1alpha1.ReasonCommitTaskRunMissing,
			"TaskRun %s/%s was deleted before it completed", s.Status.TaskRunRef.Namespace, s.Status.TaskRunRef.Name)
		return r.failed(ctx, s)
	} else if err != nil {
		return err
	}
	return r.mirror(ctx, s, tr, now)
}

// updateStatus writes s's status, onto the latest version of s when another
// writer got there first.
func (r *Reconciler) updateStatus(ctx context.Context, s *v1alpha1.SandboxSnapshot) error {
	snapshots := r.sandboxClient.SandboxV1alpha1().SandboxSnapshots(s.Namespace)
	desired := s.Status
	current := s
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		_, err := snapshots.UpdateStatus(ctx, current, metav1.UpdateOptions{})
		if apierrs.IsConflict(err) {
			latest, getErr := snapshots.Get(ctx, s.Name, metav1.GetOptions{})
			if getErr != nil {
				return getErr
			}
			latest.Status = desired
			current = latest
		}
		if err != nil {
			return fmt.Errorf("updating the status of SandboxSnapshot %s/%s: %w", s.Namespace, s.Name, err)
		}
		return nil
	})
}

// getTaskRun reads a TaskRun from the informer, or from the API when the
// informer has not seen it: one created a moment ago may not be cached yet,
// and must not be taken for a deleted one.
func (r *Reconciler) getTaskRun(ctx context.Context, ref v1alpha1.TaskRunReference) (*pipelinev1.TaskRun, error) {
	tr, err := r.taskRunLister.TaskRuns(ref.Namespace).Get(ref.Name)
	if apierrs.IsNotFound(err) {
		return r.pipelineClient.TektonV1().TaskRuns(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	}
	return tr, err
}

// startCommit resolves the source and creates the commit TaskRun. Anything
// that makes the request impossible fails the snapshot before any TaskRun
// exists.
func (r *Reconciler) startCommit(ctx context.Context, s *v1alpha1.SandboxSnapshot, now metav1.Time) pkgreconciler.Event {
	cfg := config.FromContext(ctx).Snapshot
	if cfg.Err != nil {
		reason := v1alpha1.ReasonInvalidConfiguration
		if errors.Is(cfg.Err, config.ErrRegistryNotConfigured) {
			reason = v1alpha1.ReasonRegistryNotConfigured
		}
		logging.FromContext(ctx).Errorw("Cannot snapshot with the current configuration", "error", cfg.Err)
		s.Status.MarkFailed(now, reason, "%v", cfg.Err)
		return r.failed(ctx, s)
	}
	if err := s.Validate(ctx); err != nil {
		s.Status.MarkFailed(now, v1alpha1.ReasonInvalidSpec, "SandboxSnapshot %s/%s: %v", s.Namespace, s.Name, err)
		return r.failed(ctx, s)
	}
	src, err := r.resolveSource(ctx, s, cfg)
	if err != nil {
		var pe *permanentError
		if !errors.As(err, &pe) {
			return err
		}
		s.Status.MarkFailed(now, pe.reason, "%v", pe)
		return r.failed(ctx, s)
	}

	want := resources.MakeTaskRun(s, src, cfg, r.namespace)
	tr, created, err := r.ensureTaskRun(ctx, s, want)
	if err != nil {
		return err
	}
	s.Status.MarkCommitting(src.Pod.Name, src.Pod.Spec.NodeName, src.Containers,
		v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name}, now)
	if created {
		controller.GetEventRecorder(ctx).Eventf(s, corev1.EventTypeNormal, "TaskRunCreated",
			"Created TaskRun %s/%s to commit pod %s on node %s", tr.Namespace, tr.Name, src.Pod.Name, src.Pod.Spec.NodeName)
	}
	return nil
}

// ensureTaskRun creates want, or adopts the TaskRun of that name when an
// earlier pass made it for this same snapshot but failed to record it. It
// reports whether it created the TaskRun.
func (r *Reconciler) ensureTaskRun(ctx context.Context, s *v1alpha1.SandboxSnapshot, want *pipelinev1.TaskRun) (*pipelinev1.TaskRun, bool, error) {
	tr, err := r.taskRunLister.TaskRuns(want.Namespace).Get(want.Name)
	if apierrs.IsNotFound(err) {
		tr, err = r.pipelineClient.TektonV1().TaskRuns(want.Namespace).Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			return tr, true, nil
		}
		if !apierrs.IsAlreadyExists(err) {
			return nil, false, fmt.Errorf("creating TaskRun %s/%s: %w", want.Namespace, want.Name, err)
		}
		// The informer has not seen it yet.
		tr, err = r.pipelineClient.TektonV1().TaskRuns(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, false, fmt.Errorf("getting TaskRun %s/%s: %w", want.Namespace, want.Name, err)
	}
	if tr.Labels[resources.SnapshotUIDLabel] != string(s.UID) {
		return nil, false, fmt.Errorf("TaskRun %s/%s exists but belongs to another SandboxSnapshot (uid %q); waiting for it to be deleted",
			tr.Namespace, tr.Name, tr.Labels[resources.SnapshotUIDLabel])
	}
	return tr, false, nil
}

// mirror copies the commit TaskRun's Succeeded condition into the snapshot.
func (r *Reconciler) mirror(ctx context.Context, s *v1alpha1.SandboxSnapshot, tr *pipelinev1.TaskRun, now metav1.Time) pkgreconciler.Event {
	cond := tr.Status.GetCondition(apis.ConditionSucceeded)
	switch {
	case cond == nil || cond.IsUnknown():
		return nil
	case cond.IsTrue():
		digests, pause, err := commitResults(tr, len(s.Status.Containers))
		if err != nil {
			s.Status.MarkFailed(now, v1alpha1.ReasonCommitResultsInvalid, "%v", err)
			return r.failed(ctx, s)
		}
		s.Status.MarkSucceeded(digests, pause, now)
		controller.GetEventRecorder(ctx).Eventf(s, corev1.EventTypeNormal, v1alpha1.ReasonSucceeded,
			"Pushed %d image(s) from pod %s", len(digests), s.Status.SourcePodName)
		return nil
	default:
		pod, err := r.sourcePod(ctx, s)
		if err != nil {
			return err
		}
		reason, message := failureReason(cond), failureMessage(tr, cond)
		switch {
		case pod == nil:
			reason = v1alpha1.ReasonSourcePodNotFound
			message = fmt.Sprintf("pod %s/%s went away during the commit; %s", s.Namespace, s.Status.SourcePodName, message)
		case mayHavePaused(tr):
			if err := r.thaw(ctx, s, pod, now); err != nil {
				return err
			}
		}
		s.Status.MarkFailed(now, reason, "%s", message)
		return r.failed(ctx, s)
	}
}

// sourcePod returns the pod being committed, or nil when it is gone: deleted,
// being deleted, or replaced by a new pod of the same name since the commit
// started.
func (r *Reconciler) sourcePod(ctx context.Context, s *v1alpha1.SandboxSnapshot) (*corev1.Pod, error) {
	pod, err := r.kubeClient.CoreV1().Pods(s.Namespace).Get(ctx, s.Status.SourcePodName, metav1.GetOptions{})
	switch {
	case apierrs.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("getting pod %s/%s: %w", s.Namespace, s.Status.SourcePodName, err)
	case pod.DeletionTimestamp != nil, pod.Spec.NodeName != s.Status.SourceNodeName,
		s.Status.StartTime != nil && pod.CreationTimestamp.After(s.Status.StartTime.Time):
		return nil, nil
	}
	return pod, nil
}

// failed reports a snapshot's failure with an event.
func (r *Reconciler) failed(ctx context.Context, s *v1alpha1.SandboxSnapshot) pkgreconciler.Event {
	failed := s.Status.GetCondition(v1alpha1.ConditionFailed)
	controller.GetEventRecorder(ctx).Event(s, corev1.EventTypeWarning, failed.Reason, failed.Message)
	return nil
}

// thaw starts an unpause TaskRun on the source pod's node and records it,
// for a commit pod that may have ended with the sandbox paused.
func (r *Reconciler) thaw(ctx context.Context, s *v1alpha1.SandboxSnapshot, pod *corev1.Pod, now metav1.Time) error {
	want := resources.MakeUnpauseTaskRun(s, pod, config.FromContext(ctx).Snapshot, r.namespace)
	tr, _, err := r.ensureTaskRun(ctx, s, want)
	if err != nil {
		return err
	}
	s.Status.MarkThawing(v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name}, pod.Name, now)
	controller.GetEventRecorder(ctx).Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonThawing,
		"The commit pod may have left pod %s paused; TaskRun %s/%s is unpausing it", pod.Name, tr.Namespace, tr.Name)
	return nil
}

// observeThaw records how the unpause TaskRun of a failed snapshot ended.
func (r *Reconciler) observeThaw(ctx context.Context, s *v1alpha1.SandboxSnapshot, now metav1.Time) pkgreconciler.Event {
	ref := s.Status.UnpauseTaskRunRef
	tr, err := r.getTaskRun(ctx, *ref)
	switch {
	case apierrs.IsNotFound(err):
		s.Status.MarkThawFailed(now, "TaskRun %s/%s was deleted before it completed; pod %s may still be paused",
			ref.Namespace, ref.Name, s.Status.SourcePodName)
	case err != nil:
		return err
	case !tr.IsDone():
		return nil
	case tr.IsSuccessful():
		s.Status.MarkThawed(now)
		controller.GetEventRecorder(ctx).Eventf(s, corev1.EventTypeNormal, v1alpha1.ReasonThawed,
			"TaskRun %s/%s unpaused pod %s", ref.Namespace, ref.Name, s.Status.SourcePodName)
		return nil
	default:
		cond := tr.Status.GetCondition(apis.ConditionSucceeded)
		s.Status.MarkThawFailed(now, "pod %s may still be paused: %s", s.Status.SourcePodName, failureMessage(tr, cond))
	}
	thawed := s.Status.GetCondition(v1alpha1.ConditionSandboxThawed)
	controller.GetEventRecorder(ctx).Event(s, corev1.EventTypeWarning, thawed.Reason, thawed.Message)
	return nil
}

// FinalizeKind cleans up a deleted snapshot's TaskRuns: it cancels and
// deletes the commit TaskRun, and lets an unpause TaskRun finish first, for
// as long as its own timeout, so that the sandbox is not left paused.
func (r *Reconciler) FinalizeKind(ctx context.Context, s *v1alpha1.SandboxSnapshot) pkgreconciler.Event {
	unpause, err := r.taskRunLister.TaskRuns(r.namespace).Get(names.UnpauseTaskRun(s))
	switch {
	case apierrs.IsNotFound(err):
	case err != nil:
		return err
	case !unpause.IsDone() && r.clock.Since(unpause.CreationTimestamp.Time) < resources.UnpauseTimeout:
		return controller.NewRequeueAfter(unpauseWait)
	default:
		if err := r.deleteTaskRun(ctx, unpause); err != nil {
			return err
		}
	}

	commit, err := r.taskRunLister.TaskRuns(r.namespace).Get(names.CommitTaskRun(s))
	if apierrs.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if commit.Labels[resources.SnapshotUIDLabel] != string(s.UID) {
		return nil
	}
	if !commit.IsDone() && !commit.IsCancelled() {
		// Cancelling first lets Tekton stop the step gracefully and record why;
		// the committer thaws the sandbox on the SIGTERM that follows.
		patch := []byte(`{"spec":{"status":"` + pipelinev1.TaskRunSpecStatusCancelled + `","statusMessage":"SandboxSnapshot deleted"}}`)
		if _, err := r.pipelineClient.TektonV1().TaskRuns(commit.Namespace).Patch(ctx, commit.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrs.IsNotFound(err) {
			return fmt.Errorf("cancelling TaskRun %s/%s: %w", commit.Namespace, commit.Name, err)
		}
	}
	return r.deleteTaskRun(ctx, commit)
}

func (r *Reconciler) deleteTaskRun(ctx context.Context, tr *pipelinev1.TaskRun) error {
	err := r.pipelineClient.TektonV1().TaskRuns(tr.Namespace).Delete(ctx, tr.Name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &tr.UID},
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
	if err != nil && !apierrs.IsNotFound(err) {
		return fmt.Errorf("deleting TaskRun %s/%s: %w", tr.Namespace, tr.Name, err)
	}
	return nil
}
