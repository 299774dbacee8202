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

package imageref

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

const (
	repo   = "registry.test/snapshots/team-a/sb/app"
	tag    = "snap-gen3-5e6f0a1b"
	digest = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	other  = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func TestParse(t *testing.T) {
	img, err := Parse(repo + ":" + tag + "@" + digest)
	if err != nil || img.Tag != tag || img.String() != repo+"@"+digest || img.Repository() != repo {
		t.Errorf("Parse(pinned) = %+v, %v", img, err)
	}
	if img, err := Parse("registry.test:5000/x@" + digest); err != nil || img.Tag != "" || img.Repository() != "registry.test:5000/x" {
		t.Errorf("Parse(repository@digest) = %+v, %v: want no tag, the port not taken for one", img, err)
	}
	if _, err := Parse(repo + ":" + tag); err == nil {
		t.Error("Parse(a tag alone) succeeded; an image to delete needs its digest")
	}
}

func pod(name string, phase corev1.PodPhase, spec, imageID string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: spec}}},
		Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", Image: spec, ImageID: imageID}}},
	}
}

func snapshot(name, sandbox string, phase v1alpha1.SandboxSnapshotPhase, containers ...v1alpha1.ContainerSnapshot) *v1alpha1.SandboxSnapshot {
	return &v1alpha1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(name + "-uid")},
		Spec:       v1alpha1.SandboxSnapshotSpec{SandboxName: sandbox},
		Status:     v1alpha1.SandboxSnapshotStatus{Phase: phase, Containers: containers},
	}
}

func indexer(t *testing.T, index cache.IndexFunc, objs ...any) cache.Indexer {
	t.Helper()
	i := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{RepositoryIndex: index, cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := i.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return i
}

// TestReferrers lays out what may refer to one snapshot image, and what
// only looks alike.
func TestReferrers(t *testing.T) {
	pinned := repo + ":" + tag + "@" + digest
	img, err := Parse(pinned)
	if err != nil {
		t.Fatal(err)
	}
	recorded := v1alpha1.ContainerSnapshot{ContainerName: "app", ImageURI: pinned, ImageDigest: digest}
	f := &Finder{
		Pods: indexer(t, PodRepositories,
			pod("by-digest", corev1.PodRunning, pinned, ""),
			pod("by-image-id", corev1.PodRunning, "registry.test/other:1", "docker-pullable://"+repo+"@"+digest),
			pod("by-tag", corev1.PodPending, repo+":"+tag, ""),
			pod("ended", corev1.PodSucceeded, pinned, repo+"@"+digest),
			pod("other-digest", corev1.PodRunning, repo+"@"+other, repo+"@"+other),
			pod("other-tag", corev1.PodRunning, repo+":snap-gen4-5e6f0a1b", ""),
			pod("sandbox-sb-x", corev1.PodRunning, "registry.test/snapshots/team-a/sb-x/app@"+digest, ""),
		),
		Sandboxes: indexer(t, BatchSandboxRepositories,
			&v1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "sb"},
				Spec: v1alpha1.BatchSandboxSpec{Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: pinned}}}}}},
			&v1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "sb"},
				Spec: v1alpha1.BatchSandboxSpec{Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.test/snapshots/team-b/sb/app@" + digest}}}}}},
			&v1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "no-template"}},
		),
		Snapshots: indexer(t, SnapshotRepositories,
			snapshot("records-it", "sb", v1alpha1.PhaseSucceed, recorded),
			snapshot("lets-it-go", "sb", v1alpha1.PhaseSucceed, recorded),
			snapshot("records-another", "sb", v1alpha1.PhaseSucceed, v1alpha1.ContainerSnapshot{ContainerName: "app", ImageURI: repo + ":x@" + other, ImageDigest: other}),
			snapshot("pending", "sb", v1alpha1.PhasePending),
			snapshot("committing", "sb", v1alpha1.PhaseCommitting, v1alpha1.ContainerSnapshot{ContainerName: "app", ImageURI: repo + ":next"}),
			snapshot("pending-of-sb-x", "sb-x", v1alpha1.PhasePending),
			snapshot("failed", "sb", v1alpha1.PhaseFailed),
		),
	}
	keep := func(s *v1alpha1.SandboxSnapshot) bool { return s.Name != "lets-it-go" }
	got, err := f.Referrers(img, types.NamespacedName{Namespace: "team-a", Name: "sb"}, keep)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"BatchSandbox team-a/sb",
		`SandboxSnapshot team-a/committing (phase "Committing"), whose commit may push to ` + repo,
		`SandboxSnapshot team-a/pending (phase "Pending"), whose commit may push to ` + repo,
		"SandboxSnapshot team-a/records-it",
		"pod team-a/by-digest",
		"pod team-a/by-image-id",
		"pod team-a/by-tag",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Referrers() =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestPodTransform checks that a stripped pod still says what it runs from.
func TestPodTransform(t *testing.T) {
	full := pod("p", corev1.PodRunning, repo+"@"+digest, repo+"@"+digest)
	full.Spec.NodeName = "node-1"
	full.Labels = map[string]string{"a": "b"}
	full.UID = "uid-1"
	full.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	full.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "SECRET", Value: "x"}}
	full.Spec.Volumes = []corev1.Volume{{Name: "v"}}
	got, err := PodTransform(full)
	if err != nil {
		t.Fatal(err)
	}
	p := got.(*corev1.Pod)
	if p.Name != full.Name || p.UID != full.UID || p.DeletionTimestamp == nil || p.Spec.Containers[0].Name != full.Spec.Containers[0].Name ||
		p.Spec.NodeName != "node-1" || p.Labels["a"] != "b" || p.Status.Phase != corev1.PodRunning ||
		p.Spec.Containers[0].Image != full.Spec.Containers[0].Image || p.Status.ContainerStatuses[0].ImageID != full.Status.ContainerStatuses[0].ImageID {
		t.Errorf("stripped pod lost what the look-ups read: %+v", p)
	}
	if len(p.Spec.Containers[0].Env) != 0 || len(p.Spec.Volumes) != 0 {
		t.Errorf("stripped pod keeps env or volumes: %+v", p.Spec)
	}
	repos, _ := PodRepositories(p)
	if !slices.Equal(repos, []string{repo}) {
		t.Errorf("PodRepositories(stripped) = %v", repos)
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "k"}
	if out, _ := PodTransform(tombstone); out != any(tombstone) {
		t.Error("PodTransform changed a tombstone")
	}
}
