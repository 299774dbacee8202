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
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	pipelinev1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// The release tests run after test/e2e-release.sh replaced the ko-applied
// operator with a release (make release) installed by kubectl apply:
//
//	E2E_NODE_TASK_BUNDLE  the release's commit Task bundle, by digest; the
//	                      operator's config-snapshot names it
//	E2E_NODE_RELEASE_DIR  the release's files (release.yaml, sandbox-commit.yaml)
var (
	taskBundle = os.Getenv("E2E_NODE_TASK_BUNDLE")
	releaseDir = os.Getenv("E2E_NODE_RELEASE_DIR")
)

// releasePlatforms are the platforms every released image must hold.
var releasePlatforms = []string{"linux/amd64", "linux/arm64"}

// assertTaskSource checks where a commit TaskRun took its Task from: with a
// release installed, from the release's bundle through Tekton's bundles
// resolver, and Tekton recorded that bundle's digest as the Task's source;
// otherwise the namespaced Task sandbox-commit that deploy.sh applied.
func assertTaskSource(t *testing.T, tr *pipelinev1.TaskRun) {
	t.Helper()
	ref := tr.Spec.TaskRef
	if taskBundle == "" {
		if ref == nil || ref.Resolver != "" || ref.Name != task.Name || ref.Kind != pipelinev1.NamespacedTaskKind {
			t.Errorf("TaskRun %s references %+v, want the namespaced Task %s", tr.Name, ref, task.Name)
		}
		return
	}
	pinned, err := name.NewDigest(taskBundle, name.StrictValidation)
	if err != nil {
		t.Fatalf("E2E_NODE_TASK_BUNDLE=%s: %v", taskBundle, err)
	}
	if ref == nil || ref.Resolver != "bundles" || ref.Name != "" {
		t.Fatalf("TaskRun %s references %+v, want the bundles resolver", tr.Name, ref)
	}
	params := map[string]string{}
	for _, p := range ref.Params {
		params[p.Name] = p.Value.StringVal
	}
	if want := map[string]string{"bundle": taskBundle, "name": task.Name, "kind": "task"}; !maps.Equal(params, want) {
		t.Errorf("TaskRun %s: bundles resolver params %v, want %v", tr.Name, params, want)
	}
	// What Tekton really resolved: the bundle's repository and digest.
	prov := tr.Status.Provenance
	if prov == nil || prov.RefSource == nil {
		t.Fatalf("TaskRun %s has no status.provenance.refSource: the Task was not resolved remotely", tr.Name)
	}
	wantDigest := pinned.DigestStr()
	if got := "sha256:" + prov.RefSource.Digest["sha256"]; prov.RefSource.URI != pinned.Context().Name() || got != wantDigest ||
		prov.RefSource.EntryPoint != task.Name {
		t.Errorf("TaskRun %s: provenance.refSource = %+v, want %s@%s entry point %s",
			tr.Name, prov.RefSource, pinned.Context().Name(), wantDigest, task.Name)
	}
	t.Logf("TaskRun %s: Task %s resolved by the bundles resolver from %s@sha256:%s",
		tr.Name, prov.RefSource.EntryPoint, prov.RefSource.URI, prov.RefSource.Digest["sha256"])
	// The release installs no namespaced Task: the bundle is the only source.
	tasks, err := nodeframework.Clients().Pipeline.TektonV1().Tasks(test.SystemNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks.Items {
		t.Errorf("namespace %s holds Task %s; a release installs none", test.SystemNamespace, tk.Name)
	}
}

// imageByDigest matches the image references by digest in a manifest.
var imageByDigest = regexp.MustCompile(`[A-Za-z0-9.:/_-]+@sha256:[0-9a-f]{64}`)

// TestReleaseImagesArePlatformIndexes checks that every image the release's
// manifests name (the controller's in release.yaml, the committer's in the
// Task) is an index with an image for each released platform, and that the
// bundle holds the Task.
func TestReleaseImagesArePlatformIndexes(t *testing.T) {
	if releaseDir == "" || taskBundle == "" {
		t.Skip("no release installed (E2E_NODE_RELEASE_DIR, E2E_NODE_TASK_BUNDLE; test/e2e-release.sh sets them)")
	}
	images := map[string]bool{}
	for _, f := range []string{"release.yaml", "sandbox-commit.yaml"} {
		b, err := os.ReadFile(filepath.Join(releaseDir, f))
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, ref := range imageByDigest.FindAllString(string(b), -1) {
			if ref != taskBundle {
				images[ref] = true
				found++
			}
		}
		if found == 0 {
			t.Errorf("%s names no image by digest", f)
		}
	}
	for ref := range images {
		d, err := name.NewDigest(ref)
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		idx, err := remote.Index(d, remote.WithContext(t.Context()))
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		m, err := idx.IndexManifest()
		if err != nil {
			t.Errorf("%s is not an image index: %v", ref, err)
			continue
		}
		held := map[string]bool{}
		for _, desc := range m.Manifests {
			if desc.Platform != nil {
				held[desc.Platform.OS+"/"+desc.Platform.Architecture] = true
			}
		}
		for _, p := range releasePlatforms {
			if !held[p] {
				t.Errorf("%s holds %v, no %s", ref, held, p)
			}
		}
		t.Logf("%s: %d platforms", ref, len(held))
	}

	// The bundle is one image whose layer is the Task, as the resolver wants it.
	d, err := name.NewDigest(taskBundle)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(d, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("bundle %s: %v", taskBundle, err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 1 || m.Layers[0].Annotations["dev.tekton.image.kind"] != "task" ||
		m.Layers[0].Annotations["dev.tekton.image.name"] != task.Name {
		t.Errorf("bundle %s layers %+v, want one: the Task %s", taskBundle, m.Layers, task.Name)
	}
}
