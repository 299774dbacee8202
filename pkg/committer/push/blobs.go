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

package push

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/layerdir"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
)

// Blobs reads the blobs a push uploads and a squash merges, local ones first.
type Blobs struct {
	cs     content.Store
	layers *layerdir.Dir
	puller *remote.Puller
}

// NewBlobs returns Blobs reading from layers, then cs, then remote sources.
func NewBlobs(cs content.Store, layers *layerdir.Dir, remoteOpts []remote.Option) (*Blobs, error) {
	puller, err := remote.NewPuller(remoteOpts...)
	if err != nil {
		return nil, err
	}
	return &Blobs{cs: cs, layers: layers, puller: puller}, nil
}

// Layer returns blob d as a v1.Layer, fetched lazily unless local.
func (b *Blobs) Layer(ctx context.Context, d ocispec.Descriptor, sources []name.Repository) (l v1.Layer, local bool, err error) {
	cs := b.cs
	if f := b.layers.File(d.Digest); f != "" {
		if l, err = partial.CompressedToLayer(&localLayer{desc: d, open: func() (io.ReadCloser, error) { return os.Open(f) }}); err != nil {
			return nil, false, err
		}
		local = true
	} else if _, err := cs.Info(ctx, d.Digest); err == nil {
		if l, err = partial.CompressedToLayer(&localLayer{desc: d, open: func() (io.ReadCloser, error) { return oci.OpenContent(ctx, cs, d) }}); err != nil {
			return nil, false, err
		}
		local = true
	} else if !errdefs.IsNotFound(err) {
		return nil, false, fmt.Errorf("content store info for %s: %w", d.Digest, err)
	} else if len(sources) == 0 {
		return nil, false, fmt.Errorf("blob %s is not in containerd and the source image has no known repository", d.Digest)
	} else if l, err = partial.CompressedToLayer(&sourceLayer{ctx: ctx, desc: d, sources: sources, puller: b.puller}); err != nil {
		return nil, false, err
	}
	return l, local, nil
}

// localLayer is a partial.CompressedLayer read from this node.
type localLayer struct {
	desc ocispec.Descriptor
	open func() (io.ReadCloser, error)
}

func (l *localLayer) Digest() (v1.Hash, error) { return v1.NewHash(l.desc.Digest.String()) }

func (l *localLayer) Size() (int64, error) { return l.desc.Size, nil }

func (l *localLayer) MediaType() (types.MediaType, error) {
	return types.MediaType(l.desc.MediaType), nil
}

func (l *localLayer) Compressed() (io.ReadCloser, error) { return l.open() }

// sourceLayer is a partial.CompressedLayer from the first source serving it.
type sourceLayer struct {
	ctx     context.Context
	desc    ocispec.Descriptor
	sources []name.Repository
	puller  *remote.Puller
}

func (l *sourceLayer) Digest() (v1.Hash, error) { return v1.NewHash(l.desc.Digest.String()) }

func (l *sourceLayer) Size() (int64, error) { return l.desc.Size, nil }

func (l *sourceLayer) MediaType() (types.MediaType, error) {
	return types.MediaType(l.desc.MediaType), nil
}

func (l *sourceLayer) Compressed() (io.ReadCloser, error) {
	var errs []error
	for _, s := range l.sources {
		rl, err := l.puller.Layer(l.ctx, s.Digest(l.desc.Digest.String()))
		if err == nil {
			var rc io.ReadCloser
			if rc, err = rl.Compressed(); err == nil {
				return rc, nil
			}
		}
		errs = append(errs, fmt.Errorf("fetching %s from %s: %w", l.desc.Digest, s, err))
	}
	return nil, errors.Join(errs...)
}
