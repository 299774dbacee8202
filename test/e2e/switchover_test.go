//go:build e2e

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

package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e/framework"
)

// jobPlayer is the spec.managedBy of the commit Jobs the test makes: the
// built-in Job controller leaves them alone, and the test plays it, as it
// plays Tekton.
const jobPlayer = "e2e.sandbox.opensandbox.io/job-player"

// TestSwitchOverFromOpenSandbox: snapshots that OpenSandbox's own controller
// reconciled before the switch to this operator. Such a snapshot is made here
// as that controller left it, under a class this operator does not handle
// (as if that controller still ran); removing the class annotation then is
// the switch: the snapshot falls to this operator's default class.
func TestSwitchOverFromOpenSandbox(t *testing.T) {
	e := framework.Setup(t)

	// A snapshot that failed before the switch: OpenSandbox's pause deletes
	// it before it retries, and waits for it to go.
	t.Run("SnapshotMadeBeforeIsDeleted", func(t *testing.T) {
		s := createOpenSandboxSnapshot(e, "made-before", "sb", func(st *v1alpha1.SandboxSnapshotStatus) {
			st.Phase = v1alpha1.PhaseFailed
			openSandboxCondition(st, v1alpha1.ConditionReady, metav1.ConditionFalse, "Failed", "Snapshot failed")
			openSandboxCondition(st, v1alpha1.ConditionFailed, metav1.ConditionTrue, v1alpha1.ReasonCommitJobFailed, "Commit job failed")
		})
		switchOver(e, s.Name)
		e.WaitSnapshot(s.Name, "to carry this operator's finalizer", func(s *v1alpha1.SandboxSnapshot) bool {
			return slices.Contains(s.Finalizers, sandboxsnapshot.FinalizerName)
		})
		test.DeleteSnapshot(e.Ctx, t, e.C, e.NS, s.Name, framework.Timeout)
	})

	// A snapshot whose commit Job was running at the switch.
	t.Run("CommitInFlightFailsOnceItsJobEnds", func(t *testing.T) {
		s := createOpenSandboxSnapshot(e, "in-flight", "sb", func(st *v1alpha1.SandboxSnapshotStatus) {
			st.Phase = v1alpha1.PhaseCommitting
			st.SourcePodName, st.SourceNodeName = "sb-0", "node-1"
			st.Containers = []v1alpha1.ContainerSnapshot{{ContainerName: "app", ImageURI: "127.0.0.1:5000/snapshots/sb-app:snap-gen1-0123abcd"}}
			openSandboxCondition(st, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonCommitting, "Snapshot commit job is running")
		})
		job := createOpenSandboxCommitJob(e, s)
		switchOver(e, s.Name)

		waiting := e.WaitSnapshot(s.Name, "waiting for Job "+job.Name, func(s *v1alpha1.SandboxSnapshot) bool {
			c := s.Status.GetCondition(v1alpha1.ConditionReady)
			return c != nil && c.Reason == v1alpha1.ReasonWaitingForOpenSandboxJob
		})
		if c := framework.Condition(t, waiting, v1alpha1.ConditionReady); waiting.Status.Phase != v1alpha1.PhaseCommitting || !strings.Contains(c.Message, e.NS+"/"+job.Name) {
			t.Errorf("phase %s, Ready %q, want Committing, naming Job %s/%s", waiting.Status.Phase, c.Message, e.NS, job.Name)
		}
		test.WaitForEvent(e.Ctx, t, e.C, e.NS, s.Name, v1alpha1.ReasonWaitingForOpenSandboxJob, job.Name, framework.Timeout)

		completeJob(e, job)
		failed := e.WaitSnapshot(s.Name, "Failed", framework.IsTerminal)
		c := framework.Condition(t, failed, v1alpha1.ConditionFailed)
		if failed.Status.Phase != v1alpha1.PhaseFailed || c.Reason != v1alpha1.ReasonOpenSandboxJobEnded ||
			!strings.Contains(c.Message, e.NS+"/"+job.Name) || !strings.Contains(c.Message, "succeeded") {
			t.Errorf("phase %s, Failed %s: %q, want Failed, %s naming Job %s/%s and that it succeeded",
				failed.Status.Phase, c.Reason, c.Message, v1alpha1.ReasonOpenSandboxJobEnded, e.NS, job.Name)
		}
		if trs := e.TaskRunsOf(s.Name); len(trs) != 0 {
			t.Errorf("TaskRuns were made for a snapshot OpenSandbox's Job committed: %v", test.TaskRunNames(trs))
		}
		test.DeleteSnapshot(e.Ctx, t, e.C, e.NS, s.Name, framework.Timeout)
	})
}

