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
	"fmt"
	"slices"
	"strings"
	"testing"

	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e/framework"
)

// TestMissingSandbox: a snapshot of a sandbox that does not exist, or has no
// running pod, fails without any TaskRun.
func TestMissingSandbox(t *testing.T) {
	e := framework.Setup(t)

	t.Run("NoBatchSandbox", func(t *testing.T) {
		e.CreateSnapshot("ghost-snap", "ghost")
		s := e.WaitSnapshot("ghost-snap", "Failed", framework.IsPhase(v1alpha1.PhaseFailed))
		c := framework.Condition(t, s, v1alpha1.ConditionFailed)
		if c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonBatchSandboxLookupFailed {
			t.Errorf("Failed condition = %s/%s, want True/%s", c.Status, c.Reason, v1alpha1.ReasonBatchSandboxLookupFailed)
		}
		if !strings.Contains(c.Message, "ghost") {
			t.Errorf("Failed message %q does not name the sandbox ghost", c.Message)
		}
		if trs := e.TaskRunsOf("ghost-snap"); len(trs) != 0 {
			t.Errorf("TaskRuns labelled %s=ghost-snap exist: %v", sandbox.SnapshotNameLabel, test.TaskRunNames(trs))
		}
	})

	t.Run("NoRunningPod", func(t *testing.T) {
		e.CreateSandbox("pending", framework.SandboxOpts{Pending: true})
		e.CreateSnapshot("pending-snap", "pending")
		s := e.WaitSnapshot("pending-snap", "Failed", framework.IsPhase(v1alpha1.PhaseFailed))
		c := framework.Condition(t, s, v1alpha1.ConditionFailed)
		if c.Reason != v1alpha1.ReasonSourcePodNotFound || !strings.Contains(c.Message, "pending") {
			t.Errorf("Failed condition = %s: %q, want %s naming the sandbox", c.Reason, c.Message, v1alpha1.ReasonSourcePodNotFound)
		}
		if trs := e.TaskRunsOf("pending-snap"); len(trs) != 0 {
			t.Errorf("TaskRuns exist: %v", test.TaskRunNames(trs))
		}
	})

	if n := len(e.TaskRuns.Created()); n != 0 {
		t.Errorf("%d TaskRuns were created for this namespace, want none", n)
	}
}

