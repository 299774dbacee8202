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
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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

	repository, _, digest := splitImage(releaseControllerImage(t))
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

// openSandboxRelease and openSandboxNamespace are where
// TestChartBesideOpenSandbox installs OpenSandbox's chart.
const (
	openSandboxRelease   = "opensandbox-controller"
	openSandboxNamespace = "opensandbox-system"
)

// TestChartBesideOpenSandbox installs both as a cluster runs them:
// OpenSandbox's controller by its own chart (patched by
// hack/opensandbox/snapshot-controller-switch.patch, the switch off), which
// owns the CRDs, and this operator by its chart with the README's commands.
// A BatchSandbox pauses and resumes byte-exact through OpenSandbox's
// controller. Paused again, it outlives helm uninstall of the operator: with
// OpenSandbox's own snapshot reconciler switched back on, it resumes from its
// snapshot, byte-exact. test/e2e-node.sh runs it after
// TestChartTakesOverRelease, with OpenSandbox's build and the node's
// config-snapshot keys.
func TestChartBesideOpenSandbox(t *testing.T) {
	build, nodeConfig := os.Getenv("E2E_NODE_OPENSANDBOX_BUILD"), os.Getenv("E2E_NODE_SNAPSHOT_CONFIG")
	if releaseDir == "" || taskBundle == "" || build == "" || nodeConfig == "" {
		t.Skip("no release or OpenSandbox build (E2E_NODE_RELEASE_DIR, E2E_NODE_TASK_BUNDLE, E2E_NODE_OPENSANDBOX_BUILD, E2E_NODE_SNAPSHOT_CONFIG; test/e2e-node.sh sets them)")
	}
	operatorValues := chartValues(t, nodeConfig)
	repository, tag, digest := openSandboxImage(t, filepath.Join(build, "controller"))
	openSandboxChart := filepath.Join(build, "charts", openSandboxRelease)

	// A cluster running OpenSandbox, whose chart owns the CRDs (the earlier
	// steps applied them with kubectl: the chart takes them over).
	t.Cleanup(func() {
		for _, args := range [][]string{
			{"helm", "uninstall", chartRelease, "-n", test.SystemNamespace, "--ignore-not-found", "--timeout", "3m"},
			{"helm", "uninstall", openSandboxRelease, "-n", openSandboxNamespace, "--ignore-not-found", "--timeout", "3m"},
			{"kubectl", "delete", "namespace", openSandboxNamespace, "--ignore-not-found", "--timeout=3m"},
		} {
			if out, err := nodeframework.TryRun("", args[0], args[1:]...); err != nil {
				t.Logf("cleanup: %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	})
	nodeframework.Run(t, "", "helm", "upgrade", "--install", openSandboxRelease, openSandboxChart,
		"--namespace", openSandboxNamespace, "--create-namespace", "--take-ownership", "--force-conflicts",
		"--set", "controller.image.repository="+repository+",controller.image.tag="+tag+"@"+digest,
		"--set", "controller.snapshot.controllerEnabled=false")
	openSandboxRolledOut(t)
	// Two controllers on one snapshot would commit it twice.
	if log := nodeframework.Run(t, "", "kubectl", "-n", openSandboxNamespace, "logs", "deployment/opensandbox-controller-manager"); !strings.Contains(log, snapshotControllerOff) {
		t.Fatalf("OpenSandbox's controller, installed with controllerEnabled=false, does not log %q:\n%s", snapshotControllerOff, log)
	}

	// This operator, installed as the README says, into a cluster without it:
	// what TestChartTakesOverRelease's uninstall left (the namespace), or the
	// release (run alone), goes.
	nodeframework.Run(t, "", "kubectl", "delete", "-f", filepath.Join(releaseDir, "release.yaml"), "--ignore-not-found", "--timeout=3m")
	operatorRepository, _, operatorDigest := splitImage(releaseControllerImage(t))
	nodeframework.Run(t, "", "kubectl", "create", "namespace", test.SystemNamespace)
	nodeframework.Run(t, "", "kubectl", "label", "namespace", test.SystemNamespace, "pod-security.kubernetes.io/enforce=privileged")
	nodeframework.Run(t, "", "helm", "install", chartRelease, "../../charts/sandbox-snapshot-operator", "-n", test.SystemNamespace,
		"--set", "image.repository="+operatorRepository+",image.digest="+operatorDigest,
		"--set", "snapshot.taskBundle="+taskBundle, "-f", operatorValues)
	nodeframework.Run(t, "", "kubectl", "-n", test.SystemNamespace, "rollout", "status", "deployment/sandbox-snapshot-controller", "--timeout=180s")

	ns := nodeframework.NewNamespace(t)
	// Run before the namespace's deletion and OpenSandbox's uninstall: the
	// BatchSandbox's finalizers need OpenSandbox's controller.
	t.Cleanup(func() {
		if out, err := nodeframework.TryRun("", "kubectl", "-n", ns, "delete", "batchsandboxes", "--all", "--timeout=3m"); err != nil {
			t.Logf("cleanup: deleting the BatchSandboxes of %s: %v\n%s", ns, err, out)
		}
	})
	pod := newBatchSandbox(t, ns, "sb")
	data := writeData(t, ns, pod.Name, "/data.bin", 64<<10, "app", "sidecar")
	setPause(t, ns, "sb", true, "Paused")
	s := pausedSnapshot(t, ns, "sb")
	pod = resume(t, ns, "sb", s, pod.UID)
	checkData(t, ns, pod.Name, "/data.bin", data)

	// Paused again, then the operator uninstalled and OpenSandbox's own
	// snapshot reconciler put back on: the sandbox resumes from the snapshot.
	data = writeData(t, ns, pod.Name, "/data.bin", 64<<10, "app", "sidecar")
	setPause(t, ns, "sb", true, "Paused")
	s = pausedSnapshot(t, ns, "sb")
	nodeframework.Run(t, "", "helm", "uninstall", chartRelease, "-n", test.SystemNamespace, "--timeout", "5m")
	nodeframework.Run(t, "", "helm", "upgrade", openSandboxRelease, openSandboxChart, "-n", openSandboxNamespace,
		"--reuse-values", "--set", "controller.snapshot.controllerEnabled=true")
	openSandboxRolledOut(t)
	nodeframework.Eventually(t, "OpenSandbox's snapshot reconciler to take "+ns+"/"+s.Name, time.Minute, func() (bool, error) {
		got, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), s.Name, metav1.GetOptions{})
		return err == nil && slices.Contains(got.Finalizers, sandbox.OpenSandboxSnapshotFinalizer), err
	})
	setPause(t, ns, "sb", false, "Succeed")
	pod = readySandboxPod(t, ns, "sb", pod.UID)
	for _, cs := range s.Status.Containers {
		for _, ctr := range pod.Spec.Containers {
			if ctr.Name == cs.ContainerName && ctr.Image != cs.ImageURI {
				t.Errorf("resumed pod %s/%s container %s runs %q, want the snapshot's %q", ns, pod.Name, ctr.Name, ctr.Image, cs.ImageURI)
			}
		}
	}
	checkData(t, ns, pod.Name, "/data.bin", data)
	test.WaitForSnapshotGone(t.Context(), t, nodeframework.Clients(), ns, s.Name, time.Minute)
}

// splitImage splits an image reference into its repository, tag (or "")
// and digest (or "").
func splitImage(ref string) (repository, tag, digest string) {
	repository, digest, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(repository, ":"); i > strings.LastIndex(repository, "/") {
		repository, tag = repository[:i], repository[i+1:]
	}
	return repository, tag, digest
}

// openSandboxRolledOut waits until OpenSandbox's controller, as its chart
// last set it, runs.
func openSandboxRolledOut(t *testing.T) {
	t.Helper()
	nodeframework.Run(t, "", "kubectl", "-n", openSandboxNamespace, "rollout", "status", "deployment/opensandbox-controller-manager", "--timeout=180s")
}

// openSandboxImage pushes an image of OpenSandbox's controller, laid out as
// OpenSandbox's own (the binary at /workspace/server, which its chart runs,
// as user 65532), to the local registry, as pushLargeBase pushes its base,
// and returns its repository, tag and digest.
func openSandboxImage(t *testing.T, bin string) (repository, tag, digest string) {
	t.Helper()
	layer, err := serverLayer(bin)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile() // its rootfs names the layer
	if err != nil {
		t.Fatal(err)
	}
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = v1.Config{Entrypoint: []string{"/workspace/server"}, WorkingDir: "/workspace", User: "65532:65532"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	repository, tag = nodeframework.LocalRegistry()+"/opensandbox/controller", "e2e"
	ref, err := name.ParseReference(repository+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return repository, tag, d.String()
}

// serverLayer is a layer holding bin as workspace/server.
func serverLayer(bin string) (v1.Layer, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "workspace/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "workspace/server", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if _, err := tw.Write(b); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return tarball.LayerFromReader(&buf)
}

// chartValues writes the chart values that set config-snapshot's keys of
// data, a merge patch of config-snapshot (test/cluster/lib.sh's
// local_node_config), and returns the file's path.
func chartValues(t *testing.T, data string) string {
	t.Helper()
	var patch struct{ Data map[string]string }
	if err := json.Unmarshal([]byte(data), &patch); err != nil || len(patch.Data) == 0 {
		t.Fatalf("E2E_NODE_SNAPSHOT_CONFIG %q: want config-snapshot data as a merge patch (%v)", data, err)
	}
	snapshot := map[string]string{}
	for key, value := range patch.Data {
		words := strings.Split(key, "-")
		for i := 1; i < len(words); i++ {
			words[i] = strings.ToUpper(words[i][:1]) + words[i][1:]
		}
		snapshot[strings.Join(words, "")] = value
	}
	b, err := json.Marshal(map[string]any{"snapshot": snapshot})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "values.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
