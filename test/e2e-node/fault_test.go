//go:build e2e_node

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

package e2enode

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// TestCommitPodKilledMidPause kills the committer with SIGKILL while the
// sandbox is frozen, so its own handler cannot thaw it. The operator must see
// the commit step die, run an unpause TaskRun on the node, and record it.
func TestCommitPodKilledMidPause(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	// Without the node's snapshots (an empty directory in their place) the
	// commit step leaves the tar of the change to containerd inside the
	// pause: with a large diff that keeps the containers paused long enough
	// to catch, where the step's own copy takes a tenth of the time.
	nodeframework.SetConfig(t, map[string]any{"containerd-overlayfs-root": ""}, `"overlayfsRoot":""`)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	pauseAndKill(t, ns, "sb-snap", pod, nil)

	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseFailed)
	if s.Status.Thaw == nil {
		t.Fatalf("status.thaw is not set: %+v", s.Status)
	}
	nodeframework.Run(t, "", "kubectl", "-n", ns, "wait", "sbxsnap/sb-snap", "--for=jsonpath={.status.thaw.state}="+string(v1alpha1.ThawSucceeded), "--timeout=120s")
	nodeframework.AssertNotPaused(t, pod)
	t.Logf("snapshot failed with %s; unpause TaskRun %s thawed the sandbox",
		s.Status.GetCondition(v1alpha1.ConditionFailed).Reason, s.Status.Thaw.TaskRunRef.Name)
}

// containerPaused reports whether the pod's container has a paused task.
func containerPaused(ctx context.Context, cl *containerd.Client, pod *corev1.Pod, container string) bool {
	ctrs, err := cl.Containers(ctx, fmt.Sprintf("labels.%q==%q,labels.%q==%q,labels.%q==%q",
		"io.kubernetes.pod.name", pod.Name, "io.kubernetes.pod.namespace", pod.Namespace,
		"io.kubernetes.container.name", container))
	if err != nil {
		return false
	}
	for _, ctr := range ctrs {
		task, err := ctr.Task(ctx, nil)
		if err != nil {
			continue
		}
		if st, err := task.Status(ctx); err == nil && st.Status == containerd.Paused {
			return true
		}
	}
	return false
}

// signalCommitter sends sig to the commit step's process of pod on this
// node and returns its pid. The node is this machine, so /proc shows it.
func signalCommitter(t *testing.T, pod *corev1.Pod, sig syscall.Signal) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		if !strings.HasSuffix(args[0], "committer") || !contains(args, "--step=commit") || !contains(args, "--pod-name="+pod.Name) {
			continue
		}
		var pid int
		fmt.Sscanf(filepath.Base(filepath.Dir(p)), "%d", &pid)
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatalf("sending %v to committer %d: %v", sig, pid, err)
		}
		return pid
	}
	t.Fatalf("no committer process for pod %s found", pod.Name)
	return 0
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestSecretsStayOutOfOutputs pushes with a push Secret and checks that its
// credentials appear nowhere a user can read: snapshot status, events,
// TaskRun results and logs, and the controller's log.
func TestSecretsStayOutOfOutputs(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	nodeframework.CreateSandbox(t, ns, "sb")

	password := "pw-" + strings.TrimSpace(nodeframework.RandomMarker(t, "secret"))
	auth := base64.StdEncoding.EncodeToString([]byte("snapshotter:" + password))
	config, _ := json.Marshal(map[string]any{"auths": map[string]any{nodeframework.LocalRegistry(): map[string]string{"auth": auth}}})
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-push", Namespace: test.SystemNamespace},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: config},
	}
	if _, err := nodeframework.Clients().Kube.CoreV1().Secrets(test.SystemNamespace).Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = nodeframework.Clients().Kube.CoreV1().Secrets(test.SystemNamespace).Delete(context.Background(), "e2e-push", metav1.DeleteOptions{})
	})
	nodeframework.SetConfig(t, map[string]any{"push-secret": "e2e-push"}, `"pushSecret":"e2e-push"`)

	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)
	tr := v1alpha1.TaskRunReference{Namespace: test.SystemNamespace, Name: names.CommitTaskRun(s)}

	outputs := map[string]string{
		"snapshot":       nodeframework.Run(t, "", "kubectl", "-n", ns, "get", "sbxsnap", "sb-snap", "-o", "yaml"),
		"events":         nodeframework.Run(t, "", "kubectl", "-n", ns, "get", "events", "-o", "yaml"),
		"TaskRun":        nodeframework.Run(t, "", "kubectl", "-n", tr.Namespace, "get", "taskrun", tr.Name, "-o", "yaml"),
		"TaskRun logs":   nodeframework.Run(t, "", "tkn", "taskrun", "logs", tr.Name, "-n", tr.Namespace),
		"controller log": nodeframework.Run(t, "", "kubectl", "-n", test.SystemNamespace, "logs", "deployment/sandbox-snapshot-controller"),
	}
	for where, out := range outputs {
		for _, secretText := range []string{password, auth} {
			if strings.Contains(out, secretText) {
				t.Errorf("the push Secret's credentials appear in the %s", where)
			}
		}
	}
	if !strings.Contains(outputs["TaskRun"], "e2e-push") {
		t.Error("the TaskRun does not bind the push Secret, so this test proves nothing")
	}
}

