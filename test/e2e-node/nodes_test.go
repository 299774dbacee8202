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
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// nodeSnapshotTimeout bounds a snapshot on a node that refuses new pods: a
// commit pod the scheduler cannot place would wait for ever.
const nodeSnapshotTimeout = 2 * time.Minute

// TestSnapshotOnCordonedNode: a cordoned node (kubectl cordon, as before a
// drain) takes no new pods, yet the commit pod must still run there, where
// the sandbox runs.
func TestSnapshotOnCordonedNode(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	node := pod.Spec.NodeName
	t.Cleanup(func() {
		if _, err := nodeframework.TryRun("", "kubectl", "uncordon", node); err != nil {
			t.Errorf("uncordoning node %s: %v", node, err)
		}
	})
	nodeframework.Run(t, "", "kubectl", "cordon", node)
	waitNode(t, node, "to be unschedulable", func(n *corev1.Node) bool { return n.Spec.Unschedulable })

	snapshotOnNode(t, ns, pod)
}

// TestSnapshotOnTaintedNode: a NoSchedule taint added after the sandbox pod
// started, which the sandbox pod does not tolerate, must not keep the commit
// pod off the node.
func TestSnapshotOnTaintedNode(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	node := pod.Spec.NodeName
	const key = "e2e.sandbox.opensandbox.io/no-new-pods"
	for _, tol := range pod.Spec.Tolerations {
		if tol.Key == key || (tol.Key == "" && tol.Operator == corev1.TolerationOpExists) {
			t.Fatalf("the sandbox pod tolerates %s: the test proves nothing", key)
		}
	}
	t.Cleanup(func() {
		if _, err := nodeframework.TryRun("", "kubectl", "taint", "node", node, key+"-"); err != nil {
			t.Errorf("removing taint %s from node %s: %v", key, node, err)
		}
	})
	nodeframework.Run(t, "", "kubectl", "taint", "node", node, key+"=true:NoSchedule")
	waitNode(t, node, "to carry taint "+key, func(n *corev1.Node) bool { return hasTaint(n, key) })

	snapshotOnNode(t, ns, pod)
}

// TestSnapshotOnFullNode: every bit of the node's allocatable CPU and memory
// is requested, so the scheduler places no pod that requests any. The commit
// pod requests none (BestEffort, like OpenSandbox's own commit Job) and runs.
func TestSnapshotOnFullNode(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	node := pod.Spec.NodeName

	// Pods that end soon would free their requests in the middle of the
	// test, and let a commit pod with requests in: pods still terminating
	// (earlier tests' namespaces), and TaskRun pods of earlier tests.
	nodeframework.Eventually(t, "no terminating pods and no unfinished TaskRun pods on node "+node, 2*time.Minute, func() (bool, error) {
		for _, p := range podsOn(t, node) {
			if _, taskRun := p.Labels["tekton.dev/taskRun"]; p.DeletionTimestamp != nil || taskRun {
				return false, nil
			}
		}
		return true, nil
	})
	n, err := nodeframework.Clients().Kube.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	freeCPU, freeMem := n.Status.Allocatable.Cpu().MilliValue(), n.Status.Allocatable.Memory().Value()
	for _, p := range podsOn(t, node) {
		cpu, mem := podRequests(&p)
		freeCPU -= cpu
		freeMem -= mem
	}
	t.Logf("node %s: allocatable cpu %s, memory %s; unrequested: cpu %dm, memory %d bytes",
		node, n.Status.Allocatable.Cpu(), n.Status.Allocatable.Memory(), freeCPU, freeMem)

	if freeCPU > 0 || freeMem > 0 {
		requests := corev1.ResourceList{}
		if freeCPU > 0 {
			requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(freeCPU, resource.DecimalSI)
		}
		if freeMem > 0 {
			requests[corev1.ResourceMemory] = *resource.NewQuantity(freeMem, resource.BinarySI)
		}
		image, command := pauseImage(t, n)
		hog := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hog", Namespace: ns},
			Spec: corev1.PodSpec{
				NodeSelector:                  map[string]string{corev1.LabelHostname: node},
				TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{
					Name: "hog", Image: image, Command: command,
					Resources: corev1.ResourceRequirements{Requests: requests},
				}},
			},
		}
		createPod(t, hog)
		nodeframework.Run(t, "", "kubectl", "-n", ns, "wait", "--for=condition=Ready", "pod/hog", "--timeout=120s")
	}

	// The scheduler has nothing left: a pod asking for 1m of CPU and 1Mi of
	// memory on that node is refused for both.
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: node},
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "probe", Image: nodeframework.LocalRegistry() + "/busybox:latest", Command: []string{"sleep", "3600"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("1m"),
					corev1.ResourceMemory: resource.MustParse("1Mi"),
				}},
			}},
		},
	}
	createPod(t, probe)
	unschedulable := waitPod(t, ns, "probe", "to be refused by the scheduler", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return p.Spec.NodeName != ""
	})
	if unschedulable.Spec.NodeName != "" {
		t.Fatalf("a pod requesting 1m CPU and 1Mi memory was scheduled on node %s: the node is not full", node)
	}
	for _, cond := range unschedulable.Status.Conditions {
		if cond.Type == corev1.PodScheduled {
			if !strings.Contains(cond.Message, "Insufficient cpu") || !strings.Contains(cond.Message, "Insufficient memory") {
				t.Fatalf("the probe pod is unschedulable for another reason: %s", cond.Message)
			}
			t.Logf("the scheduler refuses the probe pod: %s", cond.Message)
		}
	}
	deletePod(t, ns, "probe")

	snapshotOnNode(t, ns, pod)
	if hog, err := nodeframework.Clients().Kube.CoreV1().Pods(ns).Get(t.Context(), "hog", metav1.GetOptions{}); err == nil && hog.Status.Phase != corev1.PodRunning {
		t.Errorf("the pod holding the node's resources is %s, not Running: the node was not full throughout", hog.Status.Phase)
	}
}

