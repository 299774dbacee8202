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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
)

// cleanupWait is how often deletion re-checks a TaskRun it waits for, in
// case the TaskRun's own event is missed.
const cleanupWait = 10 * time.Second

// FinalizeKind cleans up a deleted snapshot's TaskRuns without leaving the
// sandbox paused. A running commit is cancelled and waited for; if it may
// have ended with the sandbox paused, an unpause TaskRun runs and is waited
// for; then both TaskRuns are deleted. Each wait is bounded by
// resources.UnpauseTimeout, after which the finalizer comes off anyway.
// Last, a release TaskRun removes the images the commit kept on the node,
// and under the Delete image deletion policy the images go (images.go).
func (r *Reconciler) FinalizeKind(ctx context.Context, s *v1alpha1.SandboxSnapshot) pkgreconciler.Event {
	commit, err := r.ownTaskRun(ctx, s, names.CommitTaskRun(s))
	if err != nil {
		return err
	}
	unpause, err := r.ownTaskRun(ctx, s, names.UnpauseTaskRun(s))
	if err != nil {
		return err
	}
	deleting := r.clock.Since(s.DeletionTimestamp.Time)

	if commit != nil && !commit.IsDone() && deleting < resources.UnpauseTimeout {
		if err := r.cancelTaskRun(ctx, commit); err != nil {
			return err
		}
		return controller.NewRequeueAfter(cleanupWait)
	}
	if commit != nil && commit.IsDone() && unpause == nil && !commit.IsSuccessful() && resources.MayHavePaused(commit) && deleting < resources.UnpauseTimeout {
		pod, err := r.sourcePod(ctx, s, types.UID(commit.Labels[sandbox.SourcePodUIDLabel]))
		if err != nil {
			return err
		}
		if pod != nil {
			if err := r.thaw(ctx, s, pod); err != nil {
				return err
			}
			return controller.NewRequeueAfter(cleanupWait)
		}
	}
	if unpause != nil && !unpause.IsDone() && r.clock.Since(unpause.CreationTimestamp.Time) < resources.UnpauseTimeout {
		return controller.NewRequeueAfter(cleanupWait)
	}
	if deleting >= resources.UnpauseTimeout && (commit != nil && !commit.IsDone() || unpause != nil && !unpause.IsDone()) {
		controller.GetEventRecorder(ctx).Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonThawFailed,
			"Gave up waiting for the TaskRuns of SandboxSnapshot %s/%s after %v; pod %s may still be paused",
			s.Namespace, s.Name, resources.UnpauseTimeout, s.Status.SourcePodName)
	}
	for _, tr := range []*pipelinev1.TaskRun{unpause, commit} {
		if tr == nil {
			continue
		}
		if err := r.deleteTaskRun(ctx, tr, metav1.DeletePropagationBackground); err != nil {
			return err
		}
	}
	if err := r.release(ctx, s); err != nil {
		return err
	}
	return r.deleteImages(ctx, s)
}

// release starts, for a Succeed snapshot, the TaskRun that removes the
// images its commit kept on the node for a resume. The finalizer does not
// wait for it (OpenSandbox's next pause of the sandbox waits for this
// snapshot to go); the TaskRun is deleted once it has ended (sweepTaskRuns).
func (r *Reconciler) release(ctx context.Context, s *v1alpha1.SandboxSnapshot) error {
	if s.Status.Phase != v1alpha1.PhaseSucceed || s.Status.SourceNodeName == "" {
		return nil
	}
	_, _, err := r.createTaskRun(ctx, s, resources.MakeReleaseTaskRun(s, config.FromContext(ctx).Snapshot, r.namespace))
	return err
}

// sweepTaskRuns cleans up the TaskRuns left for a snapshot of this name
// that is gone: its finalizer was forced off, or its release TaskRun ended
// after the finalizer came off. Done ones are deleted; a running commit is
// cancelled first, so that its committer thaws the sandbox, and deleted
// once it has ended (its end is an event of its own).
func (r *Reconciler) sweepTaskRuns(ctx context.Context, namespace, name string) error {
	trs, err := r.taskRunLister.TaskRuns(r.namespace).List(labels.SelectorFromSet(labels.Set{
		sandbox.SnapshotNamespaceLabel: namespace, sandbox.SnapshotNameLabel: name}))
	if err != nil {
		return err
	}
	for _, tr := range trs {
		switch {
		case tr.DeletionTimestamp != nil:
		case tr.IsDone():
			err = r.deleteTaskRun(ctx, tr, metav1.DeletePropagationBackground)
		case resources.IsCommit(tr):
			err = r.cancelTaskRun(ctx, tr)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// deleteTaskRunsOf deletes the TaskRuns made for s, a snapshot that is gone.
func (r *Reconciler) deleteTaskRunsOf(ctx context.Context, s *v1alpha1.SandboxSnapshot) error {
	for _, name := range []string{names.CommitTaskRun(s), names.UnpauseTaskRun(s)} {
		tr, err := r.ownTaskRun(ctx, s, name)
		if err == nil && tr != nil {
			err = r.deleteTaskRun(ctx, tr, metav1.DeletePropagationBackground)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