// TestSnapshotSucceeds: the happy path. The commit TaskRun is created once,
// pinned to the sandbox pod's node; the test then plays Tekton and the
// snapshot takes the results.
func TestSnapshotSucceeds(t *testing.T) {
	e := framework.Setup(t)
	pod := e.CreateSandbox("sb", framework.SandboxOpts{Containers: []string{"app", "sidecar"}})
	e.CreateSnapshot("snap", "sb")

	s := e.WaitSnapshot("snap", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
	if framework.OwnStatusFields() && (s.Status.TaskRunRef == nil || *s.Status.TaskRunRef != v1alpha1.TaskRunReference{Namespace: test.SystemNamespace, Name: names.CommitTaskRun(s)}) {
		t.Fatalf("Committing with taskRunRef %v, want %s/%s:\n%s", s.Status.TaskRunRef, test.SystemNamespace, names.CommitTaskRun(s), framework.Dump(s.Status))
	}
	if s.Status.SourcePodName != pod.Name || s.Status.SourceNodeName != pod.Spec.NodeName {
		t.Errorf("source = %s on %s, want %s on %s", s.Status.SourcePodName, s.Status.SourceNodeName, pod.Name, pod.Spec.NodeName)
	}
	if got := containerNames(s); !slices.Equal(got, []string{"app", "sidecar"}) {
		t.Errorf("status.containers = %v, want app, sidecar", got)
	}
	for _, c := range s.Status.Containers {
		want := "127.0.0.1:5000/snapshots/" + e.NS + "/sb/" + c.ContainerName + ":snap-"
		if !strings.HasPrefix(c.ImageURI, want) || !strings.HasSuffix(c.ImageURI, "-"+strings.ReplaceAll(string(s.UID), "-", "")[:8]) {
			t.Errorf("container %s: imageUri %q, want %s<hash>-<snapshot UID>", c.ContainerName, c.ImageURI, want)
		}
	}
	tr := e.WaitTaskRun(names.CommitTaskRun(s), "to exist", nil)
	checkCommitTaskRun(t, e, tr, s, pod)

	// Tekton's part: the commit pod ran and wrote its results.
	e.SetTaskRunStatus(tr.Name, framework.Running)
	e.SetTaskRunStatus(tr.Name, framework.Succeeded(321, framework.DigestsFor(tr)...))
	s = e.WaitSnapshot("snap", "Succeed", framework.IsTerminal)
	if s.Status.Phase != v1alpha1.PhaseSucceed {
		t.Fatalf("phase %s, want Succeed:\n%s", s.Status.Phase, framework.Dump(s.Status))
	}
	want := framework.DigestsFor(tr)
	for i, c := range s.Status.Containers {
		if c.ImageDigest != want[i] {
			t.Errorf("containers[%d] (%s) imageDigest = %q, want %q", i, c.ContainerName, c.ImageDigest, want[i])
		}
		// OpenSandbox resumes from imageUri: pinned, it names those bytes.
		if pinned := pushedTo(t, tr, c.ContainerName) + "@" + want[i]; c.ImageURI != pinned {
			t.Errorf("containers[%d] (%s) imageUri = %q, want %q", i, c.ContainerName, c.ImageURI, pinned)
		}
	}
	if p := s.Status.PauseWindowMilliseconds; framework.OwnStatusFields() && (p == nil || *p != 321) {
		t.Errorf("pauseWindowMilliseconds = %v, want 321", p)
	}
	if c := framework.Condition(t, s, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %s (%s), want True", c.Status, c.Reason)
	}
	if c := framework.Condition(t, s, v1alpha1.ConditionFailed); c.Status != metav1.ConditionFalse {
		t.Errorf("Failed = %s (%s), want False", c.Status, c.Reason)
	}
	if framework.OwnStatusFields() && (s.Status.CompletionTime == nil || s.Status.StartTime == nil) {
		t.Errorf("startTime %v, completionTime %v: both must be set", s.Status.StartTime, s.Status.CompletionTime)
	}
	checkCreatedOnce(t, e, tr.Name)
}

// pushedTo returns the image a commit TaskRun pushes a container to.
func pushedTo(t *testing.T, tr *pipelinev1.TaskRun, container string) string {
	t.Helper()
	for _, p := range tr.Spec.Params {
		if p.Name != task.ParamContainers {
			continue
		}
		for _, item := range p.Value.ArrayVal {
			if c, image, err := task.SplitContainerItem(item); err == nil && c == container {
				return image
			}
		}
	}
	t.Fatalf("TaskRun %s commits no container %s", tr.Name, container)
	return ""
}

// checkCommitTaskRun checks a commit TaskRun against the contract.
func checkCommitTaskRun(t *testing.T, e *framework.Env, tr *pipelinev1.TaskRun, s *v1alpha1.SandboxSnapshot, pod *corev1.Pod) {
	t.Helper()
	for k, v := range map[string]string{
		sandbox.SnapshotNameLabel:      s.Name,
		sandbox.SnapshotNamespaceLabel: e.NS,
		sandbox.SandboxNameLabel:       s.Spec.SandboxName,
		sandbox.ManagedByLabel:         sandbox.ManagedByValue,
	} {
		if tr.Labels[k] != v {
			t.Errorf("TaskRun label %s = %q, want %q", k, tr.Labels[k], v)
		}
	}
	if tr.Spec.TaskRef == nil || tr.Spec.TaskRef.Name != task.Name {
		t.Errorf("taskRef = %+v, want Task %s", tr.Spec.TaskRef, task.Name)
	}
	params := map[string]pipelinev1.ParamValue{}
	for _, p := range tr.Spec.Params {
		params[p.Name] = p.Value
	}
	if params[task.ParamPodName].StringVal != pod.Name || params[task.ParamPodNamespace].StringVal != e.NS ||
		params[task.ParamMode].StringVal != task.ModeCommit {
		t.Errorf("params pod-name/pod-namespace/mode = %q/%q/%q", params[task.ParamPodName].StringVal,
			params[task.ParamPodNamespace].StringVal, params[task.ParamMode].StringVal)
	}
	var wantItems []string
	for _, c := range s.Status.Containers {
		wantItems = append(wantItems, task.ContainerItem(c.ContainerName, c.ImageURI))
	}
	if got := params[task.ParamContainers].ArrayVal; !slices.Equal(got, wantItems) {
		t.Errorf("containers param = %v, want %v", got, wantItems)
	}

	pt := tr.Spec.PodTemplate
	if pt == nil || pt.Affinity == nil || pt.Affinity.NodeAffinity == nil ||
		pt.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Fatalf("TaskRun %s has no required node affinity: %s", tr.Name, framework.Dump(pt))
	}
	terms := pt.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	pinned := len(terms) == 1 && len(terms[0].MatchFields) == 1 && len(terms[0].MatchExpressions) == 0 &&
		terms[0].MatchFields[0].Key == "metadata.name" && terms[0].MatchFields[0].Operator == corev1.NodeSelectorOpIn &&
		slices.Equal(terms[0].MatchFields[0].Values, []string{pod.Spec.NodeName})
	if !pinned {
		t.Errorf("TaskRun is not pinned to node %s by matchFields metadata.name: %s", pod.Spec.NodeName, framework.Dump(terms))
	}
	// The pod may land on a cordoned or tainted node: it tolerates every
	// taint, so each of the sandbox pod's tolerations, and more.
	for _, taint := range []corev1.Taint{
		{Key: "sandbox.opensandbox.io/dedicated", Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule},
		{Key: "example.com/draining", Value: "yes", Effect: corev1.TaintEffectNoExecute},
	} {
		if !slices.ContainsFunc(pt.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), &taint, false) }) {
			t.Errorf("tolerations %v do not tolerate taint %v", pt.Tolerations, taint)
		}
	}
	socket := slices.IndexFunc(pt.Volumes, func(v corev1.Volume) bool { return v.Name == task.SocketVolume })
	if socket < 0 || pt.Volumes[socket].HostPath == nil || pt.Volumes[socket].HostPath.Path != "/var/run/containerd/containerd.sock" ||
		pt.Volumes[socket].HostPath.Type == nil || *pt.Volumes[socket].HostPath.Type != corev1.HostPathSocket {
		t.Errorf("podTemplate volumes = %s, want hostPath socket volume %s", framework.Dump(pt.Volumes), task.SocketVolume)
	}
	if pt.AutomountServiceAccountToken == nil || *pt.AutomountServiceAccountToken {
		t.Error("the commit pod must not mount a ServiceAccount token")
	}
	if tr.Spec.Timeout == nil || tr.Spec.Timeout.Duration.String() != "10m0s" {
		t.Errorf("timeout = %v, want the default 10m", tr.Spec.Timeout)
	}
}

