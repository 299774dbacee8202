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
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
)

// cleanupWait is how often deletion re-checks a TaskRun whose event it awaits.
const cleanupWait = 10 * time.Second

// FinalizeKind implements Interface.FinalizeKind. It never leaves the sandbox
// paused: it cancels a running commit, thaws after one that may have paused
// it, and waits for each up to resources.UnpauseTimeout before deleting the
// TaskRuns and the images.
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

// release starts the TaskRun that removes a Succeed snapshot's images from its
// node. It is not waited for: OpenSandbox's next pause waits for s to go.
func (r *Reconciler) release(ctx context.Context, s *v1alpha1.SandboxSnapshot) error {
	if s.Status.Phase != v1alpha1.PhaseSucceed || s.Status.SourceNodeName == "" {
		return nil
	}
	_, _, err := r.createTaskRun(ctx, s, resources.MakeReleaseTaskRun(s, config.FromContext(ctx).Snapshot, r.namespace))
	return err
}

// sweepTaskRuns deletes the done TaskRuns left for a snapshot that is gone,
// and cancels a running commit so that its committer thaws the sandbox.
func (r *Reconciler) sweepTaskRuns(ctx context.Context, namespace, name string) error {
	trs, err := r.indexedTaskRuns(snapshotIndex, snapshotKey(r.namespace, namespace, name))
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
