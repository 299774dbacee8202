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
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// nodeImages returns the image service of the node's containerd, in the CRI
// plugin's namespace.
func nodeImages(t *testing.T) (context.Context, images.Store) {
	t.Helper()
	cl, err := containerd.New(nodeframework.ContainerdSock())
	if err != nil {
		t.Fatalf("connecting to containerd at %s: %v", nodeframework.ContainerdSock(), err)
	}
	t.Cleanup(func() { cl.Close() })
	return namespaces.WithNamespace(t.Context(), "k8s.io"), cl.ImageService()
}

// TestResumeKeepsImageUnderDelete plays OpenSandbox's pause and resume
// under the Delete policy: the paused sandbox's pod is deleted, the
// BatchSandbox's template takes the pinned imageUris, a pod is created from
// it, and <sandbox>-pause is deleted right after. The snapshot goes within
// seconds, but the image stays: after the pod and the node's copy of the
// image go too, a pod created again from the template pulls and runs it.
// Once the BatchSandbox is deleted, nothing refers to the image and it goes.
func TestResumeKeepsImageUnderDelete(t *testing.T) {
	nodeframework.SetConfig(t, map[string]any{"image-deletion-policy": "Delete"}, `"imageDeletionPolicy":"Delete"`)
	ns := nodeframework.NewNamespace(t)
	nodeframework.CreateSandbox(t, ns, "sb")
	marker := nodeframework.RandomMarker(t, "app")
	writeFile(t, ns, "sb-0", "/marker.txt", marker, "app")
	s := pauseSnapshot(t, ns, "sb")
	nodeframework.Run(t, "", "kubectl", "-n", ns, "delete", "pod", "sb-0", "--wait=true", "--timeout=60s")

	// OpenSandbox's resume: the template takes the imageUris, and its
	// controller creates the pod from the template.
	template := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q,"command":["/bin/sh","-c","exec sleep 2147483647"]},{"name":"sidecar","image":%q,"command":["/bin/sh","-c","exec sleep 2147483647"]}]}}}}`,
		s.Status.Containers[0].ImageURI, s.Status.Containers[1].ImageURI)
	nodeframework.Run(t, "", "kubectl", "-n", ns, "patch", "batchsandbox", "sb", "--type=merge", "-p", template)
	nodeframework.ResumePod(t, ns, "sb-0", s, 2*time.Minute)
	start := time.Now()
	test.DeleteSnapshot(t.Context(), t, nodeframework.Clients(), ns, s.Name, 30*time.Second)
	t.Logf("snapshot %s gone %v after its deletion, the resumed pod running from its images", s.Name, time.Since(start).Round(100*time.Millisecond))
	test.WaitForEvent(t.Context(), t, nodeframework.Clients(), ns, s.Name, v1alpha1.ReasonImageDeletionDeferred, "", nodeframework.EventTimeout)
	refs := test.PinnedDigests(t, s)
	for _, ref := range refs {
		if !test.ManifestHeld(t.Context(), t, ref) {
			t.Fatalf("%s was deleted while a pod runs from it and a BatchSandbox template names it", ref)
		}
	}

	// A drain: the pod goes, and so does the node's copy of the image; the
	// template still names the image.
	nodeframework.Run(t, "", "kubectl", "-n", ns, "delete", "pod", "sb-0", "--wait=true", "--timeout=60s")
	ctx, is := nodeImages(t)
	for _, ref := range refs {
		if err := is.Delete(ctx, ref.String()); err != nil && !errdefs.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	// Always: the kubelet asks the registry for the manifest, whatever the
	// node still caches.
	pod := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"sb-0","namespace":%q},"spec":{"terminationGracePeriodSeconds":1,"containers":[{"name":"app","image":%q,"imagePullPolicy":"Always","command":["/bin/sh","-c","exec sleep 2147483647"]}]}}`,
		ns, s.Status.Containers[0].ImageURI)
	nodeframework.Run(t, pod, "kubectl", "apply", "-f", "-")
	nodeframework.Run(t, "", "kubectl", "-n", ns, "wait", "--for=condition=Ready", "pod/sb-0", "--timeout=120s")
	if got := readFile(t, ns, "sb-0", "app", "/marker.txt"); got != marker {
		t.Errorf("the pod created again from the template reads marker %q, want %q", got, marker)
	}

	// The sandbox is deleted: nothing refers to the images any more.
	nodeframework.Run(t, "", "kubectl", "-n", ns, "delete", "batchsandbox/sb", "pod/sb-0", "--wait=true", "--timeout=60s")
	// One ImagesDeleted event per image: the first says nothing of the others.
	test.WaitForEvent(t.Context(), t, nodeframework.Clients(), ns, s.Name, v1alpha1.ReasonImagesDeleted, "", nodeframework.EventTimeout)
	nodeframework.Eventually(t, "every image to leave the registry once nothing refers to it", time.Minute, func() (bool, error) {
		for _, ref := range refs {
			if test.ManifestHeld(t.Context(), t, ref) {
				t.Logf("%s is still in the registry", ref)
				return false, nil
			}
		}
		return true, nil
	})
}

