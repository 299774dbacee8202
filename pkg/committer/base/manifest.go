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
	"fmt"
	"io"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/cri"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
)

// fetchBase looks the base up in its registry when containerd lost its record
// (kept image evicted, kubelet image GC): the rootfs outlives the record, its
// manifest and config do not. It tries the container's image name, then the CRI
// image-name annotation, and accepts only a manifest with the parent chain and
// the recorded config, storing both under the commit's lease. It also returns
// what it tried, for the error when nothing matched.
func (r *Resolver) fetchBase(ctx context.Context, l *freeze.Container, parent string, recorded digest.Digest) (*Image, []string) {
	refs := []string{l.Info.Image}
	if spec, err := l.Container.Spec(ctx); err == nil && spec.Annotations[cri.AnnotationImageName] != "" {
		refs = append(refs, spec.Annotations[cri.AnnotationImageName])
	}
	opts := []name.Option{name.StrictValidation}
	if r.insecure {
		opts = append(opts, name.Insecure)
	}
	var tried []string
	seen := map[string]bool{}
	for _, s := range refs {
		ref, err := name.ParseReference(s, opts...)
		if err != nil || seen[ref.Name()] {
			continue
		}
		seen[ref.Name()] = true
		b, err := r.fetchManifest(ctx, ref, parent, recorded)
		switch {
		case err != nil:
			tried = append(tried, fmt.Sprintf("registry: %v", err))
		case b == nil:
			tried = append(tried, fmt.Sprintf("registry: %s holds no manifest of that chain", ref))
		default:
			r.log.Printf("pod %s %s: no image record of its base in containerd; took manifest %s from %s", r.pod, l, b.Manifest.Digest, ref)
			return b, nil
		}
	}
	if len(tried) == 0 {
		tried = append(tried, fmt.Sprintf("%s names no registry image to look up", l.Info.Image))
	}
	return nil, tried
}

// fetchManifest returns, stored in the content store, the manifest of ref (of
// an index, default platform first) whose config has chain parent and, when
// set, digest recorded; nil when none has.
func (r *Resolver) fetchManifest(ctx context.Context, ref name.Reference, parent string, recorded digest.Digest) (*Image, error) {
	opts := r.remote
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("looking up %s: %w", ref, err)
	}
	cands := []v1.Descriptor{desc.Descriptor}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, fmt.Errorf("reading index %s: %w", ref, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, fmt.Errorf("reading index %s: %w", ref, err)
		}
		cands = cands[:0]
		def := platforms.Default()
		for _, m := range im.Manifests {
			if !m.MediaType.IsImage() {
				continue
			}
			if m.Platform != nil && def.Match(ocispec.Platform{OS: m.Platform.OS, Architecture: m.Platform.Architecture, Variant: m.Platform.Variant}) {
				cands = append([]v1.Descriptor{m}, cands...)
			} else {
				cands = append(cands, m)
			}
		}
	}
	cs := r.client.ContentStore()
	for _, d := range cands {
		mref := ref.Context().Digest(d.Digest.String())
		raw := desc.Manifest
		if d.Digest != desc.Digest {
			md, err := remote.Get(mref, opts...)
			if err != nil {
				return nil, fmt.Errorf("looking up %s: %w", mref, err)
			}
			raw = md.Manifest
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("decoding manifest %s: %w", mref, err)
		}
		if recorded != "" && m.Config.Digest != recorded {
			continue
		}
		layer, err := remote.Layer(ref.Context().Digest(m.Config.Digest.String()), opts...)
		if err != nil {
			return nil, fmt.Errorf("fetching config %s of %s: %w", m.Config.Digest, mref, err)
		}
		rc, err := layer.Compressed()
		if err != nil {
			return nil, fmt.Errorf("fetching config %s of %s: %w", m.Config.Digest, mref, err)
		}
		craw, err := io.ReadAll(io.LimitReader(rc, maxConfigSize))
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("fetching config %s of %s: %w", m.Config.Digest, mref, err)
		}
		if digest.FromBytes(craw) != m.Config.Digest {
			return nil, fmt.Errorf("config %s of %s does not match its digest", m.Config.Digest, mref)
		}
		var cfg ocispec.Image
		if err := json.Unmarshal(craw, &cfg); err != nil {
			return nil, fmt.Errorf("decoding config %s of %s: %w", m.Config.Digest, mref, err)
		}
		if identity.ChainID(cfg.RootFS.DiffIDs).String() != parent {
			continue
		}
		mdesc := ocispec.Descriptor{MediaType: string(d.MediaType), Digest: digest.Digest(d.Digest.String()), Size: int64(len(raw))}
		if digest.FromBytes(raw) != mdesc.Digest {
			return nil, fmt.Errorf("manifest %s does not match its digest", mref)
		}
		if err := oci.WriteBlob(ctx, cs, m.Config, craw, nil); err != nil {
			return nil, fmt.Errorf("storing config %s: %w", m.Config.Digest, err)
		}
		if err := oci.WriteBlob(ctx, cs, mdesc, raw, nil); err != nil {
			return nil, fmt.Errorf("storing manifest %s: %w", mdesc.Digest, err)
		}
		return &Image{Record: images.Image{Name: mref.Name(), Target: mdesc}, Manifest: mdesc}, nil
	}
	return nil, nil
}