// createOpenSandboxSnapshot creates a snapshot of sandboxName as OpenSandbox's
// own controller leaves it: its finalizer on, the status that setStatus
// writes, and a class this operator does not handle, until switchOver.
func createOpenSandboxSnapshot(e *framework.Env, name, sandboxName string, setStatus func(*v1alpha1.SandboxSnapshotStatus)) *v1alpha1.SandboxSnapshot {
	e.T.Helper()
	s := test.MustParse[v1alpha1.SandboxSnapshot](e.T, `
apiVersion: sandbox.opensandbox.io/v1alpha1
kind: SandboxSnapshot
metadata:
  name: %s
  namespace: %s
  annotations:
    %s: opensandbox
  finalizers: [%s]
spec:
  sandboxName: %s
`, name, e.NS, sandbox.ClassAnnotation, sandbox.OpenSandboxSnapshotFinalizer, sandboxName)
	snapshots := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS)
	created, err := snapshots.Create(e.Ctx, s, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatalf("creating SandboxSnapshot %s/%s: %v", e.NS, name, err)
	}
	created.Status.ObservedGeneration = created.Generation
	setStatus(&created.Status)
	updated, err := snapshots.UpdateStatus(e.Ctx, created, metav1.UpdateOptions{})
	if err != nil {
		e.T.Fatalf("writing the status of SandboxSnapshot %s/%s as OpenSandbox's controller: %v", e.NS, name, err)
	}
	return updated
}

// openSandboxCondition sets a condition as OpenSandbox's controller does.
func openSandboxCondition(st *v1alpha1.SandboxSnapshotStatus, conditionType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: conditionType, Status: status, Reason: reason, Message: message})
}

// switchOver removes the class annotation from snapshot name: it falls to
// this operator's default class, as every snapshot does once OpenSandbox's
// controller is off.
func switchOver(e *framework.Env, name string) {
	e.T.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{sandbox.ClassAnnotation: nil}}})
	if err != nil {
		e.T.Fatal(err)
	}
	if _, err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Patch(e.Ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.T.Fatalf("removing the class annotation of SandboxSnapshot %s/%s: %v", e.NS, name, err)
	}
}

// createOpenSandboxCommitJob creates the commit Job of s as OpenSandbox's
// controller does (buildCommitJob: <name>-commit, labelled with s's name,
// controlled by s), managed by the test instead of the Job controller.
func createOpenSandboxCommitJob(e *framework.Env, s *v1alpha1.SandboxSnapshot) *batchv1.Job {
	e.T.Helper()
	job := test.MustParse[batchv1.Job](e.T, `
apiVersion: batch/v1
kind: Job
metadata:
  name: %[1]s-commit
  namespace: %[2]s
  labels:
    %[3]s: %[1]s
  ownerReferences:
  - apiVersion: sandbox.opensandbox.io/v1alpha1
    kind: SandboxSnapshot
    name: %[1]s
    uid: %[4]s
    controller: true
    blockOwnerDeletion: true
spec:
  managedBy: %[5]s
  backoffLimit: 3
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: commit
        image: 127.0.0.1:5000/image-committer:latest
        command: [/usr/local/bin/image-committer]
`, s.Name, e.NS, sandbox.SnapshotNameLabel, s.UID, jobPlayer)
	created, err := e.C.Kube.BatchV1().Jobs(e.NS).Create(e.Ctx, job, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatalf("creating Job %s/%s: %v", e.NS, job.Name, err)
	}
	return created
}

// completeJob writes job's status as the Job controller does once its pod
// has succeeded.
func completeJob(e *framework.Env, job *batchv1.Job) {
	e.T.Helper()
	now := metav1.Now()
	job.Status = batchv1.JobStatus{
		StartTime:      &now,
		CompletionTime: &now,
		Succeeded:      1,
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastTransitionTime: now},
		},
	}
	if _, err := e.C.Kube.BatchV1().Jobs(e.NS).UpdateStatus(e.Ctx, job, metav1.UpdateOptions{}); err != nil {
		e.T.Fatalf("completing Job %s/%s: %v", e.NS, job.Name, err)
	}
}
