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
	"time"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
)

// podStartGrace is how long a commit pod may be pending before its events are read.
const podStartGrace = 10 * time.Second

// mirror copies the commit TaskRun's Succeeded condition into the snapshot.
func (r *Reconciler) mirror(ctx context.Context, s *v1alpha1.SandboxSnapshot, tr *pipelinev1.TaskRun, now metav1.Time) pkgreconciler.Event {
	cond := tr.Status.GetCondition(apis.ConditionSucceeded)
	switch {
	case cond == nil || cond.IsUnknown():
		return r.mirrorRunning(ctx, s, tr, cond, now)
	case cond.IsTrue():
		digests, pause, err := resources.CommitResults(tr, len(s.Status.Containers))
		if err != nil {
			s.Status.MarkFailed(now, v1alpha1.ReasonCommitResultsInvalid, "%v", err)
			return r.failed(ctx, s)
		}
		// No event: the Ready condition names the TaskRun, for good.
		s.Status.MarkSucceeded(now, digests, pause, v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name})
		if resources.FellBackToFilesystem(tr) {
			s.Status.MarkFellBackToFilesystem(now)
			controller.GetEventRecorder(ctx).Eventf(s, corev1.EventTypeWarning, v1alpha1.ReasonMemorySnapshotFellBack,
				"Node %s could not take this memory snapshot (see: tkn taskrun logs %s -n %s); took a filesystem snapshot, as memory-fallback allows",
				s.Status.SourceNodeName, tr.Name, tr.Namespace)
		}
		return nil
	default:
		pod, err := r.sourcePod(ctx, s, types.UID(tr.Labels[sandbox.SourcePodUIDLabel]))
		if err != nil {
			return err
		}
		reason, message := resources.FailureReason(tr, cond), resources.FailureMessage(tr, cond)
		switch {
		case pod == nil:
			reason = v1alpha1.ReasonSourcePodNotFound
			message = fmt.Sprintf("pod %s/%s went away during the commit; %s", s.Namespace, s.Status.SourcePodName, message)
		case resources.MayHavePaused(tr):
			if err := r.thaw(ctx, s, pod); err != nil {
				return err
			}
		}
		s.Status.MarkFailed(now, reason, "%s", message)
		return r.failed(ctx, s)
	}
}

// mirrorRunning reports a commit pod that cannot start. The scheduler's reason
// is in the TaskRun's condition; the kubelet's (a volume that does not mount)
// only in the pod's events, which Tekton ignores, so they are read here.
func (r *Reconciler) mirrorRunning(ctx context.Context, s *v1alpha1.SandboxSnapshot, tr *pipelinev1.TaskRun, cond *apis.Condition, now metav1.Time) pkgreconciler.Event {
	why, blocked := resources.PodCannotStart(cond)
	var recheck time.Duration
	if !blocked && resources.PodPending(cond) && tr.Status.PodName != "" {
		if waited := now.Sub(tr.CreationTimestamp.Time); waited < podStartGrace {
			return controller.NewRequeueAfter(podStartGrace - waited)
		}
		warning, err := r.podWarning(ctx, tr.Status.PodName)
		if err != nil {
			return err
		}
		why, blocked = warning, warning != ""
		if !blocked {
			recheck = podStartGrace
		}
	}
	ready := s.Status.GetCondition(v1alpha1.ConditionReady)
	switch {
	case blocked:
		s.Status.MarkCommitPodPending(now, "TaskRun %s/%s cannot start its pod on node %s yet (%s): %s",
			tr.Namespace, tr.Name, s.Status.SourceNodeName, cond.Reason, why)
	case ready != nil && ready.Reason == v1alpha1.ReasonCommitPodPending:
		s.Status.MarkCommitRunning(now, v1alpha1.TaskRunReference{Namespace: tr.Namespace, Name: tr.Name})
	}
	if recheck > 0 {
		return controller.NewRequeueAfter(recheck)
	}
	return nil
}

// podWarning returns a commit pod's latest Warning as "<reason>: <message>", or "".
func (r *Reconciler) podWarning(ctx context.Context, pod string) (string, error) {
	events, err := r.kubeClient.CoreV1().Events(r.namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod, "type": corev1.EventTypeWarning}.String(),
	})
	if err != nil {
		return "", fmt.Errorf("listing the events of pod %s/%s: %w", r.namespace, pod, err)
	}
	var latest *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if e.InvolvedObject.Name != pod || e.Type != corev1.EventTypeWarning {
			continue
		}
		if latest == nil || lastSeen(e).After(lastSeen(latest)) {
			latest = e
		}
	}
	if latest == nil {
		return "", nil
	}
	return latest.Reason + ": " + latest.Message, nil
}

func lastSeen(e *corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	return e.EventTime.Time
}

// taskRunMissing fails a snapshot whose commit TaskRun is gone, and thaws its pod.
func (r *Reconciler) taskRunMissing(ctx context.Context, s *v1alpha1.SandboxSnapshot, now metav1.Time) pkgreconciler.Event {
	pod, err := r.sourcePod(ctx, s, "")
	if err != nil {
		return err
	}
	if pod != nil {
		if err := r.thaw(ctx, s, pod); err != nil {
			return err
		}
	}
	s.Status.MarkFailed(now, v1alpha1.ReasonCommitTaskRunMissing,
		"TaskRun %s/%s was deleted before it completed", r.namespace, names.CommitTaskRun(s))
	return r.failed(ctx, s)
}