// pauseAndKill fills the sandbox's app container with a large change, so
// that the commit step, without the node's snapshots, keeps it paused long
// enough to catch, starts a snapshot, waits until the container is paused
// and kills the committer with SIGKILL, which leaves it paused. beforeKill,
// when set, runs just before the kill, with the committer stopped (SIGSTOP)
// as soon as the pause is seen: however long beforeKill takes, the
// committer cannot finish and thaw in the meantime.
func pauseAndKill(t *testing.T, ns, snapshot string, pod *corev1.Pod, beforeKill func()) {
	t.Helper()
	nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", "app", "--",
		"/bin/sh", "-c", "dd if=/dev/urandom of=/big bs=1M count=384 2>/dev/null")
	nodeframework.CreateSnapshot(t, ns, snapshot, "sb")
	nodeframework.Eventually(t, "the sandbox to be paused by the commit step", 2*time.Minute, func() (bool, error) {
		return sandboxPaused(t, pod), nil
	})
	signalCommitter(t, pod, syscall.SIGSTOP)
	if beforeKill != nil {
		beforeKill()
	}
	t.Logf("sent SIGKILL to committer pid %d while pod %s was paused", signalCommitter(t, pod, syscall.SIGKILL), pod.Name)
}

// sandboxPaused reports whether the sandbox's app container is paused.
func sandboxPaused(t *testing.T, pod *corev1.Pod) bool {
	t.Helper()
	cl, err := containerd.New(nodeframework.ContainerdSock())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return containerPaused(namespaces.WithNamespace(t.Context(), "k8s.io"), cl, pod, "app")
}

// TestThawRetriedOnceAdmitted kills the commit step mid-pause while no
// pod can be admitted in the operator's namespace (a ResourceQuota of zero
// pods): Tekton holds the unpause TaskRun, without a timeout, and
// status.thaw and an event say why. Once the quota goes, the sandbox thaws
// with no human action.
func TestThawRetriedOnceAdmitted(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	nodeframework.SetConfig(t, map[string]any{"containerd-overlayfs-root": ""}, `"overlayfsRoot":""`)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "e2e-no-pods", Namespace: test.SystemNamespace},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	quotas := nodeframework.Clients().Kube.CoreV1().ResourceQuotas(test.SystemNamespace)
	t.Cleanup(func() { _ = quotas.Delete(context.Background(), quota.Name, metav1.DeleteOptions{}) })
	pauseAndKill(t, ns, "sb-snap", pod, func() {
		if _, err := quotas.Create(t.Context(), quota, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseFailed)
	nodeframework.Eventually(t, "status.thaw to say the unpause pod is over quota", 2*time.Minute, func() (bool, error) {
		s, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), "sb-snap", metav1.GetOptions{})
		return err == nil && s.Status.Thaw != nil && s.Status.Thaw.State == v1alpha1.ThawRunning &&
			strings.Contains(s.Status.Thaw.Message, "cannot start its pod yet") && strings.Contains(s.Status.Thaw.Message, "exceeded quota"), err
	})
	test.WaitForEvent(t.Context(), t, nodeframework.Clients(), ns, "sb-snap", v1alpha1.ReasonThawing, "exceeded quota", nodeframework.EventTimeout)
	if !sandboxPaused(t, pod) {
		t.Fatal("the sandbox is not paused while no unpause pod can be admitted: the test proves nothing")
	}
	if err := quotas.Delete(t.Context(), quota.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitThawed(t, ns, "sb-snap", pod)
	t.Logf("thawed %v after the quota went", time.Since(start).Round(time.Second))
}

