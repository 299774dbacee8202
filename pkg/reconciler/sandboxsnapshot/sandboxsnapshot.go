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
	"slices"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	pipelineclientset "github.com/tektoncd/pipeline/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	batchv1listers "k8s.io/client-go/listers/batch/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	sandboxclientset "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/clientset/versioned"
	snapshotreconciler "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/injection/reconciler/sandbox/v1alpha1/sandboxsnapshot"
	snapshotlisters "github.com/opensandbox-group/sandbox-snapshot-operator/pkg/client/listers/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry"
)

// Reconciler maps SandboxSnapshots onto commit TaskRuns. It relies on no
// status field that OpenSandbox's CRD prunes (taskRunRef, startTime, thaw,
// ...): TaskRuns are found by deterministic name and the snapshot UID label.
type Reconciler struct {
	kubeClient     kubernetes.Interface
	sandboxClient  sandboxclientset.Interface
	pipelineClient pipelineclientset.Interface
	taskRunIndex   cache.Indexer // the TaskRun informer's, with taskRunIndexers
	snapshotLister snapshotlisters.SandboxSnapshotLister
	sandboxLister  snapshotlisters.BatchSandboxLister
	podLister      corev1listers.PodLister  // slimmed: see podinformer
	jobLister      batchv1listers.JobLister // OpenSandbox's Jobs only: OpenSandboxJobSelector
	clock          clock.PassiveClock
	// namespace holds the TaskRuns, the commit Task and the push Secret.
	namespace string
	commits   *commitGate
	writes    *ownWrites
	registry  registry.For
	checks    *imageChecks
	metrics   *metrics
}

var (
	_ snapshotreconciler.Interface = (*Reconciler)(nil)
	_ snapshotreconciler.Finalizer = (*Reconciler)(nil)
)

// ReconcileKind implements Interface.ReconcileKind. It writes the status
// itself (SkipStatusUpdates): after patching in the finalizer, the generated
// reconciler would write it from its older informer copy, and conflict.
func (r *Reconciler) ReconcileKind(ctx context.Context, s *v1alpha1.SandboxSnapshot) pkgreconciler.Event {
	replaced := []string{s.ResourceVersion}
	if cached, err := r.snapshotLister.SandboxSnapshots(s.Namespace).Get(s.Name); err == nil && cached.ResourceVersion != s.ResourceVersion {
		replaced = append(replaced, cached.ResourceVersion)
	}
	before := s.Status.DeepCopy()
	event := r.reconcile(ctx, s)
	if equality.Semantic.DeepEqual(before, &s.Status) {
		return event
	}
	ended, err := r.updateStatus(ctx, s, before)
	if err != nil {
		if apierrs.IsNotFound(err) {
			// Gone mid-pass, finalizer already off: nothing else cleans up.
			return r.deleteTaskRunsOf(ctx, s)
		}
		return err
	}
	// Under OpenSandbox's CRD, which prunes our report fields, a write may
	// leave the version as it was: that copy is current.
	r.writes.replaced(types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, slices.DeleteFunc(replaced, func(v string) bool {
		return v == s.ResourceVersion
	})...)
	if ended {
		r.metrics.finished(ctx, s, r.cachedCommit(s))
	}
	return event
}

func (r *Reconciler) reconcile(ctx context.Context, s *v1alpha1.SandboxSnapshot) pkgreconciler.Event {
	now := metav1.NewTime(r.clock.Now())
	// Terminal phases are frozen: the thaw goes on, then retention and image checks.
	if s.Status.IsTerminal() {
		var thaw pkgreconciler.Event
		thawing := false
		if s.Status.Phase == v1alpha1.PhaseFailed {
			thawing, thaw = r.observeThaw(ctx, s)
		}
		if thawing {
			return thaw
		}
		return sooner(thaw, sooner(r.retainTaskRuns(ctx, s), r.checkImages(ctx, s)))
	}
	s.Status.ObservedGeneration = s.Generation
	s.Status.InitializeConditions(now)

	committing := s.Status.Phase == v1alpha1.PhaseCommitting
	tr, err := r.findTaskRun(ctx, names.CommitTaskRun(s), committing)
	if err != nil {
		return err
	}
	if tr != nil && !ownedBy(tr, s) {
		// Left by an earlier snapshot of this name: OpenSandbox reuses <sandbox>-pause.
		if err := r.deleteOrphan(ctx, tr); err != nil {
			return err
		}
		if !committing {
			s.Status.MarkWaiting(now, "Waiting for TaskRun %s/%s of an earlier SandboxSnapshot %s/%s (uid %s) to be deleted",
				tr.Namespace, tr.Name, s.Namespace, s.Name, tr.Labels[sandbox.SnapshotUIDLabel])
			return nil
		}
		tr = nil
	}
	if tr == nil {
		job, err := r.openSandboxCommit(ctx, s)
		if err != nil {
			return err
		}
		if job != nil {
			return r.awaitOpenSandboxJob(ctx, s, job, now)
		}
	}
	switch {
	case tr != nil:
		if !committing {
			if err := r.adopt(s, tr, now); err != nil {
				return err
			}
		}
		return r.mirror(ctx, s, tr, now)
	case committing:
		return r.taskRunMissing(ctx, s, now)
	default:
		return r.startCommit(ctx, s, now)
	}
}

