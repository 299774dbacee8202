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

package committer

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry/registrytest"
)

// refusingDeletes is a registry that answers every delete with a refusal.
type refusingDeletes struct{ *registrytest.Fake }

// Delete implements registry.Client.
func (refusingDeletes) Delete(context.Context, name.Reference) error {
	return errors.New("UNSUPPORTED: the operation is unsupported")
}

// TestUnpush deletes a pushed manifest, and its tag where the registry
// keeps it, from registries that do and do not delete.
func TestUnpush(t *testing.T) {
	tag, _ := name.NewTag("registry.test/snap/app:1")
	d := tag.Context().Digest("sha256:" + strings.Repeat("a", 64))
	other := "sha256:" + strings.Repeat("b", 64)
	for _, tc := range []struct {
		name     string
		held     map[string]string
		refuses  bool
		wantErr  bool
		wantLeft []string
	}{
		{"tag kept with the manifest gone", map[string]string{tag.String(): d.DigestStr(), d.String(): d.DigestStr()}, false, false, nil},
		{"tag moved to another manifest", map[string]string{tag.String(): other, d.String(): d.DigestStr()}, false, false, []string{tag.String()}},
		{"deletes refused", map[string]string{tag.String(): d.DigestStr(), d.String(): d.DigestStr()}, true, true, []string{tag.String(), d.String()}},
		{"deletes refused, manifest never taken", map[string]string{}, true, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &registrytest.Fake{Held: tc.held}
			var reg registry.Client = fake
			if tc.refuses {
				reg = refusingDeletes{fake}
			}
			err := unpush(context.Background(), reg, tag, d)
			if (err != nil) != tc.wantErr {
				t.Errorf("unpush() = %v, want an error: %v", err, tc.wantErr)
			}
			if left := slices.Sorted(maps.Keys(fake.Held)); !slices.Equal(left, tc.wantLeft) {
				t.Errorf("the registry holds %q after unpush, want %q", left, tc.wantLeft)
			}
		})
	}
}
