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
	"net"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// TestSnapshotAndResume is the whole loop: a live sandbox pod is snapshotted
// by a real TaskRun on its node, and a new pod started from the pushed images
// holds every container's files, byte for byte.
func TestSnapshotAndResume(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	pod := nodeframework.CreateSandbox(t, ns, "sb")

	markers := map[string]string{}
	for _, ctr := range pod.Spec.Containers {
		markers[ctr.Name] = nodeframework.RandomMarker(t, ctr.Name)
		// As an argument, not on stdin: kubectl exec -i sometimes drops stdin.
		nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", ctr.Name, "--",
			"/bin/sh", "-c", `printf %s "$1" > /marker.txt`, "sh", markers[ctr.Name])
		if got := nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", ctr.Name, "--", "cat", "/marker.txt"); got != markers[ctr.Name] {
			t.Fatalf("container %s holds marker %q before the snapshot, want %q", ctr.Name, got, markers[ctr.Name])
		}
	}

	metricsBefore := scrapeCounts(t, snapshotSeries...)
	created := time.Now()
	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)
	total := time.Since(created)
	assertOneMoreSnapshot(t, metricsBefore)

	// The TaskRun ran on the sandbox's node.
	// Found by its name: OpenSandbox's CRD prunes status.taskRunRef.
	tr, err := nodeframework.Clients().Pipeline.TektonV1().TaskRuns(test.SystemNamespace).Get(t.Context(), names.CommitTaskRun(s), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	trPod, err := nodeframework.Clients().Kube.CoreV1().Pods(tr.Namespace).Get(t.Context(), tr.Status.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Evicted after the node's other BestEffort pods, preempting none.
	if trPod.Spec.PriorityClassName != "sandbox-snapshot-commit" || trPod.Spec.Priority == nil || *trPod.Spec.Priority != 1000000 ||
		trPod.Spec.PreemptionPolicy == nil || *trPod.Spec.PreemptionPolicy != corev1.PreemptNever {
		t.Errorf("commit pod priority class %q, priority %v, preemption %v; want sandbox-snapshot-commit, 1000000, Never",
			trPod.Spec.PriorityClassName, trPod.Spec.Priority, trPod.Spec.PreemptionPolicy)
	}
	if trPod.Spec.NodeName != pod.Spec.NodeName || s.Status.SourceNodeName != pod.Spec.NodeName {
		t.Errorf("TaskRun pod ran on %q, snapshot says %q, sandbox pod is on %q", trPod.Spec.NodeName, s.Status.SourceNodeName, pod.Spec.NodeName)
	}
	// It ran the Task the operator was configured with.
	assertTaskSource(t, tr)

	// tkn tells the story: the commit step, then the push step.
	logs := nodeframework.Run(t, "", "tkn", "taskrun", "logs", tr.Name, "-n", tr.Namespace)
	for _, step := range []string{"[commit]", "[push]"} {
		if !strings.Contains(logs, step) {
			t.Errorf("tkn taskrun logs shows no %s step:\n%s", step, logs)
		}
	}

	// Every digest is the manifest digest the registry holds.
	if len(s.Status.Containers) != len(pod.Spec.Containers) {
		t.Fatalf("status.containers = %+v, want one per container of %s", s.Status.Containers, pod.Name)
	}
	for _, cs := range s.Status.Containers {
		held := strings.TrimSpace(nodeframework.Run(t, "", "crane", "digest", "--insecure", cs.ImageURI))
		if cs.ImageDigest != held {
			t.Errorf("container %s: status digest %s, registry holds %s for %s", cs.ContainerName, cs.ImageDigest, held, cs.ImageURI)
		}
	}

	// The sandbox runs on, unpaused.
	nodeframework.AssertNotPaused(t, pod)
	t.Logf("snapshot: %s from creation to Succeed; pause window %s", total.Round(time.Millisecond), pauseWindow(s))

	// Resume: a new pod from the snapshot's images, as OpenSandbox rewrites
	// the template's images, reads back each marker.
	resumed := time.Now()
	nodeframework.ResumePod(t, ns, "sb-resumed", s, 2*time.Minute)
	for name, want := range markers {
		got := nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", "sb-resumed", "-c", name, "--", "cat", "/marker.txt")
		if got != want {
			t.Errorf("container %s resumed with marker %q, want %q", name, got, want)
		}
	}
	t.Logf("resume: %s from pod creation to markers read back", time.Since(resumed).Round(time.Millisecond))
}

// TestMissingSandbox fails clearly and makes no TaskRun.
func TestMissingSandbox(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	nodeframework.CreateSnapshot(t, ns, "orphan", "no-such-sandbox")
	s := nodeframework.WaitForPhase(t, ns, "orphan", v1alpha1.PhaseFailed)
	if cond := s.Status.GetCondition(v1alpha1.ConditionFailed); cond == nil || !strings.Contains(cond.Message, "no-such-sandbox") {
		t.Errorf("Failed condition %+v does not name the sandbox", cond)
	}
	if trs := nodeframework.TaskRunsOf(t, ns, "orphan"); len(trs) != 0 {
		t.Errorf("TaskRuns %v exist for a snapshot of a missing sandbox", test.TaskRunNames(trs))
	}
}

// TestUnreachableRegistry fails with the registry's error and leaves the
// sandbox running.
func TestUnreachableRegistry(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	// A loopback port nothing listens on: the push is refused at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	nodeframework.SetConfig(t, map[string]any{"registry": closed + "/snapshots"}, `"registry":"`+closed+`/snapshots"`)

	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseFailed)
	cond := s.Status.GetCondition(v1alpha1.ConditionFailed)
	if cond == nil || !strings.Contains(cond.Message, closed) || !strings.Contains(cond.Message, "connection refused") {
		t.Errorf("Failed condition %+v does not carry the registry's error", cond)
	}
	nodeframework.AssertNotPaused(t, pod)
}