// startCommit creates the commit TaskRun unless another commit of the pod is
// in flight, or fails the snapshot if the request cannot be met.
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
	if _, err := cfg.ImageDeletionPolicyOf(s.Namespace, s.Name, s.Annotations); err != nil {
		s.Status.MarkFailed(now, v1alpha1.ReasonInvalidSpec, "%v", err)
		return r.failed(ctx, s)
	}
	mode, err := cfg.SnapshotModeOf(s.Namespace, s.Name, s.Annotations)
	if err != nil {
		s.Status.MarkFailed(now, v1alpha1.ReasonInvalidSpec, "%v", err)
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
	src.Mode = mode

	unlock := r.commits.lock(src.Pod.UID)
	defer unlock()
	podTaskRuns, err := r.indexedTaskRuns(podIndex, podKey(r.namespace, src.Pod.UID))
	if err != nil {
		return err
	}
	if b := r.commits.holder(podTaskRuns, src.Pod.UID, s, r.clock.Now()); b != nil {
		s.Status.MarkWaiting(now, "Waiting for %s to finish with pod %s", b.holder, src.Pod.Name)
		return controller.NewRequeueAfter(b.recheck)
	}
	onNode, err := r.settingsOn(ctx, cfg, src.Pod.Spec.NodeName)
	if err != nil {
		return err
	}
	tr, created, err := r.createTaskRun(ctx, s, resources.MakeTaskRun(s, src, onNode, r.namespace))
	if err != nil {
		return err
	}
	if created {
		r.commits.created(tr)
		r.metrics.taskRunCreated(ctx, s, r.clock.Now())
	}
	// No event: a snapshot that succeeds sends one, Succeeded.
	s.Status.MarkCommitting(now, src.Pod.Name, src.Pod.Spec.NodeName, src.Containers,
		v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name}, tr.CreationTimestamp)
	return nil
}

// adopt records a commit TaskRun an earlier pass created but did not record.
func (r *Reconciler) adopt(s *v1alpha1.SandboxSnapshot, tr *pipelinev1.TaskRun, now metav1.Time) error {
	pod, node, containers, err := resources.SourceOf(tr)
	if err != nil {
		return err
	}
	s.Status.MarkCommitting(now, pod, node, containers, v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name}, tr.CreationTimestamp)
	return nil
}

// sourcePod returns the pod being committed, or nil when it is deleted,
// moved, or replaced by another of the same name (when uid is known).
func (r *Reconciler) sourcePod(ctx context.Context, s *v1alpha1.SandboxSnapshot, uid types.UID) (*corev1.Pod, error) {
	pod, err := r.cachedPods(s.Namespace).get(ctx, s.Status.SourcePodName)
	switch {
	case apierrs.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("getting pod %s/%s: %w", s.Namespace, s.Status.SourcePodName, err)
	case pod.DeletionTimestamp != nil, pod.Spec.NodeName != s.Status.SourceNodeName, uid != "" && pod.UID != uid:
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

// sooner combines two outcomes of a pass: an error, else the sooner requeue.
func sooner(a, b pkgreconciler.Event) pkgreconciler.Event {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	aq, ad := controller.IsRequeueKey(a)
	bq, bd := controller.IsRequeueKey(b)
	switch {
	case !aq:
		return a
	case !bq:
		return b
	case bd < ad:
		return b
	}
	return a
}
