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
	"fmt"
	"slices"
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
)

// cleanupWait is how often deletion re-checks a TaskRun whose event it awaits.
const cleanupWait = 10 * time.Second

// FinalizeKind implements Interface.FinalizeKind. It never leaves the sandbox
// paused: it cancels a running commit, and keeps the finalizer while a commit
// may have left the pod paused until a thaw has succeeded or the pod is gone,
// retrying failed unpause TaskRuns as a live snapshot does. Only then does it
// release the images kept on the node, delete those in the registry and,
// last, the TaskRuns. A cached copy of a snapshot already gone is left alone.
//
// OpenSandbox's own finalizer, on snapshots its controller reconciled before
// the switch to this operator, goes with ours: nothing else removes it once
// that controller is off. Its handleDeletion only deleted the snapshot's
// Jobs, which the garbage collector deletes anyway (the snapshot controls
// them), so nothing of it is owed.
func (r *Reconciler) FinalizeKind(ctx context.Context, s *v1alpha1.SandboxSnapshot) pkgreconciler.Event {
	live, err := r.live(ctx, s)
	switch {
	case live == nil || err != nil:
		return err
	case !slices.Contains(live.Finalizers, FinalizerName):
		// Ours is off already (s is a stale copy), or was never on.
		return r.dropOpenSandboxFinalizer(ctx, live)
	}
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
	if unpause == nil || !unpause.IsSuccessful() {
		if event, waiting := r.thawBeforeDeletion(ctx, s); waiting {
			return event
		}
	}
	if deleting >= resources.UnpauseTimeout && commit != nil && !commit.IsDone() {
		controller.GetEventRecorder(ctx).Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonThawFailed,
			"Gave up waiting for the commit TaskRun of SandboxSnapshot %s/%s after %v; pod %s may still be paused",
			s.Namespace, s.Name, resources.UnpauseTimeout, s.Status.SourcePodName)
	}
	if err := r.release(ctx, s); err != nil {
		return err
	}
	if err := r.deleteImages(ctx, s, commit); err != nil {
		return err
	}
	// The unpause TaskRun goes last: until the finalizer does, its success
	// is what tells a pass that retries this one not to thaw again.
	for _, tr := range []*pipelinev1.TaskRun{commit, unpause} {
		if tr == nil {
			continue
		}
		if err := r.deleteTaskRun(ctx, tr, metav1.DeletePropagationBackground); err != nil {
			return err
		}
	}
	// The generated reconciler removes ours from s's finalizers, in one patch
	// that holds s's resource version.
	s.Finalizers = withoutOpenSandboxFinalizer(s.Finalizers)
	return nil
}

// live reads s from the API server, or returns nil if s, a cached copy, has
// left it. The pass that the deletion of its TaskRuns queues may read such a
// copy once the finalizer is off: acting on it would thaw, or release, again.
func (r *Reconciler) live(ctx context.Context, s *v1alpha1.SandboxSnapshot) (*v1alpha1.SandboxSnapshot, error) {
	live, err := r.sandboxClient.SandboxV1alpha1().SandboxSnapshots(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	switch {
	case apierrs.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading SandboxSnapshot %s/%s: %w", s.Namespace, s.Name, err)
	case live.UID != s.UID:
		return nil, nil
	}
	return live, nil
}

// thawBeforeDeletion follows the thaw of a deleted snapshot whose commit may
// have left its pod paused, as observeThaw does for a live one (whose status
// it reads but, as all of FinalizeKind, does not write). It reports whether
// deletion must wait, with the error that keeps the finalizer, and says in a
// Warning event which sandbox it waits for.
func (r *Reconciler) thawBeforeDeletion(ctx context.Context, s *v1alpha1.SandboxSnapshot) (pkgreconciler.Event, bool) {
	waiting, event := r.observeThaw(ctx, s)
	if !waiting {
		return nil, false
	}
	if requeue, _ := controller.IsRequeueKey(event); event != nil && !requeue {
		return event, true
	}
	why := "its unpause TaskRun is running"
	if s.Status.Thaw != nil {
		why = s.Status.Thaw.Message
	}
	controller.GetEventRecorder(ctx).Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonDeletionWaitsForThaw,
		"SandboxSnapshot %s/%s is deleted once sandbox %s (pod %s) is thawed: %s",
		s.Namespace, s.Name, s.Spec.SandboxName, s.Status.SourcePodName, why)
	if event == nil {
		event = controller.NewRequeueAfter(cleanupWait)
	}
	return event, true
}

// release starts the TaskRun that removes a Succeed snapshot's images from its
// node. It is not waited for: OpenSandbox's next pause waits for s to go.
func (r *Reconciler) release(ctx context.Context, s *v1alpha1.SandboxSnapshot) error {
	if s.Status.Phase != v1alpha1.PhaseSucceed || s.Status.SourceNodeName == "" {
		return nil
	}
	cfg, err := r.settingsOn(ctx, config.FromContext(ctx).Snapshot, s.Status.SourceNodeName)
	if err != nil {
		return err
	}
	_, _, err = r.createTaskRun(ctx, s, resources.MakeReleaseTaskRun(s, cfg, r.namespace))
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
