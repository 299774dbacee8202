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
	"io/fs"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// TestSnapshotPastEphemeralStorage asks for a snapshot of a sandbox whose
// change (96 MiB, copied and layered: 192 MiB) is more than its commit pod
// may write (commit-ephemeral-storage 64Mi): the commit pod requests and is
// limited to 64Mi, the snapshot fails before the freeze naming the setting,
// the sandbox runs on, and no pod on the node is evicted.
func TestSnapshotPastEphemeralStorage(t *testing.T) {
	nodeframework.SetConfig(t, map[string]any{"commit-ephemeral-storage": "64Mi"}, `"commitEphemeralStorage":"64Mi"`)
	ns := nodeframework.NewNamespace(t)
	pod := nodeframework.CreateSandbox(t, ns, "sb")
	nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", "app", "--",
		"/bin/sh", "-c", "dd if=/dev/urandom of=/big bs=1M count=96 2>/dev/null")
	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseFailed)
	failed := s.Status.GetCondition(v1alpha1.ConditionFailed)
	if failed == nil || !strings.Contains(failed.Message, "commit-ephemeral-storage") || !strings.Contains(failed.Message, "writes about 192 MiB to the commit pod's scratch") {
		t.Fatalf("Failed condition = %+v, want a message naming commit-ephemeral-storage and the 192 MiB", failed)
	}
	t.Logf("refused: %s", failed.Message)
	nodeframework.AssertNotPaused(t, pod)

	ref := s.Status.TaskRunRef
	if ref == nil {
		t.Fatal("the snapshot names no commit TaskRun")
	}
	tr, err := nodeframework.Clients().Pipeline.TektonV1().TaskRuns(ref.Namespace).Get(t.Context(), ref.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the snapshot's commit TaskRun %s/%s: %v", ref.Namespace, ref.Name, err)
	}
	cp, err := nodeframework.Clients().Kube.CoreV1().Pods(tr.Namespace).Get(t.Context(), tr.Status.PodName, metav1.GetOptions{})
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

	noneEvicted(t)
}

// TestConcurrentSnapshotsShareTheNode takes memory snapshots of two
// sandboxes at once on a node whose checkpoint-dir (a 64 MiB tmpfs here)
// has room for either, 32 MiB of change each, but not both: the registry
// holds each push for a while, so both commit pods check the disk while the
// other holds its reservation. Exactly one snapshot succeeds; the other
// fails before its freeze saying the disk has no room, not part-way through
// a dump; both sandboxes run on, unpaused; no pod on the node is evicted;
// and checkpoint-dir holds nothing but the node's disk ledger afterwards.
func TestConcurrentSnapshotsShareTheNode(t *testing.T) {
	dir := tmpfs(t, "sso-e2e-shared-", "64m")
	host := slowManifestRegistry(t, 20*time.Second)
	nodeframework.SetConfig(t, map[string]any{"checkpoint-dir": dir, "registry": host + "/snapshots"}, `"registry":"`+host+`/snapshots"`)

	ns := nodeframework.NewNamespace(t)
	base := memoryBase(t)
	names := []string{"one", "two"}
	pods := map[string]*corev1.Pod{}
	for _, sb := range names {
		pods[sb] = runSandbox(t, ns, sb, hibernatingPod, base)
		nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", sb+"-0", "-c", "app", "--",
			"/bin/sh", "-c", "dd if=/dev/urandom of=/big bs=1M count=32 2>/dev/null")
	}
	for _, sb := range names {
		createMemorySnapshot(t, ns, sb, sb+"-pause")
	}
	var succeeded, refused []string
	for _, sb := range names {
		var s *v1alpha1.SandboxSnapshot
		nodeframework.Eventually(t, "snapshot "+sb+"-pause to end", 3*time.Minute, func() (bool, error) {
			var err error
			s, err = nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), sb+"-pause", metav1.GetOptions{})
			return err == nil && (s.Status.Phase == v1alpha1.PhaseSucceed || s.Status.Phase == v1alpha1.PhaseFailed), err
		})
		if s.Status.Phase == v1alpha1.PhaseSucceed {
			succeeded = append(succeeded, sb)
			continue
		}
		failed := s.Status.GetCondition(v1alpha1.ConditionFailed)
		if failed == nil || !strings.Contains(failed.Message, "not enough disk space for the snapshot") || !strings.Contains(failed.Message, "other snapshots running on the node have reserved") {
			t.Errorf("snapshot %s-pause failed with %+v, want a message that the disk has no room beside the other's reservation", sb, failed)
		}
		t.Logf("refused: %s", failed.Message)
		refused = append(refused, sb)
	}
	if len(succeeded) != 1 || len(refused) != 1 {
		t.Errorf("snapshots succeeded: %v, refused: %v; want one of each", succeeded, refused)
	}
	for _, sb := range names {
		countsOn(t, pods[sb])
	}
	noneEvicted(t)
	var left []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir && p != filepath.Join(dir, ".disk-ledger") && !strings.HasPrefix(p, filepath.Join(dir, ".disk-ledger")+"/") {
			left = append(left, p)
		}
		return err
	})
	if err != nil || len(left) > 0 {
		t.Errorf("checkpoint-dir %s holds %v (%v), want nothing but the disk ledger", dir, left, err)
	}
}

// tmpfs mounts, for the test, a tmpfs of size (as mount's size=) on a new
// directory named from prefix, and returns the directory.
func tmpfs(t *testing.T, prefix, size string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// noneEvicted fails t for each pod of the cluster the kubelet evicted.
func noneEvicted(t *testing.T) {
	t.Helper()
	pods, err := nodeframework.Clients().Kube.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Reason == "Evicted" {
			t.Errorf("pod %s/%s was evicted: %s", p.Namespace, p.Name, p.Status.Message)
		}
	}
}

// slowManifestRegistry serves, on the node's bridge address, the node's
// registry behind a proxy that holds every manifest upload for hold first,
// and returns its host:port.
func slowManifestRegistry(t *testing.T, hold time.Duration) string {
	t.Helper()
	bridge, _, err := net.SplitHostPort(nodeframework.LocalRegistry())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: nodeframework.LocalRegistry()})
	return test.ListenAndServe(t, net.JoinHostPort(bridge, "0"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/") {
			select {
			case <-time.After(hold):
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
}
