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

// Package imageref finds what in a cluster refers to a snapshot image:
// pods, by their containers' images and the image IDs the kubelet reports;
// BatchSandbox templates; and SandboxSnapshots that record the image or may
// still push to its repository. Informers index these objects by the
// repositories they name (RepositoryIndex), so that a look-up reads only the
// objects that name the image's repository.
package imageref

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

// RepositoryIndex is the name of the informer index of the repositories an
// object names.
const RepositoryIndex = "imageref.repository"

// Image is a snapshot image: its manifest, and the tag it was pushed under.
type Image struct {
	Digest name.Digest
	Tag    string
}

// Parse parses an image as a snapshot records it, <repository>:<tag>@<digest>.
func Parse(pinned string, opts ...name.Option) (Image, error) {
	d, err := name.NewDigest(pinned, opts...)
	if err != nil {
		return Image{}, err
	}
	img := Image{Digest: d.Context().Digest(d.DigestStr())}
	if base, _, ok := strings.Cut(pinned, "@"); ok {
		if t, err := name.NewTag(base, opts...); err == nil && strings.Contains(base[strings.LastIndex(base, "/")+1:], ":") {
			img.Tag = t.TagStr()
		}
	}
	return img, nil
}

// String returns the image as <repository>@<digest>.
func (i Image) String() string { return i.Digest.Name() }

// Repository returns the image's repository, normalized.
func (i Image) Repository() string { return i.Digest.Context().Name() }

// matches reports whether the image reference s (a pod's image, an image
// ID, a template's image) names img: by its digest, or by its tag.
func (i Image) matches(s string) bool {
	s = strings.TrimPrefix(s, "docker-pullable://")
	if !strings.Contains(s, i.Digest.Context().RepositoryStr()) {
		return false
	}
	ref, err := name.ParseReference(s)
	if err != nil || ref.Context().Name() != i.Repository() {
		return false
	}
	switch r := ref.(type) {
	case name.Digest:
		return r.DigestStr() == i.Digest.DigestStr()
	case name.Tag:
		return i.Tag != "" && r.TagStr() == i.Tag
	}
	return false
}

// repositories returns the normalized repositories of image references.
func repositories(refs ...string) []string {
	var out []string
	for _, s := range refs {
		ref, err := name.ParseReference(strings.TrimPrefix(s, "docker-pullable://"))
		if err != nil {
			continue
		}
		if r := ref.Context().Name(); !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// podImages lists the image references of a pod that may still run: its
// containers' images and the image IDs the kubelet reports. A pod that has
// ended runs nothing again.
func podImages(pod *corev1.Pod) []string {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	var out []string
	for _, c := range pod.Spec.InitContainers {
		out = append(out, c.Image)
	}
	for _, c := range pod.Spec.Containers {
		out = append(out, c.Image)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		out = append(out, c.Image)
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, st := range statuses {
			out = append(out, st.Image, st.ImageID)
		}
	}
	return out
}

// templateImages lists the images of a BatchSandbox's template: the pods
// OpenSandbox creates for it, now or again after a drain or an eviction.
func templateImages(sb *v1alpha1.BatchSandbox) []string {
	if sb.Spec.Template == nil {
		return nil
	}
	var out []string
	for _, c := range sb.Spec.Template.Spec.InitContainers {
		out = append(out, c.Image)
	}
	for _, c := range sb.Spec.Template.Spec.Containers {
		out = append(out, c.Image)
	}
	return out
}

// snapshotImages lists the images a snapshot records or is about to push.
func snapshotImages(s *v1alpha1.SandboxSnapshot) []string {
	out := make([]string, 0, len(s.Status.Containers))
	for _, c := range s.Status.Containers {
		out = append(out, c.ImageURI)
	}
	return out
}

// PodRepositories is the RepositoryIndex function of pods.
func PodRepositories(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("not a pod: %T", obj)
	}
	return repositories(podImages(pod)...), nil
}

// BatchSandboxRepositories is the RepositoryIndex function of BatchSandboxes.
func BatchSandboxRepositories(obj any) ([]string, error) {
	sb, ok := obj.(*v1alpha1.BatchSandbox)
	if !ok {
		return nil, fmt.Errorf("not a BatchSandbox: %T", obj)
	}
	return repositories(templateImages(sb)...), nil
}

// SnapshotRepositories is the RepositoryIndex function of SandboxSnapshots.
func SnapshotRepositories(obj any) ([]string, error) {
	s, ok := obj.(*v1alpha1.SandboxSnapshot)
	if !ok {
		return nil, fmt.Errorf("not a SandboxSnapshot: %T", obj)
	}
	return repositories(snapshotImages(s)...), nil
}

// PodTransform keeps of a pod what the index, the look-ups and the snapshot
// reconciler's pod search read, so that a cluster's worth of pods costs the
// informer little memory: identity, labels, deletion, node, phase, and each
// container's name, image and image ID.
func PodTransform(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			Labels: pod.Labels, DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	strip := func(cs []corev1.Container) []corev1.Container {
		var out []corev1.Container
		for _, c := range cs {
			out = append(out, corev1.Container{Name: c.Name, Image: c.Image})
		}
		return out
	}
	out.Spec.InitContainers = strip(pod.Spec.InitContainers)
	out.Spec.Containers = strip(pod.Spec.Containers)
	for _, c := range pod.Spec.EphemeralContainers {
		out.Spec.EphemeralContainers = append(out.Spec.EphemeralContainers,
			corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: c.Name, Image: c.Image}})
	}
	statuses := func(ss []corev1.ContainerStatus) []corev1.ContainerStatus {
		var out []corev1.ContainerStatus
		for _, s := range ss {
			out = append(out, corev1.ContainerStatus{Name: s.Name, Image: s.Image, ImageID: s.ImageID})
		}
		return out
	}
	out.Status.InitContainerStatuses = statuses(pod.Status.InitContainerStatuses)
	out.Status.ContainerStatuses = statuses(pod.Status.ContainerStatuses)
	out.Status.EphemeralContainerStatuses = statuses(pod.Status.EphemeralContainerStatuses)
	return out, nil
}