// maxConfigSize bounds an image config read from a registry.
const maxConfigSize = 8 << 20

func chainOrNone(chain digest.Digest) string {
	if chain == "" {
		return "none"
	}
	return chain.String()
}

// manifestChain returns the chain ID of desc's rootfs diff IDs (empty without
// layers) and the manifest.
func manifestChain(ctx context.Context, cs content.Provider, desc ocispec.Descriptor) (digest.Digest, ocispec.Manifest, error) {
	var m ocispec.Manifest
	raw, err := content.ReadBlob(ctx, cs, desc)
	if err != nil {
		return "", m, err
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", m, fmt.Errorf("decoding manifest %s: %w", desc.Digest, err)
	}
	craw, err := content.ReadBlob(ctx, cs, m.Config)
	if err != nil {
		return "", m, err
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(craw, &cfg); err != nil {
		return "", m, fmt.Errorf("decoding config %s: %w", m.Config.Digest, err)
	}
	return identity.ChainID(cfg.RootFS.DiffIDs), m, nil
}

// platformCandidates lists target itself or an index's manifests, default
// platform first; nested indexes are not followed.
func platformCandidates(ctx context.Context, cs content.Provider, target ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	switch target.MediaType {
	case ocispec.MediaTypeImageManifest, images.MediaTypeDockerSchema2Manifest:
		return []ocispec.Descriptor{target}, nil
	case ocispec.MediaTypeImageIndex, images.MediaTypeDockerSchema2ManifestList:
		raw, err := content.ReadBlob(ctx, cs, target)
		if err != nil {
			return nil, err
		}
		var idx ocispec.Index
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, fmt.Errorf("decoding index %s: %w", target.Digest, err)
		}
		m := platforms.Default()
		var first, rest []ocispec.Descriptor
		for _, d := range idx.Manifests {
			if d.MediaType != ocispec.MediaTypeImageManifest && d.MediaType != images.MediaTypeDockerSchema2Manifest {
				continue
			}
			if d.Platform != nil && m.Match(*d.Platform) {
				first = append(first, d)
			} else {
				rest = append(rest, d)
			}
		}
		return append(first, rest...), nil
	default:
		return nil, nil
	}
}

// matchManifest returns target's manifest with chain ID parent (and config
// recorded, if given), or nil. It checks every local platform manifest, not
// only the first loose match; missing content is no match.
func matchManifest(ctx context.Context, cs content.Provider, target ocispec.Descriptor, parent string, recorded digest.Digest) (*ocispec.Descriptor, error) {
	cands, err := platformCandidates(ctx, cs, target)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading image %s: %w", target.Digest, err)
	}
	for _, d := range cands {
		chain, m, err := manifestChain(ctx, cs, d)
		if err != nil {
			if errdefs.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("reading manifest %s: %w", d.Digest, err)
		}
		if chain.String() == parent && (recorded == "" || m.Config.Digest == recorded) {
			return &d, nil
		}
	}
	return nil, nil
}

// firstManifestChain returns target's first readable platform manifest and its
// chain, for errors.
func firstManifestChain(ctx context.Context, cs content.Provider, target ocispec.Descriptor) (ocispec.Descriptor, digest.Digest, error) {
	cands, err := platformCandidates(ctx, cs, target)
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	for _, d := range cands {
		if chain, _, err := manifestChain(ctx, cs, d); err == nil {
			return d, chain, nil
		}
	}
	return ocispec.Descriptor{}, "", errdefs.ErrNotFound
}
