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
	"net/http"
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
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// nodeImages returns the image service of the node's containerd, in the CRI
// plugin's namespace.
func nodeImages(t *testing.T) (context.Context, images.Store) {
	t.Helper()
	cl, err := containerd.New(containerdSock)
	if err != nil {
		t.Fatalf("connecting to containerd at %s: %v", containerdSock, err)
	}
	t.Cleanup(func() { cl.Close() })
	return namespaces.WithNamespace(t.Context(), "k8s.io"), cl.ImageService()
}

// pinnedDigests returns each container's image of a snapshot as
// <repository>@<digest>, the name the node keeps it under.
func pinnedDigests(t *testing.T, s *v1alpha1.SandboxSnapshot) []name.Digest {
	t.Helper()
	var out []name.Digest
	for _, cs := range s.Status.Containers {
		ref, err := name.ParseReference(cs.ImageURI, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ref.Context().Digest(cs.ImageDigest))
	}
	return out
}

// waitEvent waits for an event of the given reason on a snapshot.
func waitEvent(t *testing.T, ns, snapshot, reason string) *corev1.Event {
	t.Helper()
	return waitEventWith(t, ns, snapshot, reason, "")
}

// waitEventWith waits for an event of the given reason on a snapshot whose
// message contains text.
func waitEventWith(t *testing.T, ns, snapshot, reason, text string) *corev1.Event {
	t.Helper()
	var found *corev1.Event
	eventually(t, fmt.Sprintf("event %s %q on %s/%s", reason, text, ns, snapshot), 2*time.Minute, func() (bool, error) {
		evs, err := c.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": snapshot, "reason": reason}.String()})
		if err != nil {
			return false, err
		}
		for i := range evs.Items {
			if strings.Contains(evs.Items[i].Message, text) {
				found = &evs.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	t.Logf("event %s on %s: %s", reason, snapshot, found.Message)
	return found
}

// deleteSnapshot deletes a snapshot and waits until it is gone.
func deleteSnapshot(t *testing.T, ns, snapshot string, within time.Duration) {
	t.Helper()
	if err := c.sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Delete(t.Context(), snapshot, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "SandboxSnapshot "+ns+"/"+snapshot+" to be deleted", within, func() (bool, error) {
		_, err := c.sandbox.SandboxV1alpha1().SandboxSnapshots(ns).Get(t.Context(), snapshot, metav1.GetOptions{})
		return apierrs.IsNotFound(err), nil
	})
}

// TestResumeKeepsImageUnderDelete plays OpenSandbox's pause and resume
// under the Delete policy: the paused sandbox's pod is deleted, the
// BatchSandbox's template takes the pinned imageUris, a pod is created from
// it, and <sandbox>-pause is deleted right after. The snapshot goes within
// seconds, but the image stays: after the pod and the node's copy of the
// image go too, a pod created again from the template pulls and runs it.
// Once the BatchSandbox is deleted, nothing refers to the image and it goes.
func TestResumeKeepsImageUnderDelete(t *testing.T) {
	setConfig(t, map[string]string{"image-deletion-policy": "Delete"}, `"imageDeletionPolicy":"Delete"`)
	ns := newNamespace(t)
	createSandbox(t, ns, "sb")
	marker := randomMarker(t, "app")
	writeFile(t, ns, "sb-0", "/marker.txt", marker, "app")
	s := pauseSnapshot(t, ns, "sb")
	run(t, "", "kubectl", "-n", ns, "delete", "pod", "sb-0", "--wait=true", "--timeout=60s")

	// OpenSandbox's resume: the template takes the imageUris, and its
	// controller creates the pod from the template.
	template := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q,"command":["/bin/sh","-c","exec sleep 2147483647"]},{"name":"sidecar","image":%q,"command":["/bin/sh","-c","exec sleep 2147483647"]}]}}}}`,
		s.Status.Containers[0].ImageURI, s.Status.Containers[1].ImageURI)
	run(t, "", "kubectl", "-n", ns, "patch", "batchsandbox", "sb", "--type=merge", "-p", template)
	resumePod(t, ns, "sb-0", s, 2*time.Minute)
	start := time.Now()
	deleteSnapshot(t, ns, s.Name, 30*time.Second)
	t.Logf("snapshot %s gone %v after its deletion, the resumed pod running from its images", s.Name, time.Since(start).Round(100*time.Millisecond))
	waitEvent(t, ns, s.Name, v1alpha1.ReasonImageDeletionDeferred)
	refs := pinnedDigests(t, s)
	for _, ref := range refs {
		if !held(t, ref) {
			t.Fatalf("%s was deleted while a pod runs from it and a BatchSandbox template names it", ref)
		}
	}

	// A drain: the pod goes, and so does the node's copy of the image; the
	// template still names the image.
	run(t, "", "kubectl", "-n", ns, "delete", "pod", "sb-0", "--wait=true", "--timeout=60s")
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
	run(t, pod, "kubectl", "apply", "-f", "-")
	run(t, "", "kubectl", "-n", ns, "wait", "--for=condition=Ready", "pod/sb-0", "--timeout=120s")
	if got := readFile(t, ns, "sb-0", "app", "/marker.txt"); got != marker {
		t.Errorf("the pod created again from the template reads marker %q, want %q", got, marker)
	}

	// The sandbox is deleted: nothing refers to the images any more.
	run(t, "", "kubectl", "-n", ns, "delete", "batchsandbox/sb", "pod/sb-0", "--wait=true", "--timeout=60s")
	waitEvent(t, ns, s.Name, v1alpha1.ReasonImagesDeleted)
	for _, ref := range refs {
		if held(t, ref) {
			t.Errorf("%s is still in the registry once nothing refers to it", ref)
		}
	}
}

// TestReleaseOnDeletion deletes a Succeed snapshot whose images the node
// kept for a resume: a release TaskRun removes them from the node, and is
// deleted once it has ended.
func TestReleaseOnDeletion(t *testing.T) {
	ns := newNamespace(t)
	createSandbox(t, ns, "sb")
	createSnapshot(t, ns, "sb-snap", "sb")
	s := waitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)
	ctx, is := nodeImages(t)
	refs := pinnedDigests(t, s)
	for _, ref := range refs {
		if _, err := is.Get(ctx, ref.String()); err != nil {
			t.Fatalf("the node does not keep %s for a resume: %v", ref, err)
		}
	}
	deleteSnapshot(t, ns, "sb-snap", 30*time.Second)
	eventually(t, "the node's copies of the snapshot's images to be removed", 2*time.Minute, func() (bool, error) {
		for _, ref := range refs {
			if _, err := is.Get(ctx, ref.String()); !errdefs.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	eventually(t, "the snapshot's TaskRuns to be deleted", 2*time.Minute, func() (bool, error) {
		return len(taskRunsOf(t, ns, "sb-snap")) == 0, nil
	})
}

// refusingRegistry serves, on the node's bridge address, the node's registry
// behind a proxy that refuses to delete manifests, as distribution does
// unless REGISTRY_STORAGE_DELETE_ENABLED is set. It returns its host:port.
func refusingRegistry(t *testing.T) string {
	t.Helper()
	host, _, err := net.SplitHostPort(localRegistry)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: localRegistry})
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			fmt.Fprint(w, `{"errors":[{"code":"UNSUPPORTED","message":"The operation is unsupported."}]}`)
			return
		}
		proxy.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// TestRegistryRefusesDeletion: under the Delete policy, a registry that
// refuses deletion ends it at once: the snapshot is gone within seconds,
// and ImagesLeftBehind names the registry's answer.
func TestRegistryRefusesDeletion(t *testing.T) {
	host := refusingRegistry(t)
	setConfig(t, map[string]string{"image-deletion-policy": "Delete", "registry": host + "/snapshots", "insecure-registry": "true"},
		`"registry":"`+host+`/snapshots"`)
	ns := newNamespace(t)
	createSandbox(t, ns, "sb")
	createSnapshot(t, ns, "sb-snap", "sb")
	s := waitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)
	start := time.Now()
	deleteSnapshot(t, ns, "sb-snap", 30*time.Second)
	ev := waitEvent(t, ns, "sb-snap", v1alpha1.ReasonImagesLeftBehind)
	t.Logf("gone and ImagesLeftBehind %v after the deletion", time.Since(start).Round(100*time.Millisecond))
	if !strings.Contains(ev.Message, "UNSUPPORTED") {
		t.Errorf("ImagesLeftBehind does not name the registry's answer: %s", ev.Message)
	}
	for _, ref := range pinnedDigests(t, s) {
		if !held(t, ref) {
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
	setConfig(t, map[string]string{"containerd-overlayfs-root": root}, `"overlayfsRoot":"`+root+`"`)
	ns := newNamespace(t)
	createSandbox(t, ns, "sb")
	marker := randomMarker(t, "app")
	writeFile(t, ns, "sb-0", "/marker.txt", marker, "app")
	createSnapshot(t, ns, "sb-snap", "sb")
	s := waitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)
	logs := commitStepLog(t, s)
	if !strings.Contains(logs, "upper directory not visible here") {
		t.Errorf("the commit step did not fall back to containerd's tar; its log:\n%s", logs)
	}
	resumePod(t, ns, "sb-resumed", s, 2*time.Minute)
	if got := readFile(t, ns, "sb-resumed", "app", "/marker.txt"); got != marker {
		t.Errorf("resumed with marker %q, want %q", got, marker)
	}
}
