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

package base

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
)

// putJSON stores v as a blob and returns its descriptor.
func putJSON(t *testing.T, cs content.Store, mediaType string, v any) ocispec.Descriptor {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	d := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}
	if err := oci.WriteBlob(context.Background(), cs, d, b, nil); err != nil {
		t.Fatal(err)
	}
	return d
}

// putImage stores a config with the given diff IDs and a manifest for it.
func putImage(t *testing.T, cs content.Store, diffIDs ...digest.Digest) (manifest, config ocispec.Descriptor) {
	t.Helper()
	config = putJSON(t, cs, ocispec.MediaTypeImageConfig, ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: "amd64"},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: diffIDs},
	})
	var layers []ocispec.Descriptor
	for _, d := range diffIDs {
		layers = append(layers, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: d, Size: 1})
	}
	manifest = putJSON(t, cs, ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, Config: config, Layers: layers,
	})
	return manifest, config
}

// TestMatchManifestIndex builds an index with two linux/amd64 manifests (as a
// variant list would have) and checks that the one whose layers are the
// container's parent chain is chosen, not the first that fits the platform.
func TestMatchManifestIndex(t *testing.T) {
	ctx := context.Background()
	cs, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l1, l2, l3 := digest.FromString("layer-1"), digest.FromString("layer-2"), digest.FromString("layer-3")
	mA, cA := putImage(t, cs, l1, l2)
	mB, cB := putImage(t, cs, l1, l3)
	amd64 := &ocispec.Platform{OS: "linux", Architecture: "amd64"}
	mA.Platform, mB.Platform = amd64, amd64
	idx := putJSON(t, cs, ocispec.MediaTypeImageIndex, ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{mA, mB},
	})
	chainB := identity.ChainID([]digest.Digest{l1, l3}).String()

	for _, tc := range []struct {
		name     string
		parent   string
		recorded digest.Digest
		want     digest.Digest
	}{
		{"second manifest's chain", chainB, "", mB.Digest},
		{"first manifest's chain", identity.ChainID([]digest.Digest{l1, l2}).String(), "", mA.Digest},
		{"chain and recorded config", chainB, cB.Digest, mB.Digest},
		{"chain but another recorded config", chainB, cA.Digest, ""},
		{"no manifest has the chain", identity.ChainID([]digest.Digest{l2}).String(), "", ""},
		{"a prefix of the chain is not the chain", l1.String(), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := matchManifest(ctx, cs, idx, tc.parent, tc.recorded)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("matched %s, want no match", got.Digest)
			case tc.want != "" && (got == nil || got.Digest != tc.want):
				t.Errorf("matched %v, want %s", got, tc.want)
			}
		})
	}

	// A plain manifest target, and one whose config is gone (no match, no error).
	if got, err := matchManifest(ctx, cs, mA, identity.ChainID([]digest.Digest{l1, l2}).String(), ""); err != nil || got == nil || got.Digest != mA.Digest {
		t.Errorf("plain manifest: %v %v", got, err)
	}
	if err := cs.Delete(ctx, cA.Digest); err != nil {
		t.Fatal(err)
	}
	if got, err := matchManifest(ctx, cs, mA, identity.ChainID([]digest.Digest{l1, l2}).String(), ""); err != nil || got != nil {
		t.Errorf("manifest without its config: %v %v", got, err)
	}
}