// waitThawed waits until status.thaw of the snapshot says its unpause
// TaskRun succeeded, which it does once every container is thawed, and then
// asserts that none is paused and the app container runs a command. The app
// container alone thaws first, so it is no signal for the others.
func waitThawed(t *testing.T, ns, snapshot string, pod *corev1.Pod) {
	t.Helper()
	nodeframework.Eventually(t, "status.thaw to say the sandbox is thawed", 3*time.Minute, func() (bool, error) {
		s, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), snapshot, metav1.GetOptions{})
		return err == nil && s.Status.Thaw != nil && s.Status.Thaw.State == v1alpha1.ThawSucceeded, err
	})
	nodeframework.AssertNotPaused(t, pod)
	nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", "app", "--", "true")
}

// TestThawRetriedAfterFailedAttempts kills the commit step mid-pause with
// the operator's PriorityClass setting naming a class that does not exist:
// the apiserver refuses each unpause pod, and each attempt fails at once.
// The thaw is retried with a growing backoff, each failure an event, until
// the setting is fixed; then an attempt thaws the sandbox.
func TestThawRetriedAfterFailedAttempts(t *testing.T) {
	ns, pod := killWithUnpauseRefused(t)
	nodeframework.Eventually(t, "a second attempt to thaw", 2*time.Minute, func() (bool, error) {
		s, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), "sb-snap", metav1.GetOptions{})
		return err == nil && s.Annotations[sandbox.ThawAttemptAnnotation] == "2", err
	})
	if !sandboxPaused(t, pod) {
		t.Fatal("the sandbox is not paused while every unpause pod is refused: the test proves nothing")
	}
	nodeframework.SetConfig(t, map[string]any{"priority-class-name": "sandbox-snapshot-commit"}, `"priorityClass":"sandbox-snapshot-commit"`)
	start := time.Now()
	waitThawed(t, ns, "sb-snap", pod)
	t.Logf("thawed %v after the setting was fixed", time.Since(start).Round(time.Second))
}

// killWithUnpauseRefused snapshots a new sandbox sb, kills the commit step
// mid-pause with the operator's PriorityClass setting naming a class that
// does not exist, so that the apiserver refuses every unpause pod, and waits
// for sb-snap to fail and its first thaw with it.
func killWithUnpauseRefused(t *testing.T) (string, *corev1.Pod) {
	t.Helper()
	ns := nodeframework.NewNamespace(t)
	nodeframework.SetConfig(t, map[string]any{"containerd-overlayfs-root": ""}, `"overlayfsRoot":""`)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	pauseAndKill(t, ns, "sb-snap", pod, func() {
		nodeframework.SetConfig(t, map[string]any{"priority-class-name": "e2e-missing"}, `"priorityClass":"e2e-missing"`)
	})
	nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseFailed)
	test.WaitForEvent(t.Context(), t, nodeframework.Clients(), ns, "sb-snap", v1alpha1.ReasonThawFailed, "e2e-missing", nodeframework.EventTimeout)
	return ns, pod
}

