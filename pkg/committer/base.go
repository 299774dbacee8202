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
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ExtensionCRIMetadata is the container extension in which containerd's CRI
// plugin records the container's metadata, including the image ID (the
// config digest) it was created from.
const ExtensionCRIMetadata = "io.cri-containerd.container.metadata"

// criImageID returns the image ID the CRI plugin recorded for a container,
// or "" for a container not created by the CRI plugin.
func criImageID(info containers.Container) digest.Digest {
	ext, ok := info.Extensions[ExtensionCRIMetadata]
	if !ok || ext == nil {
		return ""
	}
	var m struct {
		Metadata struct {
			ImageRef string
		}
	}
	if err := json.Unmarshal(ext.GetValue(), &m); err != nil {
		return ""
	}
	d, err := digest.Parse(m.Metadata.ImageRef)
	if err != nil {
		return ""
	}
	return d
}

// baseImage is the image a container's root filesystem was unpacked from.
type baseImage struct {
	// img is an image record whose target holds the manifest.
	img images.Image
	// manifest is the platform manifest whose layers are the parent chain.
	manifest ocispec.Descriptor
}

// resolveBase finds the image whose layers are the container snapshot's
// parent chain, by identity rather than by name: a tag the node re-pulled
// since the container started points to other layers, and a diff against
// the real parent stacked on those would be a wrong image. It tries the
// image the container names, the image ID the CRI plugin recorded, then
// every image in the namespace; when the CRI plugin recorded an image ID,
// the config must be that one too.
func (c *Committer) resolveBase(ctx context.Context, l *liveContainer, parent string) (*baseImage, error) {
	is := c.client.ImageService()
	cs := c.client.ContentStore()
	recorded := criImageID(l.info)
	tried := map[digest.Digest]bool{}
	try := func(img images.Image) (*baseImage, error) {
		if tried[img.Target.Digest] {
			return nil, nil
		}
		tried[img.Target.Digest] = true
		m, err := matchManifest(ctx, cs, img.Target, parent, recorded)
		if err != nil || m == nil {
			return nil, err
		}
		return &baseImage{img: img, manifest: *m}, nil
	}

	named, namedErr := is.Get(ctx, l.info.Image)
	if namedErr == nil {
		if b, err := try(named); b != nil || err != nil {
			return b, err
		}
	} else if !errdefs.IsNotFound(namedErr) {
		return nil, fmt.Errorf("reading image %s: %w", l.info.Image, namedErr)
	}
	if recorded != "" {
		if img, err := is.Get(ctx, recorded.String()); err == nil {
			if b, err := try(img); b != nil || err != nil {
				return b, err
			}
		}
	}
	all, err := is.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	for _, img := range all {
		if b, err := try(img); b != nil || err != nil {
			return b, err
		}
	}

	want := "rootfs parent " + parent
	if parent == "" {
		want = "rootfs, which has no parent layers,"
	}
	if recorded != "" {
		want += " and image ID " + recorded.String()
	}
	now := fmt.Sprintf("image %s is not in containerd", l.info.Image)
	if namedErr == nil {
		now = fmt.Sprintf("tag %s now points to %s", l.info.Image, named.Target.Digest)
		if m, chain, err := firstManifestChain(ctx, cs, named.Target); err == nil {
			now += fmt.Sprintf(" (manifest %s, layers %s)", m.Digest, chainOrNone(chain))
		}
		now += ", so the node re-pulled or re-tagged it since the container started"
	}
	return nil, fmt.Errorf("its %s matches no image in containerd; %s; refusing to stack the diff on other layers", want, now)
}

func chainOrNone(chain digest.Digest) string {
	if chain == "" {
		return "none"
	}
	return chain.String()
}

// manifestChain reads a manifest and its config and returns the chain ID of
// the config's rootfs diff IDs (empty for an image without layers).
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

// platformCandidates lists the manifests an image target stands for: the
// target itself, or an index's manifests, those of the default platform
// first. Nested indexes are not followed.
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

// matchManifest returns the manifest of target whose layers' chain ID is
// parent (and whose config is recorded, when given), or nil. For an index,
// every platform manifest held locally is checked, not only the first that
// matches the platform loosely. Missing content is no match.
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

// firstManifestChain describes what an image target holds for the error
// message: its first readable platform manifest and that manifest's chain.
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

// baseName picks the name recorded as the committed image's base: the name
// the container was created with when it is the base, otherwise a digest
// reference, otherwise a tag, of an image with the same target. Bare image
// IDs ("sha256:…") are not references.
func (c *Committer) baseName(ctx context.Context, l *liveContainer, b *baseImage) string {
	names := []string{b.img.Name}
	if others, err := c.client.ImageService().List(ctx, "target.digest=="+b.img.Target.Digest.String()); err == nil {
		for _, o := range others {
			names = append(names, o.Name)
		}
	}
	sort.Strings(names)
	best, rank := b.img.Name, 3
	for _, n := range names {
		r := 2
		switch {
		case n == l.info.Image:
			r = 0
		case strings.HasPrefix(n, "sha256:"):
			r = 3
		case strings.Contains(n, "@sha256:"):
			r = 1
		}
		if r < rank {
			best, rank = n, r
		}
	}
	return best
}
