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

// Package base finds the image a container's root filesystem was unpacked from,
// by its layers rather than its name: in containerd or, where containerd no
// longer holds it, in its registry.
package base

import (
	"context"
	"fmt"
	"log"
	"sort"
	"strings"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/cri"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
)

// Image is the image a container's root filesystem was unpacked from.
type Image struct {
	// Record is an image record whose target holds the manifest.
	Record images.Image
	// Manifest is the platform manifest whose layers are the parent chain.
	Manifest ocispec.Descriptor
}

// Resolver finds the base images of one pod's containers.
type Resolver struct {
	client *client.Client
	// remote reaches the registries bases are looked up in; insecure allows
	// plain HTTP.
	remote   []remote.Option
	insecure bool
	// pod names the pod in log messages.
	pod string
	log *log.Logger
}

// New returns a Resolver of pod's bases in c, looking them up in registries
// through remote.
func New(c *client.Client, remote []remote.Option, insecure bool, pod string, log *log.Logger) *Resolver {
	return &Resolver{client: c, remote: remote, insecure: insecure, pod: pod, log: log}
}

// Resolve finds the image whose layers are the snapshot's parent chain, by
// identity, not name: a tag re-pulled since the container started names other
// layers, and the diff stacked on those would be a wrong image. It tries the
// container's image, the CRI image ID, every image in the namespace, then the
// registry; a recorded CRI image ID must be the config too.
func (r *Resolver) Resolve(ctx context.Context, l *freeze.Container, parent string) (*Image, error) {
	is := r.client.ImageService()
	cs := r.client.ContentStore()
	recorded := cri.ImageID(l.Info)
	tried := map[digest.Digest]bool{}
	try := func(img images.Image) (*Image, error) {
		if tried[img.Target.Digest] {
			return nil, nil
		}
		tried[img.Target.Digest] = true
		m, err := matchManifest(ctx, cs, img.Target, parent, recorded)
		if err != nil || m == nil {
			return nil, err
		}
		return &Image{Record: img, Manifest: *m}, nil
	}

	named, namedErr := is.Get(ctx, l.Info.Image)
	if namedErr == nil {
		if b, err := try(named); b != nil || err != nil {
			return b, err
		}
	} else if !errdefs.IsNotFound(namedErr) {
		return nil, fmt.Errorf("reading image %s: %w", l.Info.Image, namedErr)
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

	fetched, fetchedNot := r.fetchBase(ctx, l, parent, recorded)
	if fetched != nil {
		return fetched, nil
	}

	want := "rootfs parent " + parent
	if parent == "" {
		want = "rootfs, which has no parent layers,"
	}
	if recorded != "" {
		want += " and image ID " + recorded.String()
	}
	now := fmt.Sprintf("image %s is not in containerd", l.Info.Image)
	if namedErr == nil {
		now = fmt.Sprintf("tag %s now points to %s", l.Info.Image, named.Target.Digest)
		if m, chain, err := firstManifestChain(ctx, cs, named.Target); err == nil {
			now += fmt.Sprintf(" (manifest %s, layers %s)", m.Digest, chainOrNone(chain))
		}
		now += ", so the node re-pulled or re-tagged it since the container started"
	}
	return nil, fmt.Errorf("its %s matches no image in containerd; %s; %s; refusing to stack the diff on other layers",
		want, now, strings.Join(fetchedNot, "; "))
}

// Name picks the base name recorded on the committed image among those with b's
// target: the container's image name, else a digest reference, else a tag; bare
// image IDs ("sha256:…") are not references.
func (r *Resolver) Name(ctx context.Context, l *freeze.Container, b *Image) string {
	names := []string{b.Record.Name}
	if others, err := r.client.ImageService().List(ctx, "target.digest=="+b.Record.Target.Digest.String()); err == nil {
		for _, o := range others {
			names = append(names, o.Name)
		}
	}
	sort.Strings(names)
	best, rank := b.Record.Name, 3
	for _, n := range names {
		r := 2
		switch {
		case n == l.Info.Image:
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