// snapshotOnNode snapshots the sandbox and checks that it succeeded through a
// BestEffort commit pod on the sandbox's node, leaving the sandbox running.
func snapshotOnNode(t *testing.T, ns string, pod *corev1.Pod) {
	t.Helper()
	obs := watchSnapshots(t, ns, []string{"sb-snap"})
	created := time.Now()
	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := obs.wait(t, nodeSnapshotTimeout)["sb-snap"]
	if s.Status.Phase != v1alpha1.PhaseSucceed {
		t.Fatalf("sb-snap ended %s: %+v", s.Status.Phase, s.Status.Conditions)
	}
	t.Logf("sb-snap: Succeed %s after its creation; statuses seen: %v", time.Since(created).Round(time.Millisecond), obs.seen["sb-snap"])

	tr := commitTaskRunOf(t, ns, "sb-snap")
	trPod, err := nodeframework.Clients().Kube.CoreV1().Pods(test.SystemNamespace).Get(t.Context(), tr.Status.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if trPod.Spec.NodeName != pod.Spec.NodeName {
		t.Errorf("commit pod %s ran on %q, the sandbox pod is on %q", trPod.Name, trPod.Spec.NodeName, pod.Spec.NodeName)
	}
	if trPod.Status.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("commit pod %s has QoS class %s, want BestEffort (no requests, like OpenSandbox's commit Job)", trPod.Name, trPod.Status.QOSClass)
	}
	for _, cs := range s.Status.Containers {
		held := strings.TrimSpace(nodeframework.Run(t, "", "crane", "digest", "--insecure", cs.ImageURI))
		if cs.ImageDigest != held {
			t.Errorf("container %s: status digest %s, registry holds %s", cs.ContainerName, cs.ImageDigest, held)
		}
	}
	nodeframework.AssertNotPaused(t, pod)
}