// TestReleaseOnDeletion deletes a Succeed snapshot whose images the node
// kept for a resume: a release TaskRun removes them from the node, and is
// deleted once it has ended.
func TestReleaseOnDeletion(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	nodeframework.CreateSandbox(t, ns, "sb")
	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)
	ctx, is := nodeImages(t)
	refs := test.PinnedDigests(t, s)
	for _, ref := range refs {
		if _, err := is.Get(ctx, ref.String()); err != nil {
			t.Fatalf("the node does not keep %s for a resume: %v", ref, err)
		}
	}
	test.DeleteSnapshot(t.Context(), t, nodeframework.Clients(), ns, "sb-snap", 30*time.Second)
	nodeframework.Eventually(t, "the node's copies of the snapshot's images to be removed", 2*time.Minute, func() (bool, error) {
		for _, ref := range refs {
			if _, err := is.Get(ctx, ref.String()); !errdefs.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	nodeframework.Eventually(t, "the snapshot's TaskRuns to be deleted", 2*time.Minute, func() (bool, error) {
		return len(nodeframework.TaskRunsOf(t, ns, "sb-snap")) == 0, nil
	})
}

// refusingRegistry serves, on the node's bridge address, the node's registry
// behind a proxy that refuses to delete manifests, as distribution does
// unless REGISTRY_STORAGE_DELETE_ENABLED is set. It returns its host:port.
func refusingRegistry(t *testing.T) string {
	t.Helper()
	host, _, err := net.SplitHostPort(nodeframework.LocalRegistry())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: nodeframework.LocalRegistry()})
	return test.ListenAndServe(t, net.JoinHostPort(host, "0"), test.RefuseDeletes(proxy))
}

// TestRegistryRefusesDeletion: under the Delete policy, a registry that
// refuses deletion ends it at once: the snapshot is gone within seconds,
// and ImagesLeftBehind names the registry's answer.
func TestRegistryRefusesDeletion(t *testing.T) {
	host := refusingRegistry(t)
	nodeframework.SetConfig(t, map[string]any{"image-deletion-policy": "Delete", "registry": host + "/snapshots", "insecure-registry": "true"},
		`"registry":"`+host+`/snapshots"`)
	ns := nodeframework.NewNamespace(t)
	nodeframework.CreateSandbox(t, ns, "sb")
	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)
	start := time.Now()
	test.DeleteSnapshot(t.Context(), t, nodeframework.Clients(), ns, "sb-snap", 30*time.Second)
	ev := test.WaitForEvent(t.Context(), t, nodeframework.Clients(), ns, "sb-snap", v1alpha1.ReasonImagesLeftBehind, "", nodeframework.EventTimeout)
	t.Logf("gone and ImagesLeftBehind %v after the deletion", time.Since(start).Round(100*time.Millisecond))
	if !strings.Contains(ev.Message, "UNSUPPORTED") {
		t.Errorf("ImagesLeftBehind does not name the registry's answer: %s", ev.Message)
	}
	for _, ref := range test.PinnedDigests(t, s) {
		if !test.ManifestHeld(t.Context(), t, ref) {
			t.Errorf("%s is gone although the registry refuses deletion", ref)
		}
	}
}

// TestOverlayfsRootMissing snapshots on a node where containerd-overlayfs-root
// does not exist, as on k3s or RKE2, whose containerd keeps its snapshots
// elsewhere: the commit pod starts, and containerd tars the change.
func TestOverlayfsRootMissing(t *testing.T) {
	dir, err := os.MkdirTemp("", "sso-e2e-overlayfs-")
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet creates the mount's source; it is this test's to remove.
	t.Cleanup(func() { os.RemoveAll(dir) })
	root := filepath.Join(dir, "io.containerd.snapshotter.v1.overlayfs")
	nodeframework.SetConfig(t, map[string]any{"containerd-overlayfs-root": root}, `"overlayfsRoot":"`+root+`"`)
	ns := nodeframework.NewNamespace(t)
	nodeframework.CreateSandbox(t, ns, "sb")
	marker := nodeframework.RandomMarker(t, "app")
	writeFile(t, ns, "sb-0", "/marker.txt", marker, "app")
	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)
	logs := commitStepLog(t, s)
	if !strings.Contains(logs, "upper directory not visible here") {
		t.Errorf("the commit step did not fall back to containerd's tar; its log:\n%s", logs)
	}
	nodeframework.ResumePod(t, ns, "sb-resumed", s, 2*time.Minute)
	if got := readFile(t, ns, "sb-resumed", "app", "/marker.txt"); got != marker {
		t.Errorf("resumed with marker %q, want %q", got, marker)
	}
}
