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

package resources

import (
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
)

func TestImageTag(t *testing.T) {
	sb := &v1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Name: "sb", UID: types.UID("sb-uid"), Generation: 4}}
	owned := metav1.NewControllerRef(sb, v1alpha1.SchemeGroupVersion.WithKind("BatchSandbox"))
	other := metav1.NewControllerRef(&v1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: "x-uid"}},
		v1alpha1.SchemeGroupVersion.WithKind("BatchSandbox"))

	tests := []struct {
		name   string
		snap   string
		owners []metav1.OwnerReference
		want   string
	}{{
		name:   "owned by its BatchSandbox: the sandbox's generation",
		snap:   "sb-pause",
		owners: []metav1.OwnerReference{*owned},
		want:   "snap-gen4",
	}, {
		name: "OpenSandbox server's name: its id",
		snap: "osb-snap-0123456789abcdef0123456789abcdef",
		want: "snap-0123456789abcdef0123456789abcdef",
	}, {
		name: "upper-case id is not OpenSandbox's form: hashed",
		snap: "osb-snap-0123456789ABCDEF0123456789abcdef",
		// sha256("osb-snap-0123456789ABCDEF0123456789abcdef")[:32]
		want: "snap-5f59b7a41a14fb075b1e260bed433c9a",
	}, {
		name: "any other name: the first 32 hex characters of its sha256",
		snap: "snap",
		want: "snap-1c27324f013705cbf0c49f3d3bb103c7",
	}, {
		name:   "controlled by another object: hashed",
		snap:   "snap",
		owners: []metav1.OwnerReference{*other},
		want:   "snap-1c27324f013705cbf0c49f3d3bb103c7",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: tc.snap, OwnerReferences: tc.owners}}
			if got := ImageTag(s, sb); got != tc.want {
				t.Errorf("ImageTag() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestImageURI(t *testing.T) {
	got, err := ImageURI("registry.test:5000/snapshots", "sb", "app", "snap-gen1")
	if err != nil || got != "registry.test:5000/snapshots/sb-app:snap-gen1" {
		t.Errorf("ImageURI() = %q, %v", got, err)
	}
	for _, tc := range []struct{ registry, sandbox, want string }{
		{"registry.test/Upper", "sb", "not a valid OCI reference"},
		{"registry.test", strings.Repeat("a", 250), "more than the 255 registries accept"},
	} {
		if _, err := ImageURI(tc.registry, tc.sandbox, "app", "snap-gen1"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ImageURI(%q, %q...) = %v, want an error containing %q", tc.registry, tc.sandbox[:2], err, tc.want)
		}
	}
}

// FuzzImageURI checks that any valid Kubernetes sandbox, container and
// snapshot names give either a valid OCI reference or a clear error.
func FuzzImageURI(f *testing.F) {
	f.Add("sb", "app", "snap")
	f.Add("my.sandbox", "side-car", "osb-snap-0123456789abcdef0123456789abcdef")
	f.Add(strings.Repeat("s", 253), strings.Repeat("c", 63), strings.Repeat("n", 253))
	f.Fuzz(func(t *testing.T, sandbox, container, snapshot string) {
		if len(validation.IsDNS1123Subdomain(sandbox)) > 0 || len(validation.IsDNS1123Label(container)) > 0 ||
			len(validation.IsDNS1123Subdomain(snapshot)) > 0 {
			t.Skip("not valid Kubernetes names")
		}
		s := &v1alpha1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: snapshot}}
		tag := ImageTag(s, &v1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Name: sandbox}})
		uri, err := ImageURI("registry.test:5000/snapshots", sandbox, container, tag)
		if err != nil {
			if !strings.Contains(err.Error(), container) {
				t.Fatalf("error %q does not name container %q", err, container)
			}
			return
		}
		ref, err := name.ParseReference(uri, name.StrictValidation)
		if err != nil {
			t.Fatalf("ImageURI() = %q, which does not parse: %v", uri, err)
		}
		if ref.Identifier() != tag || len(tag) > 128 {
			t.Fatalf("tag %q of %q is not the tag built or longer than 128", ref.Identifier(), uri)
		}
		if strings.ToLower(uri) != uri {
			t.Fatalf("ImageURI() = %q is not lower case", uri)
		}
	})
}