// TestDeleteMidCommit cancels and removes the TaskRun of a deleted snapshot
// and leaves the sandbox running.
func TestDeleteMidCommit(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	// A large diff keeps the commit busy while the snapshot is deleted.
	nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", "app", "--",
		"/bin/sh", "-c", "dd if=/dev/urandom of=/big bs=1M count=64 2>/dev/null")

	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	nodeframework.Eventually(t, "the commit TaskRun to start", time.Minute, func() (bool, error) {
		trs := nodeframework.TaskRunsOf(t, ns, "sb-snap")
		return len(trs) == 1, nil
	})
	if err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Delete(t.Context(), "sb-snap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nodeframework.Eventually(t, "the snapshot and its TaskRuns to go", 2*time.Minute, func() (bool, error) {
		_, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), "sb-snap", metav1.GetOptions{})
		return apierrs.IsNotFound(err) && len(nodeframework.TaskRunsOf(t, ns, "sb-snap")) == 0, nil
	})
	// The commit pod got SIGTERM; its containers must be thawed once it is gone.
	nodeframework.Eventually(t, "the commit pod to finish", time.Minute, func() (bool, error) {
		pods, err := nodeframework.Clients().Kube.CoreV1().Pods(test.SystemNamespace).List(t.Context(), metav1.ListOptions{
			LabelSelector: test.TaskRunSelector(ns, ""),
		})
		return err == nil && len(pods.Items) == 0, nil
	})
	nodeframework.AssertNotPaused(t, pod)
}

// TestMissingBaseBlobs snapshots a pod whose image's compressed layers
// containerd no longer holds: the committer fetches them from the source
// registry, and the snapshot still succeeds.
func TestMissingBaseBlobs(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	removed := discardLayerBlobs(t, pod.Spec.Containers[0].Image)
	t.Logf("removed %d layer blob(s) of %s from containerd's content store", removed, pod.Spec.Containers[0].Image)

	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)
	for _, cs := range s.Status.Containers {
		held := strings.TrimSpace(nodeframework.Run(t, "", "crane", "digest", "--insecure", cs.ImageURI))
		if cs.ImageDigest != held {
			t.Errorf("container %s: status digest %s, registry holds %s", cs.ContainerName, cs.ImageDigest, held)
		}
	}
	nodeframework.AssertNotPaused(t, pod)
}

// discardLayerBlobs deletes the compressed layer blobs of an image from the
// node's content store, as containerd does after unpacking when configured
// to discard them, and returns how many it deleted.
func discardLayerBlobs(t *testing.T, ref string) int {
	t.Helper()
	cl, err := containerd.New(nodeframework.ContainerdSock())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := namespaces.WithNamespace(context.Background(), "k8s.io")
	img, err := cl.ImageService().Get(ctx, ref)
	if err != nil {
		t.Fatalf("image %s on the node: %v", ref, err)
	}
	manifest, err := images.Manifest(ctx, cl.ContentStore(), img.Target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, layer := range manifest.Layers {
		if err := cl.ContentStore().Delete(ctx, layer.Digest); err != nil {
			t.Fatalf("deleting layer %s of %s: %v", layer.Digest, ref, err)
		}
	}
	return len(manifest.Layers)
}

// pauseWindow describes status.pauseWindowMilliseconds, which OpenSandbox's
// CRD prunes.
func pauseWindow(s *v1alpha1.SandboxSnapshot) string {
	if s.Status.PauseWindowMilliseconds == nil {
		return "not recorded (pruned by the installed CRD)"
	}
	return fmt.Sprintf("%d ms", *s.Status.PauseWindowMilliseconds)
}