// checkCreatedOnce checks that a TaskRun was created exactly once and never deleted.
func checkCreatedOnce(t *testing.T, e *framework.Env, name string) {
	t.Helper()
	if n := e.TaskRuns.Created()[name]; n != 1 {
		t.Errorf("TaskRun %s was created %d times, want once", name, n)
	}
	if n := e.TaskRuns.Deleted(name); n != 0 {
		t.Errorf("TaskRun %s was deleted %d times", name, n)
	}
}

// TestCommitTimesOut: a TaskRun that Tekton timed out fails the snapshot
// with CommitTimedOut.
func TestCommitTimesOut(t *testing.T) {
	e := framework.Setup(t)
	e.CreateSandbox("sb", framework.SandboxOpts{})
	e.CreateSnapshot("slow", "sb")
	s := e.WaitSnapshot("slow", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
	tr := e.WaitTaskRun(names.CommitTaskRun(s), "to exist", nil)

	e.SetTaskRunStatus(tr.Name, framework.Running)
	e.SetTaskRunStatus(tr.Name, framework.Failed(pipelinev1.TaskRunReasonTimedOut,
		fmt.Sprintf("TaskRun %q failed to finish within %q", tr.Name, "10m0s")))
	s = e.WaitSnapshot("slow", "Failed", framework.IsTerminal)
	if s.Status.Phase != v1alpha1.PhaseFailed {
		t.Fatalf("phase %s, want Failed", s.Status.Phase)
	}
	c := framework.Condition(t, s, v1alpha1.ConditionFailed)
	if c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonCommitTimedOut {
		t.Errorf("Failed = %s/%s, want True/%s", c.Status, c.Reason, v1alpha1.ReasonCommitTimedOut)
	}
	if !strings.Contains(c.Message, tr.Name) {
		t.Errorf("Failed message %q does not name TaskRun %s", c.Message, tr.Name)
	}
	if r := framework.Condition(t, s, v1alpha1.ConditionReady); r.Status != metav1.ConditionFalse || r.Reason != v1alpha1.ReasonCommitTimedOut {
		t.Errorf("Ready = %s/%s, want False/%s", r.Status, r.Reason, v1alpha1.ReasonCommitTimedOut)
	}
	// The commit step's state is unknown here (no steps recorded): nothing to thaw.
	if s.Status.Thaw != nil {
		t.Errorf("thaw = %v for a TaskRun whose commit step never ran", s.Status.Thaw)
	}
	checkCreatedOnce(t, e, tr.Name)
}

// TestCommitKilledThaws: a commit step that was killed (it may have left the
// sandbox paused) fails the snapshot and starts an unpause TaskRun on the
// same node; deleting the snapshot waits for that TaskRun, then removes both.
func TestCommitKilledThaws(t *testing.T) {
	e := framework.Setup(t)
	pod := e.CreateSandbox("sb", framework.SandboxOpts{})
	e.CreateSnapshot("killed", "sb")
	s := e.WaitSnapshot("killed", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
	commit := e.WaitTaskRun(names.CommitTaskRun(s), "to exist", nil)

	e.SetTaskRunStatus(commit.Name, framework.Running)
	e.SetTaskRunStatus(commit.Name, framework.Failed(pipelinev1.TaskRunReasonFailed, `"step-commit" exited with code 137`,
		pipelinev1.StepState{Name: task.StepCommit, Container: "step-commit", ContainerState: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}))
	s = e.WaitSnapshot("killed", "Failed", framework.IsTerminal)
	c := framework.Condition(t, s, v1alpha1.ConditionFailed)
	if s.Status.Phase != v1alpha1.PhaseFailed || c.Reason != v1alpha1.ReasonCommitJobFailed {
		t.Errorf("phase %s reason %s, want Failed/%s", s.Status.Phase, c.Reason, v1alpha1.ReasonCommitJobFailed)
	}
	if framework.OwnStatusFields() && (s.Status.Thaw == nil || s.Status.Thaw.TaskRunRef.Name != names.UnpauseTaskRun(s)) {
		t.Fatalf("no status.thaw naming TaskRun %s after a killed commit step:\n%s", names.UnpauseTaskRun(s), framework.Dump(s.Status))
	}
	unpause := e.WaitTaskRun(names.UnpauseTaskRun(s), "to exist", nil)
	mode := ""
	for _, p := range unpause.Spec.Params {
		if p.Name == task.ParamMode {
			mode = p.Value.StringVal
		}
	}
	if mode != task.ModeUnpause {
		t.Errorf("unpause TaskRun mode = %q", mode)
	}
	if v := unpause.Spec.PodTemplate.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values; !slices.Equal(v, []string{pod.Spec.NodeName}) {
		t.Errorf("unpause TaskRun pinned to %v, want %s", v, pod.Spec.NodeName)
	}

	// Deleting the snapshot while the unpause TaskRun runs: both stay until it is done.
	if err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Delete(e.Ctx, "killed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitSnapshot("killed", "to be held by its finalizer", func(s *v1alpha1.SandboxSnapshot) bool { return s.DeletionTimestamp != nil })
	if e.TaskRuns.Deleted(unpause.Name) != 0 {
		t.Errorf("the running unpause TaskRun was deleted")
	}
	e.SetTaskRunStatus(unpause.Name, framework.Succeeded(0))
	e.WaitSnapshotGone("killed")
	e.WaitTaskRunGone(unpause.Name)
	e.WaitTaskRunGone(commit.Name)
	checkCreatedOnceThenDeleted(t, e, unpause.Name)
	checkCreatedOnceThenDeleted(t, e, commit.Name)
}

// TestDeleteCancelsTaskRun: deleting a snapshot whose TaskRun runs cancels
// the TaskRun and keeps the snapshot until the TaskRun has ended. Its commit
// step was running, so the sandbox may be paused: an unpause TaskRun runs on
// the node before both TaskRuns are deleted and the snapshot goes.
func TestDeleteCancelsTaskRun(t *testing.T) {
	e := framework.Setup(t)
	e.CreateSandbox("sb", framework.SandboxOpts{})
	e.CreateSnapshot("doomed", "sb")
	s := e.WaitSnapshot("doomed", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
	tr := e.WaitTaskRun(names.CommitTaskRun(s), "to exist", nil)
	e.SetTaskRunStatus(tr.Name, framework.Running)

	if err := e.C.Sandbox.SandboxV1alpha1().SandboxSnapshots(e.NS).Delete(e.Ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitTaskRun(tr.Name, "to be cancelled", func(tr *pipelinev1.TaskRun) bool {
		return tr.Spec.Status == pipelinev1.TaskRunSpecStatusCancelled
	})
	e.WaitSnapshot("doomed", "to be held by its finalizer", func(s *v1alpha1.SandboxSnapshot) bool { return s.DeletionTimestamp != nil })
	// Play Tekton: the cancelled pod's commit step was still running.
	e.SetTaskRunStatus(tr.Name, framework.CancelledMidCommit)
	unpause := e.WaitTaskRun(names.UnpauseTaskRun(s), "to exist", nil)
	if e.TaskRuns.Deleted(tr.Name) != 0 {
		t.Errorf("the commit TaskRun was deleted before the sandbox was thawed")
	}
	e.SetTaskRunStatus(unpause.Name, framework.Succeeded(0))
	e.WaitSnapshotGone("doomed")
	e.WaitTaskRunGone(tr.Name)
	e.WaitTaskRunGone(unpause.Name)
	if !e.TaskRuns.WasCancelled(tr.Name) {
		t.Errorf("TaskRun %s was deleted without being cancelled first (spec.status %s)", tr.Name, pipelinev1.TaskRunSpecStatusCancelled)
	}
	checkCreatedOnceThenDeleted(t, e, tr.Name)
	checkCreatedOnceThenDeleted(t, e, unpause.Name)
}

func checkCreatedOnceThenDeleted(t *testing.T, e *framework.Env, name string) {
	t.Helper()
	if n := e.TaskRuns.Created()[name]; n != 1 {
		t.Errorf("TaskRun %s was created %d times, want once", name, n)
	}
	if n := e.TaskRuns.WaitDeleted(e.Ctx, name, 1); n != 1 {
		t.Errorf("TaskRun %s was deleted %d times, want once", name, n)
	}
}

func containerNames(s *v1alpha1.SandboxSnapshot) []string {
	var out []string
	for _, c := range s.Status.Containers {
		out = append(out, c.ContainerName)
	}
	return out
}

// TestTaskRunNamesDoNotCollide: snapshot "a-snap" in namespace N and snapshot
// "snap" in namespace N-a are different snapshots; each must get its own
// TaskRun, although both TaskRuns live in the system namespace.
func TestTaskRunNamesDoNotCollide(t *testing.T) {
	first := framework.Setup(t)
	second := framework.SetupNamespace(t, first.NS+"-a")
	first.CreateSandbox("sb", framework.SandboxOpts{})
	second.CreateSandbox("sb", framework.SandboxOpts{})

	first.CreateSnapshot("a-snap", "sb")
	s1 := first.WaitSnapshot("a-snap", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
	second.CreateSnapshot("snap", "sb")
	s2 := second.WaitSnapshot("snap", "Committing", framework.IsPhase(v1alpha1.PhaseCommitting))
	if names.CommitTaskRun(s1) == names.CommitTaskRun(s2) {
		t.Errorf("%s/%s and %s/%s share TaskRun %s", first.NS, s1.Name, second.NS, s2.Name, names.CommitTaskRun(s1))
	}
	first.WaitTaskRun(names.CommitTaskRun(s1), "to exist", nil)
	second.WaitTaskRun(names.CommitTaskRun(s2), "to exist", nil)
}