// podsOn lists the pods bound to a node that still hold their requests.
func podsOn(t *testing.T, node string) []corev1.Pod {
	t.Helper()
	list, err := nodeframework.Clients().Kube.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// podRequests is a pod's CPU (millicores) and memory (bytes) requests as the
// scheduler counts them: its containers and restartable init containers,
// or its largest init container if that asks for more, plus its overhead.
func podRequests(p *corev1.Pod) (cpu, mem int64) {
	for _, ctr := range p.Spec.Containers {
		cpu += ctr.Resources.Requests.Cpu().MilliValue()
		mem += ctr.Resources.Requests.Memory().Value()
	}
	var sidecarCPU, sidecarMem, initCPU, initMem int64
	for _, ctr := range p.Spec.InitContainers {
		c, m := ctr.Resources.Requests.Cpu().MilliValue(), ctr.Resources.Requests.Memory().Value()
		if ctr.RestartPolicy != nil && *ctr.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecarCPU += c
			sidecarMem += m
			continue
		}
		initCPU = max(initCPU, sidecarCPU+c)
		initMem = max(initMem, sidecarMem+m)
	}
	cpu, mem = max(cpu+sidecarCPU, initCPU), max(mem+sidecarMem, initMem)
	cpu += p.Spec.Overhead.Cpu().MilliValue()
	mem += p.Spec.Overhead.Memory().Value()
	return cpu, mem
}

// pauseImage returns the node's pause image (the pod sandbox image, on the
// local registry), or busybox if the node lists none, with a command that
// keeps the container running.
func pauseImage(t *testing.T, n *corev1.Node) (string, []string) {
	for _, img := range n.Status.Images {
		for _, name := range img.Names {
			if strings.HasPrefix(name, nodeframework.LocalRegistry()+"/pause:") {
				return name, nil
			}
		}
	}
	t.Logf("node %s lists no %s/pause image; using busybox", n.Name, nodeframework.LocalRegistry())
	// busybox's own command, sh, exits at once: the pod would never be Ready.
	return nodeframework.LocalRegistry() + "/busybox:latest", []string{"sleep", "2147483647"}
}

// createPod creates a pod and deletes it (and waits until it is gone) when
// the test ends, so that its requests are freed before the next test.
func createPod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if _, err := nodeframework.Clients().Kube.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	t.Cleanup(func() { deletePod(t, p.Namespace, p.Name) })
}

func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if _, err := nodeframework.TryRun("", "kubectl", "-n", ns, "delete", "pod", name, "--ignore-not-found", "--wait=true", "--timeout=60s"); err != nil {
		t.Errorf("deleting pod %s/%s: %v", ns, name, err)
	}
}

// waitPod watches a pod until cond holds and returns it.
func waitPod(t *testing.T, ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ev := test.Until(t.Context(), t, time.Minute, fmt.Sprintf("pod %s/%s %s", ns, name, what), &corev1.Pod{},
		test.ListWatch(nodeframework.Clients().Kube.CoreV1().Pods(ns), test.Named(name)), nil, func(ev watch.Event) (bool, error) {
			p, ok := ev.Object.(*corev1.Pod)
			return ok && ev.Type != watch.Deleted && cond(p), nil
		})
	return ev.Object.(*corev1.Pod)
}

// waitNode watches a node until cond holds.
func waitNode(t *testing.T, name, what string, cond func(*corev1.Node) bool) {
	t.Helper()
	test.Until(t.Context(), t, time.Minute, "node "+name+" "+what, &corev1.Node{},
		test.ListWatch(nodeframework.Clients().Kube.CoreV1().Nodes(), test.Named(name)), nil, func(ev watch.Event) (bool, error) {
			n, ok := ev.Object.(*corev1.Node)
			return ok && ev.Type != watch.Deleted && cond(n), nil
		})
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Key == key {
			return true
		}
	}
	return false
}

