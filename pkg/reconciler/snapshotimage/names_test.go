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

package snapshotimage

import (
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

func TestTag(t *testing.T) {
	sb := &v1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Name: "sb", UID: "5e6f0a1b-2c3d-4e5f-8a9b-0c1d2e3f4a5b", Generation: 4}}
	owned := metav1.NewControllerRef(sb, v1alpha1.SchemeGroupVersion.WithKind("BatchSandbox"))
	other := metav1.NewControllerRef(&v1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: "x-uid"}},
		v1alpha1.SchemeGroupVersion.WithKind("BatchSandbox"))
	const snapUID = "9a8b7c6d-0000-4000-8000-000000000000"

	tests := []struct {
		name   string
		snap   string
		owners []metav1.OwnerReference
		want   string
	}{{
		name:   "owned by its BatchSandbox: the sandbox's generation and UID",
		snap:   "sb-pause",
		owners: []metav1.OwnerReference{*owned},
		want:   "snap-gen4-5e6f0a1b",
	}, {
		name: "OpenSandbox server's name: its id",
		snap: "osb-snap-0123456789abcdef0123456789abcdef",
		want: "snap-0123456789abcdef0123456789abcdef",
	}, {
		name: "upper-case id is not OpenSandbox's form: hashed, with the snapshot's UID",
		snap: "osb-snap-0123456789ABCDEF0123456789abcdef",
		// sha256("osb-snap-0123456789ABCDEF0123456789abcdef")[:32]
		want: "snap-5f59b7a41a14fb075b1e260bed433c9a-9a8b7c6d",
	}, {
		name: "any other name: the first 32 hex characters of its sha256, with the snapshot's UID",
		snap: "snap",
		want: "snap-1c27324f013705cbf0c49f3d3bb103c7-9a8b7c6d",
	}, {
		name:   "controlled by another object: hashed, with the snapshot's UID",
		snap:   "snap",
		owners: []metav1.OwnerReference{*other},
		want:   "snap-1c27324f013705cbf0c49f3d3bb103c7-9a8b7c6d",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: tc.snap, UID: snapUID, OwnerReferences: tc.owners}}
			if got := Tag(s, sb); got != tc.want {
				t.Errorf("Tag() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTagOfRecreatedObjects checks that a BatchSandbox or a snapshot
// deleted and created again under its name never reuses a tag.
func TestTagOfRecreatedObjects(t *testing.T) {
	tag := func(snapUID, sbUID types.UID, owned bool) string {
		sb := &v1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Name: "sb", UID: sbUID, Generation: 1}}
		s := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "sb-pause", UID: snapUID}}
		if owned {
			s.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(sb, v1alpha1.SchemeGroupVersion.WithKind("BatchSandbox"))}
		}
		return Tag(s, sb)
	}
	if a, b := tag("s1", "11111111-aaaa", true), tag("s2", "22222222-aaaa", true); a == b {
		t.Errorf("two BatchSandboxes named sb, both at generation 1, share tag %q", a)
	}
	if a, b := tag("11111111-aaaa", "sb", false), tag("22222222-aaaa", "sb", false); a == b {
		t.Errorf("two snapshots named sb-pause share tag %q", a)
	}
}

func TestURI(t *testing.T) {
	got, err := URI("registry.test:5000/snapshots", "ns1", "sb", "app", "snap-gen1")
	if err != nil || got != "registry.test:5000/snapshots/ns1/sb/app:snap-gen1" {
		t.Errorf("URI() = %q, %v", got, err)
	}
	for _, tc := range []struct{ registry, sandbox, want string }{
		{"registry.test/Upper", "sb", "not a valid OCI reference"},
		{"registry.test", strings.Repeat("a", 240), "more than the 255 registries accept"},
	} {
		if _, err := URI(tc.registry, "ns1", tc.sandbox, "app", "snap-gen1"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("URI(%q, %q...) = %v, want an error containing %q", tc.registry, tc.sandbox[:2], err, tc.want)
		}
	}
}

// TestRepositoryIsUnambiguous checks that no two (namespace, sandbox,
// container) share a repository, where joining the names with '-' would:
// sandbox a with container b-c against sandbox a-b with container c, and
// one sandbox name in two namespaces.
func TestRepositoryIsUnambiguous(t *testing.T) {
	for _, pair := range [][2][3]string{
		{{"ns", "a", "b-c"}, {"ns", "a-b", "c"}},
		{{"ns1", "sb", "main"}, {"ns2", "sb", "main"}},
		{{"a", "b", "c"}, {"a-b", "c", "c"}},
	} {
		x := Repository("registry.test/snapshots", pair[0][0], pair[0][1], pair[0][2])
		y := Repository("registry.test/snapshots", pair[1][0], pair[1][1], pair[1][2])
		if x == y {
			t.Errorf("%v and %v share repository %s", pair[0], pair[1], x)
		}
	}
}

// FuzzURI checks that any valid Kubernetes sandbox, container and
// snapshot names give either a valid OCI reference or a clear error.
func FuzzURI(f *testing.F) {
	f.Add("sb", "app", "snap")
	f.Add("my.sandbox", "side-car", "osb-snap-0123456789abcdef0123456789abcdef")
	f.Add(strings.Repeat("s", 253), strings.Repeat("c", 63), strings.Repeat("n", 253))
	f.Fuzz(func(t *testing.T, sandbox, container, snapshot string) {
		if len(validation.IsDNS1123Subdomain(sandbox)) > 0 || len(validation.IsDNS1123Label(container)) > 0 ||
			len(validation.IsDNS1123Subdomain(snapshot)) > 0 {
			t.Skip("not valid Kubernetes names")
		}
		s := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: snapshot, UID: "0f1e2d3c-4b5a-4968-8776-655443322110"}}
		tag := Tag(s, &v1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Name: sandbox}})
		uri, err := URI("registry.test:5000/snapshots", "some-namespace", sandbox, container, tag)
		if err != nil {
			if !strings.Contains(err.Error(), container) {
				t.Fatalf("error %q does not name container %q", err, container)
			}
			return
		}
		ref, err := name.ParseReference(uri, name.StrictValidation)
		if err != nil {
			t.Fatalf("URI() = %q, which does not parse: %v", uri, err)
		}
		if ref.Identifier() != tag || len(tag) > 128 {
			t.Fatalf("tag %q of %q is not the tag built or longer than 128", ref.Identifier(), uri)
		}
		if strings.ToLower(uri) != uri {
			t.Fatalf("URI() = %q is not lower case", uri)
		}
	})
}