// Finder looks references up in informers' indexers, each holding the
// RepositoryIndex; Snapshots also holds cache.NamespaceIndex.
type Finder struct {
	Pods      cache.Indexer
	Sandboxes cache.Indexer
	Snapshots cache.Indexer
}

// Referrers names, sorted, the objects that refer to img, an image of
// sandbox: running pods and BatchSandbox templates that name it by digest
// or by its tag (the tag may still point to it); SandboxSnapshots that
// record it, but for those keep says may let it go; and SandboxSnapshots of
// the sandbox that have not ended, whose commit may push to its repository.
func (f *Finder) Referrers(img Image, sandbox types.NamespacedName, keep func(*v1alpha1.SandboxSnapshot) bool) ([]string, error) {
	var out []string
	pods, err := f.Pods.ByIndex(RepositoryIndex, img.Repository())
	if err != nil {
		return nil, err
	}
	for _, o := range pods {
		if pod, ok := o.(*corev1.Pod); ok && slices.ContainsFunc(podImages(pod), img.matches) {
			out = append(out, "pod "+pod.Namespace+"/"+pod.Name)
		}
	}
	sandboxes, err := f.Sandboxes.ByIndex(RepositoryIndex, img.Repository())
	if err != nil {
		return nil, err
	}
	for _, o := range sandboxes {
		if sb, ok := o.(*v1alpha1.BatchSandbox); ok && slices.ContainsFunc(templateImages(sb), img.matches) {
			out = append(out, "BatchSandbox "+sb.Namespace+"/"+sb.Name)
		}
	}
	snapshots, err := f.Snapshots.ByIndex(RepositoryIndex, img.Repository())
	if err != nil {
		return nil, err
	}
	// A snapshot names its repositories once its commit starts; before
	// that, only its sandbox says where it will push.
	pending, err := f.Snapshots.ByIndex(cache.NamespaceIndex, sandbox.Namespace)
	if err != nil {
		return nil, err
	}
	for _, o := range append(snapshots, pending...) {
		s, ok := o.(*v1alpha1.SandboxSnapshot)
		switch {
		case !ok:
		case !s.Status.IsTerminal():
			if s.Namespace == sandbox.Namespace && s.Spec.SandboxName == sandbox.Name || slices.Contains(repositories(snapshotImages(s)...), img.Repository()) {
				out = append(out, fmt.Sprintf("SandboxSnapshot %s/%s (phase %q), whose commit may push to %s", s.Namespace, s.Name, s.Status.Phase, img.Repository()))
			}
		case keep(s) && records(s, img):
			out = append(out, "SandboxSnapshot "+s.Namespace+"/"+s.Name)
		}
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// records reports whether s recorded img as one of its images.
func records(s *v1alpha1.SandboxSnapshot, img Image) bool {
	for _, c := range s.Status.Containers {
		ref, err := name.ParseReference(c.ImageURI)
		if err == nil && c.ImageDigest == img.Digest.DigestStr() && ref.Context().Name() == img.Repository() {
			return true
		}
	}
	return false
}
