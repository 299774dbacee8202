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
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// chartRelease is the Helm release the chart tests install.
const chartRelease = "sandbox-snapshot-operator"

// TestChartTakesOverRelease moves a release.yaml install to the chart as
// docs/release.md says, with a paused sandbox (a Succeed snapshot, its pod
// gone) and a commit in flight (its TaskRun created, its pod held back by a
// quota on the commit pods' priority class until after the move): helm
// upgrade --install --take-ownership with the release's two digests takes
// every object over and keeps the keys patched into config-snapshot; the
// commit Succeeds and both sandboxes resume byte-exact. Then helm uninstall
// removes the operator's finalizer from each snapshot and deletes neither
// them nor the CRD. test/e2e-node.sh runs it last, after the release tests:
// it leaves no operator installed.
func TestChartTakesOverRelease(t *testing.T) {
	if releaseDir == "" || taskBundle == "" {
		t.Skip("no release installed (E2E_NODE_RELEASE_DIR, E2E_NODE_TASK_BUNDLE; test/e2e-release.sh sets them)")
	}
	ns := nodeframework.NewNamespace(t)
	registry := configKey(t, "registry")

	paused, pausedMarkers := sandboxWithMarkers(t, ns, "paused")
	nodeframework.CreateSnapshot(t, ns, "paused-pause", "paused")
	nodeframework.WaitForPhase(t, ns, "paused-pause", v1alpha1.PhaseSucceed)
	nodeframework.Run(t, "", "kubectl", "-n", ns, "delete", "pod", paused.Name, "--wait=true", "--timeout=60s")

	quotas := nodeframework.Clients().Kube.CoreV1().ResourceQuotas(test.SystemNamespace)
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "e2e-no-commit-pods", Namespace: test.SystemNamespace},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")},
			ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
				ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{config.DefaultPriorityClass}}}}}}
	if _, err := quotas.Create(t.Context(), quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = quotas.Delete(context.Background(), quota.Name, metav1.DeleteOptions{}) })
	_, inFlightMarkers := sandboxWithMarkers(t, ns, "inflight")
	nodeframework.CreateSnapshot(t, ns, "inflight-pause", "inflight")
	nodeframework.Eventually(t, "the in-flight commit to wait for its pod", 2*time.Minute, func() (bool, error) {
		s, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), "inflight-pause", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready := s.Status.GetCondition(v1alpha1.ConditionReady)
		return ready != nil && ready.Reason == v1alpha1.ReasonCommitPodPending, nil
	})

	image := releaseControllerImage(t)
	repository, digest, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(repository, ":"); i > strings.LastIndex(repository, "/") {
		repository = repository[:i] // the tag; the digest pins it
	}
	nodeframework.Run(t, "", "helm", "upgrade", "--install", chartRelease, "../../charts/sandbox-snapshot-operator",
		"--namespace", test.SystemNamespace, "--take-ownership", "--force-conflicts",
		"--set", "image.repository="+repository+",image.digest="+digest, "--set", "snapshot.taskBundle="+taskBundle)
	nodeframework.Run(t, "", "kubectl", "-n", test.SystemNamespace, "rollout", "status", "deployment/sandbox-snapshot-controller", "--timeout=180s")
	var status struct {
		Info struct{ Status string } `json:"info"`
	}
	if err := json.Unmarshal([]byte(nodeframework.Run(t, "", "helm", "status", chartRelease, "-n", test.SystemNamespace, "-o", "json")), &status); err != nil || status.Info.Status != "deployed" {
		t.Fatalf("helm status of %s: %q (%v), want deployed", chartRelease, status.Info.Status, err)
	}
	if got := configKey(t, "registry"); got != registry {
		t.Errorf("config-snapshot registry %q after the takeover, want the patched %q", got, registry)
	}
	if err := quotas.Delete(t.Context(), quota.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Tekton retries the pod on its own backoff, up to a minute: a change to
	// the TaskRun has it try at once.
	for _, tr := range nodeframework.TaskRunsOf(t, ns, "inflight-pause") {
		nodeframework.Run(t, "", "kubectl", "-n", tr.Namespace, "annotate", "taskrun", tr.Name, "e2e.sandbox.opensandbox.io/quota-gone=true")
	}

	for name, markers := range map[string]map[string]string{"paused": pausedMarkers, "inflight": inFlightMarkers} {
		s := nodeframework.WaitForPhase(t, ns, name+"-pause", v1alpha1.PhaseSucceed)
		resumed := nodeframework.ResumePod(t, ns, name+"-resumed", s, 2*time.Minute)
		for ctr, want := range markers {
			if got := nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", resumed, "-c", ctr, "--", "cat", "/marker.txt"); got != want {
				t.Errorf("sandbox %s container %s resumed with marker %q, want %q", name, ctr, got, want)
			}
		}
	}

	nodeframework.Run(t, "", "helm", "uninstall", chartRelease, "--namespace", test.SystemNamespace, "--timeout", "5m")
	for _, name := range []string{"paused-pause", "inflight-pause"} {
		s, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("snapshot %s/%s after helm uninstall: %v", ns, name, err)
		}
		if slices.Contains(s.Finalizers, sandbox.SnapshotFinalizer) {
			t.Errorf("snapshot %s/%s still holds %s after helm uninstall", ns, name, sandbox.SnapshotFinalizer)
		}
	}
	nodeframework.Run(t, "", "kubectl", "get", "crd", "sandboxsnapshots.sandbox.opensandbox.io")
}

// sandboxWithMarkers creates a sandbox and writes a marker of its own in
// each container; it returns the pod and the markers by container.
func sandboxWithMarkers(t *testing.T, ns, name string) (*corev1.Pod, map[string]string) {
	t.Helper()
	pod := nodeframework.CreateSandbox(t, ns, name)
	markers := map[string]string{}
	for _, ctr := range pod.Spec.Containers {
		markers[ctr.Name] = nodeframework.RandomMarker(t, ctr.Name)
		nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod.Name, "-c", ctr.Name, "--",
			"/bin/sh", "-c", `printf %s "$1" > /marker.txt`, "sh", markers[ctr.Name])
	}
	return pod, markers
}

// configKey returns key of the operator's config-snapshot.
func configKey(t *testing.T, key string) string {
	t.Helper()
	cm, err := nodeframework.Clients().Kube.CoreV1().ConfigMaps(test.SystemNamespace).Get(t.Context(), "config-snapshot", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data[key]
}

// releaseControllerImage returns the controller image release.yaml names.
func releaseControllerImage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(releaseDir, "release.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range imageByDigest.FindAllString(string(b), -1) {
		if ref != taskBundle && strings.Contains(ref, "/controller") {
			return ref
		}
	}
	t.Fatalf("release.yaml in %s names no controller image by digest", releaseDir)
	return ""
}
