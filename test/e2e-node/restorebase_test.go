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
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

// restoreBase serves a platform's restore base (ctrharness.RestoreBaseImage)
// on loopback (onLoopback), where containerd 2.1's restore pulls it
// anonymously, over plain HTTP, and returns its name there, pinned by
// digest.
func restoreBase(t *testing.T) string {
	t.Helper()
	img, err := ctrharness.RestoreBaseImage()
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref := onLoopback(t, img, "platform/restore-base:1")
	return strings.TrimSuffix(ref, ":1") + "@" + d.String()
}

// TestMemorySnapshotPrivateBase hibernates a sandbox as a shared cluster
// must: its base image and its snapshots on a registry that asks for
// credentials, which the node reaches only through its registry
// configuration, and neither of which containerd's restore can pull. With
// memory-restore-base set, the memory snapshot holds the sandbox's whole
// root filesystem over that image, and the sandbox resumes from it, with
// its pull secret, its processes going on and its files back. With the
// registry pointed at this cluster's own, which asks no one for
// credentials, and memory-anonymous-pull Refuse, the next memory snapshot
// is refused before the freeze, naming the repository, and the sandbox
// counts on.
func TestMemorySnapshotPrivateBase(t *testing.T) {
	host, pushSecret := privateRegistryAndSecret(t, "e2e-private-memory")
	rb := restoreBase(t)
	nodeframework.SetConfig(t, map[string]any{"registry": host + "/snapshots", "push-secret": pushSecret.Name,
		task.ParamMemoryRestoreBase: rb, task.ParamMemoryAnonymousPull: task.MemoryAnonymousPullRefuse},
		`"registry":"`+host+`/snapshots"`)

	ns := nodeframework.NewNamespace(t)
	pullSecret := pushSecret.DeepCopy()
	pullSecret.ObjectMeta = metav1.ObjectMeta{Name: "registry", Namespace: ns}
	if _, err := nodeframework.Clients().Kube.CoreV1().Secrets(ns).Create(t.Context(), pullSecret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podSpec := func(image string) corev1.PodSpec {
		spec := test.MustParse[corev1.PodSpec](t, hibernatingPod, image)
		spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: pullSecret.Name}}
		return *spec
	}
	test.CreateSandbox(t.Context(), t, nodeframework.Clients(), ns, "priv", podSpec(host+"/busybox:latest"))
	nodeframework.Run(t, "", "kubectl", "-n", ns, "wait", "--for=condition=Ready", "pod/priv-0", "--timeout=2m")
	nodeframework.Eventually(t, "the counter to pass 10", 30*time.Second, func() (bool, error) {
		_, n := counterLines(t, ns, "priv-0")
		return n >= 10, nil
	})
	mark, _ := counterLines(t, ns, "priv-0")
	nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", "priv-0", "-c", "app", "--", "sh", "-c", "echo the-change >/tmp/change")

	createMemorySnapshot(t, ns, "priv", "priv-pause")
	s := nodeframework.WaitForPhase(t, ns, "priv-pause", v1alpha1.PhaseSucceed)
	if mode := resultOf(commitTaskRunOf(t, ns, s.Name), task.ResultSnapshotMode); mode != task.SnapshotModeMemory {
		t.Fatalf("the snapshot took %s %q, want %s", task.ResultSnapshotMode, mode, task.SnapshotModeMemory)
	}
	nodeframework.Run(t, "", "kubectl", "-n", ns, "delete", "pod", "priv-0", "--wait=true", "--timeout=60s")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "priv-0", Labels: map[string]string{sandbox.BatchSandboxPodLabel: "priv"}},
		Spec: podSpec(s.Status.Containers[0].ImageURI)}
	if _, err := nodeframework.Clients().Kube.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodeframework.Run(t, "", "kubectl", "-n", ns, "wait", "--for=condition=Ready", "pod/priv-0", "--timeout=2m")
	if rmark, _ := counterLines(t, ns, "priv-0"); rmark != mark {
		t.Fatalf("the resumed counter runs under mark %s, want %s: it restarted", rmark, mark)
	}
	countsOn(t, pod)
	if got := strings.TrimSpace(nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", "priv-0", "-c", "app", "--", "cat", "/tmp/change")); got != "the-change" {
		t.Errorf("after the resume /tmp/change holds %q, want the change", got)
	}

	nodeframework.SetConfig(t, map[string]any{"registry": nodeframework.LocalRegistry() + "/public-snapshots", "push-secret": ""}, `"registry":"`+nodeframework.LocalRegistry()+`/public-snapshots"`)
	refusedAs(t, ns, "priv", "priv-public", v1alpha1.ReasonMemorySnapshotUnsupported, "anyone may pull from repository "+nodeframework.LocalRegistry()+"/public-snapshots/")
	countsOn(t, pod)
}