// TestDeletionWaitsForThaw kills the commit step mid-pause with every
// unpause pod refused (a PriorityClass that does not exist), then deletes the
// snapshot, as OpenSandbox does with a Failed one before it pauses again.
// The snapshot keeps its finalizer, saying which sandbox it waits for, and
// goes only once a retried unpause has thawed the sandbox.
func TestDeletionWaitsForThaw(t *testing.T) {
	ns, pod := killWithUnpauseRefused(t)

	nodeframework.Run(t, "", "kubectl", "-n", ns, "delete", "sbxsnap", "sb-snap", "--wait=false")
	test.WaitForEvent(t.Context(), t, nodeframework.Clients(), ns, "sb-snap", v1alpha1.ReasonDeletionWaitsForThaw, "sandbox sb (pod "+pod.Name+")", nodeframework.EventTimeout)
	if _, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), "sb-snap", metav1.GetOptions{}); err != nil {
		t.Fatalf("the snapshot went while its sandbox may be paused: %v", err)
	}
	if !sandboxPaused(t, pod) {
		t.Fatal("the sandbox is not paused while every unpause pod is refused: the test proves nothing")
	}

	nodeframework.SetConfig(t, map[string]any{"priority-class-name": "sandbox-snapshot-commit"}, `"priorityClass":"sandbox-snapshot-commit"`)
	nodeframework.Eventually(t, "the deleted snapshot to go", 5*time.Minute, func() (bool, error) {
		_, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), "sb-snap", metav1.GetOptions{})
		return apierrs.IsNotFound(err), nil
	})
	nodeframework.AssertNotPaused(t, pod)
	nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", "app", "--", "true")
	nodeframework.Eventually(t, "the deleted snapshot's TaskRuns to go", time.Minute, func() (bool, error) {
		return len(nodeframework.TaskRunsOf(t, ns, "sb-snap")) == 0, nil
	})
}

// TestForcedFinalizerMidPause kills the commit step mid-pause, with the
// controller stopped, and forces the snapshot's finalizer off and deletes
// it: nothing thaws the sandbox, and its commit TaskRun is orphaned. Once
// the controller is back, the orphan goes, and the next snapshot of the
// sandbox thaws it (the dead run holds no lock) and succeeds.
func TestForcedFinalizerMidPause(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	nodeframework.SetConfig(t, map[string]any{"containerd-overlayfs-root": ""}, `"overlayfsRoot":""`)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	scale := func(n string) {
		nodeframework.Run(t, "", "kubectl", "-n", test.SystemNamespace, "scale", "deployment/sandbox-snapshot-controller", "--replicas="+n)
		nodeframework.Run(t, "", "kubectl", "-n", test.SystemNamespace, "rollout", "status", "deployment/sandbox-snapshot-controller", "--timeout=120s")
	}
	t.Cleanup(func() { scale("1") })
	pauseAndKill(t, ns, "sb-snap", pod, func() { scale("0") })
	first, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), "sb-snap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeframework.Run(t, "", "kubectl", "-n", ns, "patch", "sbxsnap", "sb-snap", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	nodeframework.Run(t, "", "kubectl", "-n", ns, "delete", "sbxsnap", "sb-snap", "--wait=true", "--timeout=60s")
	time.Sleep(3 * time.Second) // the kubelet reports the step's death; nothing may thaw
	if !sandboxPaused(t, pod) {
		t.Fatal("the sandbox is not paused with the controller stopped: the test proves nothing")
	}
	scale("1")
	nodeframework.Eventually(t, "the orphaned commit TaskRun to go", 2*time.Minute, func() (bool, error) {
		_, err := nodeframework.Clients().Pipeline.TektonV1().TaskRuns(test.SystemNamespace).Get(t.Context(), names.CommitTaskRun(first), metav1.GetOptions{})
		return apierrs.IsNotFound(err), nil
	})
	nodeframework.CreateSnapshot(t, ns, "sb-snap-2", "sb")
	nodeframework.WaitForPhase(t, ns, "sb-snap-2", v1alpha1.PhaseSucceed)
	nodeframework.AssertNotPaused(t, pod)
	nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", "app", "--", "true")
	if log := commitStepLog(t, &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sb-snap-2"}}); !strings.Contains(log, "holds no lock any more: thawed it") {
		t.Errorf("the next commit did not say it thawed what the dead run left paused; its log:\n%s", log)
	}
}