// TestCommitPodCannotStart: a commit pod the kubelet cannot start (here its
// containerd socket volume fails to mount: config-snapshot names a socket
// path the node does not have, as on a node whose containerd listens
// elsewhere) leaves the snapshot Committing, with the kubelet's reason in
// its Ready condition within seconds. Deleting the snapshot then cleans up.
func TestCommitPodCannotStart(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	const socket = "/run/e2e-no-such-containerd/containerd.sock"
	// SetConfig waits, when the test ends, for the controller to load the
	// restored config-snapshot: later tests' snapshots must not be made
	// with the broken socket path.
	nodeframework.SetConfig(t, map[string]any{"containerd-socket": socket}, `"containerdSocket":"`+socket+`"`)

	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	created := time.Now()
	snaps := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns)
	lw := test.ListWatch(snaps, test.Named("sb-snap"))
	// The kubelet's words: MountVolume.SetUp failed for volume "...":
	// hostPath type check failed: <socket> is not a socket file.
	const why = "hostPath type check failed"
	var last *v1alpha1.SandboxSnapshot
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	_, err := watchtools.UntilWithSync(ctx, lw, &v1alpha1.SandboxSnapshot{}, nil, func(ev watch.Event) (bool, error) {
		s, ok := ev.Object.(*v1alpha1.SandboxSnapshot)
		if !ok || ev.Type == watch.Deleted {
			return false, nil
		}
		last = s
		r := s.Status.GetCondition(v1alpha1.ConditionReady)
		return s.Status.IsTerminal() || (r != nil && strings.Contains(r.Message, why)), nil
	})
	if err != nil || last.Status.IsTerminal() {
		var conds []metav1.Condition
		if last != nil {
			conds = last.Status.Conditions
		}
		var taskRun, events string
		for _, tr := range nodeframework.TaskRunsOf(t, ns, "sb-snap") {
			taskRun += fmt.Sprintf("TaskRun %s, pod %s: %+v\n", tr.Name, tr.Status.PodName, tr.Status.Conditions)
			out, _ := nodeframework.TryRun("", "kubectl", "-n", test.SystemNamespace, "get", "events", "--field-selector", "involvedObject.name="+tr.Status.PodName,
				"-o", "custom-columns=REASON:.reason,MESSAGE:.message")
			events += out
		}
		t.Fatalf("within 45s, sb-snap's Ready condition did not give the kubelet's reason (%q) while Committing: %v\nsnapshot conditions: %+v\n%sevents of the commit pod:\n%s",
			why, err, conds, taskRun, events)
	}
	r := last.Status.GetCondition(v1alpha1.ConditionReady)
	if last.Status.Phase != v1alpha1.PhaseCommitting {
		t.Errorf("phase %s while the commit pod cannot start, want Committing", last.Status.Phase)
	}
	t.Logf("%s after creation, Ready %s/%s: %s", time.Since(created).Round(time.Millisecond), r.Status, r.Reason, r.Message)

	// Deleting the snapshot cancels the commit, which never started: no
	// container of the sandbox was paused, so there is nothing to thaw, and
	// the snapshot goes as soon as Tekton has cancelled the TaskRun.
	if err := snaps.Delete(t.Context(), "sb-snap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	nodeframework.Eventually(t, "sb-snap and its TaskRuns to go, with no unpause TaskRun", time.Minute, func() (bool, error) {
		for _, tr := range nodeframework.TaskRunsOf(t, ns, "sb-snap") {
			for _, p := range tr.Spec.Params {
				if p.Name == task.ParamMode && p.Value.StringVal == task.ModeUnpause {
					var steps string
					probe := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sb-snap"}}
					if commit, err := nodeframework.Clients().Pipeline.TektonV1().TaskRuns(test.SystemNamespace).Get(t.Context(),
						names.CommitTaskRun(probe), metav1.GetOptions{}); err == nil {
						steps = fmt.Sprintf("%+v", commit.Status.Steps)
					}
					return false, fmt.Errorf("unpause TaskRun %s was started for a commit whose pod never started (commit steps: %s)", tr.Name, steps)
				}
			}
		}
		_, err := snaps.Get(t.Context(), "sb-snap", metav1.GetOptions{})
		return apierrs.IsNotFound(err) && len(nodeframework.TaskRunsOf(t, ns, "sb-snap")) == 0, nil
	})
	t.Logf("sb-snap and its TaskRuns went %s after its deletion", time.Since(deleted).Round(time.Millisecond))
	nodeframework.AssertNotPaused(t, pod)
}
