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
	"encoding/json"
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
)

// This file handles what OpenSandbox's own SandboxSnapshot controller left on
// the snapshots it reconciled before a cluster switched over to this
// operator: its finalizer, and commit Jobs in flight. This operator never
// writes a Job; it only reads them.

// openSandboxCommit returns the commit Job that OpenSandbox's own controller
// started for s before the switch, or nil. That controller adds its finalizer
// before it makes any Job, so s without it has none. The Job, <name>-commit
// in s's namespace, must be controlled by s itself: OpenSandbox's pause
// reuses the name <sandbox>-pause, and the Job of an earlier snapshot of that
// name lingers until the garbage collector deletes it. A Job the informer has
// not seen yet is read from the API, lest it pass for absent.
func (r *Reconciler) openSandboxCommit(ctx context.Context, s *v1alpha1.SandboxSnapshot) (*batchv1.Job, error) {
	if !slices.Contains(s.Finalizers, sandbox.OpenSandboxSnapshotFinalizer) {
		return nil, nil
	}
	name := names.OpenSandboxCommitJob(s)
	job, err := r.jobLister.Jobs(s.Namespace).Get(name)
	if apierrs.IsNotFound(err) {
		job, err = r.kubeClient.BatchV1().Jobs(s.Namespace).Get(ctx, name, metav1.GetOptions{})
	}
	switch {
	case apierrs.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("getting Job %s/%s: %w", s.Namespace, name, err)
	case !metav1.IsControlledBy(job, s):
		return nil, nil
	}
	return job, nil
}

// awaitOpenSandboxJob keeps s as it is, Pending or Committing, while
// OpenSandbox's commit Job runs: its pod may hold the sandbox paused, and a
// commit of this operator's would find it frozen by another. Once the Job has
// ended, s fails: the Job's result (images named and reported in OpenSandbox's
// way, read from its pod) is not taken over. OpenSandbox's pause then
// deletes s and makes a new snapshot, which this operator commits.
func (r *Reconciler) awaitOpenSandboxJob(ctx context.Context, s *v1alpha1.SandboxSnapshot, job *batchv1.Job, now metav1.Time) pkgreconciler.Event {
	what := fmt.Sprintf("Job %s/%s, the commit that OpenSandbox's own controller started before the switch to this operator", job.Namespace, job.Name)
	how, ended := resources.OpenSandboxJobEnded(job)
	if ended {
		s.Status.MarkFailed(now, v1alpha1.ReasonOpenSandboxJobEnded,
			"%s, %s; this operator does not take its result over: snapshot the sandbox again (OpenSandbox's pause deletes this snapshot and does so by itself)",
			what, how)
		return r.failed(ctx, s)
	}
	if ready := s.Status.GetCondition(v1alpha1.ConditionReady); ready != nil && ready.Reason == v1alpha1.ReasonWaitingForOpenSandboxJob {
		return nil
	}
	s.Status.MarkWaitingForOpenSandboxJob(now, "Waiting for %s, to end", what)
	ready := s.Status.GetCondition(v1alpha1.ConditionReady)
	controller.GetEventRecorder(ctx).Event(s, corev1.EventTypeNormal, ready.Reason, ready.Message)
	return nil
}

// withoutOpenSandboxFinalizer returns finalizers without OpenSandbox's, and
// every other one as it was.
func withoutOpenSandboxFinalizer(finalizers []string) []string {
	return slices.DeleteFunc(append([]string{}, finalizers...), func(f string) bool {
		return f == sandbox.OpenSandboxSnapshotFinalizer
	})
}

// dropOpenSandboxFinalizer removes OpenSandbox's finalizer, and only that,
// from s, a deleted snapshot without ours: one deleted before this operator's
// first pass over it. With OpenSandbox's reconciler off, nothing else would.
// Its handleDeletion did nothing else that is still owed: it deleted the
// snapshot's commit and unpause Jobs, which the garbage collector deletes
// anyway, as s controls them. The patch holds s's resource version, so a
// change meanwhile fails it, and the next pass reads that change.
func (r *Reconciler) dropOpenSandboxFinalizer(ctx context.Context, s *v1alpha1.SandboxSnapshot) error {
	if !slices.Contains(s.Finalizers, sandbox.OpenSandboxSnapshotFinalizer) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers":      withoutOpenSandboxFinalizer(s.Finalizers),
		"resourceVersion": s.ResourceVersion,
	}})
	if err != nil {
		return err
	}
	if _, err := r.sandboxClient.SandboxV1alpha1().SandboxSnapshots(s.Namespace).Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("removing finalizer %s from SandboxSnapshot %s/%s: %w", sandbox.OpenSandboxSnapshotFinalizer, s.Namespace, s.Name, err)
	}
	logging.FromContext(ctx).Infow("Removed OpenSandbox's finalizer from a deleted snapshot", "finalizer", sandbox.OpenSandboxSnapshotFinalizer)
	return nil
}
