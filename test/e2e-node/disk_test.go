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
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// TestSnapshotPastEphemeralStorage asks for a snapshot of a sandbox whose
// change (96 MiB, copied and layered: 192 MiB) is more than its commit pod
// may write (commit-ephemeral-storage 64Mi): the commit pod requests and is
// limited to 64Mi, the snapshot fails before the freeze naming the setting,
// the sandbox runs on, and no pod on the node is evicted.
func TestSnapshotPastEphemeralStorage(t *testing.T) {
	setConfig(t, map[string]any{"commit-ephemeral-storage": "64Mi"}, `"commitEphemeralStorage":"64Mi"`)
	ns := newNamespace(t)
	pod := createSandbox(t, ns, "sb")
	run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", "app", "--",
		"/bin/sh", "-c", "dd if=/dev/urandom of=/big bs=1M count=96 2>/dev/null")
	createSnapshot(t, ns, "sb-snap", "sb")
	s := waitForPhase(t, ns, "sb-snap", v1alpha1.PhaseFailed)
	failed := s.Status.GetCondition(v1alpha1.ConditionFailed)
	if failed == nil || !strings.Contains(failed.Message, "commit-ephemeral-storage") || !strings.Contains(failed.Message, "writes about 192 MiB to the commit pod's scratch") {
		t.Fatalf("Failed condition = %+v, want a message naming commit-ephemeral-storage and the 192 MiB", failed)
	}
	t.Logf("refused: %s", failed.Message)
	assertNotPaused(t, pod)

	ref := s.Status.TaskRunRef
	if ref == nil {
		t.Fatal("the snapshot names no commit TaskRun")
	}
	tr, err := c.Pipeline.TektonV1().TaskRuns(ref.Namespace).Get(t.Context(), ref.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the snapshot's commit TaskRun %s/%s: %v", ref.Namespace, ref.Name, err)
	}
	cp, err := c.Kube.CoreV1().Pods(tr.Namespace).Get(t.Context(), tr.Status.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := resource.MustParse("64Mi")
	for _, ctr := range cp.Spec.Containers {
		if ctr.Name != "step-commit" {
			continue
		}
		req, lim := ctr.Resources.Requests[corev1.ResourceEphemeralStorage], ctr.Resources.Limits[corev1.ResourceEphemeralStorage]
		if req.Cmp(want) != 0 || lim.Cmp(want) != 0 {
			t.Errorf("step-commit ephemeral-storage requests %s, limits %s; want 64Mi both", req.String(), lim.String())
		}
	}

	pods, err := c.Kube.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Reason == "Evicted" {
			t.Errorf("pod %s/%s was evicted: %s", p.Namespace, p.Name, p.Status.Message)
		}
	}
}
