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
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// writeFile writes content to path in every container of a pod, and checks
// it there: passed as an argument, since kubectl exec -i may drop stdin.
func writeFile(t *testing.T, ns, pod, path, content string, containers ...string) {
	t.Helper()
	for _, ctr := range containers {
		nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod, "-c", ctr, "--", "/bin/sh", "-c", `printf %s "$1" > "$2"`, "sh", content, path)
		if got := nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod, "-c", ctr, "--", "cat", path); got != content {
			t.Fatalf("%s/%s container %s holds %q in %s, want %q", ns, pod, ctr, got, path, content)
		}
	}
}

// readFile reads a file of a pod's container.
func readFile(t *testing.T, ns, pod, ctr, path string) string {
	t.Helper()
	return nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod, "-c", ctr, "--", "cat", path)
}

// pauseSnapshot creates the snapshot OpenSandbox makes to pause a sandbox:
// <sandbox>-pause, controlled by its BatchSandbox.
func pauseSnapshot(t *testing.T, ns, sandbox string) *v1alpha1.SandboxSnapshot {
	t.Helper()
	sb, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().BatchSandboxes(ns).Get(t.Context(), sandbox, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sandbox + "-pause",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, v1alpha1.SchemeGroupVersion.WithKind("BatchSandbox"))}},
		Spec: v1alpha1.SandboxSnapshotSpec{SandboxName: sandbox},
	}
	if _, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating SandboxSnapshot %s/%s: %v", ns, s.Name, err)
	}
	return nodeframework.WaitForPhase(t, ns, s.Name, v1alpha1.PhaseSucceed)
}

// TestSameNamesInTwoNamespaces snapshots, in the same instant, two tenants'
// sandboxes and snapshots of the same names: each imageUri is its own, and
// each resume reads its own tenant's file.
func TestSameNamesInTwoNamespaces(t *testing.T) {
	nss := []string{nodeframework.NewNamespace(t), nodeframework.NewNamespace(t)}
	for _, ns := range nss {
		nodeframework.CreateSandbox(t, ns, "sb")
		writeFile(t, ns, "sb-0", "/who", ns, "app", "sidecar")
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, ns := range nss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap"}, Spec: v1alpha1.SandboxSnapshotSpec{SandboxName: "sb"}}
			if _, err := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
				t.Errorf("creating SandboxSnapshot %s/snap: %v", ns, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	var snaps []*v1alpha1.SandboxSnapshot
	for _, ns := range nss {
		snaps = append(snaps, nodeframework.WaitForPhase(t, ns, "snap", v1alpha1.PhaseSucceed))
	}
	for i, cs := range snaps[0].Status.Containers {
		a, errA := name.ParseReference(cs.ImageURI, name.Insecure)
		b, errB := name.ParseReference(snaps[1].Status.Containers[i].ImageURI, name.Insecure)
		if errA != nil || errB != nil || a.Context().Name() == b.Context().Name() {
			t.Errorf("container %s: both namespaces' snapshots push to one repository: %s, %s (%v, %v)", cs.ContainerName, a, b, errA, errB)
		}
	}
	for i, ns := range nss {
		nodeframework.ResumePod(t, ns, "sb-resumed", snaps[i], 2*time.Minute)
		for _, ctr := range []string{"app", "sidecar"} {
			if got := readFile(t, ns, "sb-resumed", ctr, "/who"); got != ns {
				t.Errorf("namespace %s's sandbox resumed from %s (container %s) with /who %q: another tenant's file", ns, snaps[i].Status.Containers[0].ImageURI, ctr, got)
			}
		}
	}
}

// TestRecreatedSandboxKeepsFirstImage pauses a BatchSandbox as OpenSandbox
// does, deletes it, creates it again under its name with other content and
// pauses it again, at the same generation: the first snapshot's imageUri
// still resumes the first content.
func TestRecreatedSandboxKeepsFirstImage(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	nodeframework.CreateSandbox(t, ns, "gs")
	writeFile(t, ns, "gs-0", "/content", "first", "app")
	first := pauseSnapshot(t, ns, "gs")

	// Deleting the BatchSandbox deletes its snapshot (it owns it); under the
	// default Retain policy the images stay.
	nodeframework.Run(t, "", "kubectl", "-n", ns, "delete", "batchsandbox/gs", "pod/gs-0", "--wait=true", "--timeout=60s")
	nodeframework.Eventually(t, "the BatchSandbox and its snapshot to go", time.Minute, func() (bool, error) {
		_, sbErr := nodeframework.Clients().Sandbox.SandboxV1alpha1().BatchSandboxes(ns).Get(t.Context(), "gs", metav1.GetOptions{})
		_, sErr := nodeframework.Clients().Sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), "gs-pause", metav1.GetOptions{})
		return apierrs.IsNotFound(sbErr) && apierrs.IsNotFound(sErr), nil
	})

	nodeframework.CreateSandbox(t, ns, "gs")
	writeFile(t, ns, "gs-0", "/content", "second", "app")
	second := pauseSnapshot(t, ns, "gs")
	if first.Status.Containers[0].ImageURI == second.Status.Containers[0].ImageURI {
		t.Fatalf("both incarnations of BatchSandbox gs pushed to %s", first.Status.Containers[0].ImageURI)
	}
	t.Logf("first %s, second %s", first.Status.Containers[0].ImageURI, second.Status.Containers[0].ImageURI)
	nodeframework.ResumePod(t, ns, "gs-first", first, 2*time.Minute)
	if got := readFile(t, ns, "gs-first", "app", "/content"); got != "first" {
		t.Errorf("the first snapshot's imageUri resumed /content %q, want the first sandbox's", got)
	}
}
