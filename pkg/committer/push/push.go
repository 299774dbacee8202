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

// Package push uploads committed images: blobs mounted across repositories
// where possible, large ones in resumable chunks; then the manifest.
package push

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/layerdir"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/upload"
)

// Concurrency bounds parallel blob uploads.
const Concurrency = 4

// Options configures a Pusher.
type Options struct {
	Keychain authn.Keychain
	// Insecure allows plain HTTP registries, sources included.
	Insecure bool
	// RootCAs verify the registries' certificates; the system's when nil.
	RootCAs *x509.CertPool
	// ChunkSize is the chunk size and chunking threshold, default if 0.
	ChunkSize int
	// Remote are the options of every registry request, context included.
	Remote []remote.Option
	Pod    string
	Log    *log.Logger
}

// Image is one committed image to push.
type Image struct {
	Target task.Target
	// Raw is the manifest, pushed verbatim; Manifest decodes it.
	Raw       []byte
	Manifest  ocispec.Manifest
	MediaType string
	// Sources are repositories to fetch or mount missing blobs from.
	Sources []name.Repository
	// Uploaded is a blob already uploaded as it was built.
	Uploaded digest.Digest
}

// Pusher pushes the images of one run.
type Pusher struct {
	opts          Options
	blobs         *Blobs
	pusher        *remote.Pusher
	local, remote atomic.Int64
}

// New returns a Pusher reading local blobs from layers, then cs.
func New(cs content.Store, layers *layerdir.Dir, opts Options) (*Pusher, error) {
	pusher, err := remote.NewPusher(opts.Remote...)
	if err != nil {
		return nil, err
	}
	blobs, err := NewBlobs(cs, layers, opts.Remote)
	if err != nil {
		return nil, err
	}
	return &Pusher{opts: opts, blobs: blobs, pusher: pusher}, nil
}

// Stats counts where pushed blobs came from.
type Stats struct {
	// Local blobs were read from a layer file or the content store.
	Local int64
	// Remote blobs were mounted or streamed from a source.
	Remote int64
}

// Stats returns where the blobs pushed so far came from.
func (p *Pusher) Stats() *Stats {
	return &Stats{Local: p.local.Load(), Remote: p.remote.Load()}
}

// SourceRepositories parses a comma-separated list, dropping invalid names.
func SourceRepositories(list string, insecure bool) []name.Repository {
	var out []name.Repository
	opts := []name.Option{name.StrictValidation}
	if insecure {
		opts = append(opts, name.Insecure)
	}
	for _, s := range strings.Split(list, ",") {
		if s == "" {
			continue
		}
		if r, err := name.NewRepository(s, opts...); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// UploadStream uploads the blob open gives to repo, hashed as it is sent; a
// registry refusing chunks gets it in one request, described first by describe.
func (p *Pusher) UploadStream(ctx context.Context, repo name.Repository, mediaType string, open func() (io.ReadCloser, error), describe func() (ocispec.Descriptor, error)) (ocispec.Descriptor, error) {
	var layer ocispec.Descriptor
	chunked, err := p.chunked(ctx, repo, nil)
	if err == nil {
		layer, err = chunked.UploadStream(ctx, mediaType, open)
	}
	if errors.Is(err, upload.ErrChunkedRefused) {
		p.opts.Log.Printf("pod %s: %s: %v; hashing the blob, then uploading it in one request", p.opts.Pod, repo, err)
		if layer, err = describe(); err == nil {
			var l v1.Layer
			if l, err = partial.CompressedToLayer(&localLayer{desc: layer, open: open}); err == nil {
				err = p.pusher.Upload(ctx, repo, l)
			}
		}
	}
	return layer, err
}

func (p *Pusher) chunkSize() int {
	if p.opts.ChunkSize > 0 {
		return p.opts.ChunkSize
	}
	return upload.DefaultChunkSize
}

// chunked returns an uploader to push to repo and mount from sources.
func (p *Pusher) chunked(ctx context.Context, repo name.Repository, sources []name.Repository) (*upload.Chunked, error) {
	return upload.NewChunked(ctx, repo, sources, upload.Options{
		Keychain:  p.opts.Keychain,
		Insecure:  p.opts.Insecure,
		RootCAs:   p.opts.RootCAs,
		ChunkSize: p.chunkSize(),
		Logf:      p.opts.Log.Printf,
	})
}

// Push uploads img's blobs, Concurrency at once, then its manifest, checked by
// HEAD; put, even on failure, is the manifest unless the registry refused it.
func (p *Pusher) Push(ctx context.Context, img Image) (pushed, put digest.Digest, err error) {
	t, m := img.Target, img.Manifest
	repo := t.Tag.Context()

	blobs := append([]ocispec.Descriptor{m.Config}, m.Layers...)
	errs := make([]error, len(blobs))
	sem := make(chan struct{}, Concurrency)
	var wg sync.WaitGroup
	var chunked *upload.Chunked
	for i, d := range blobs {
		if d.Digest == img.Uploaded {
			continue
		}
		layer, local, err := p.blobLayer(ctx, d, repo, img.Sources)
		if err != nil {
			errs[i] = err
			continue
		}
		if local {
			p.local.Add(1)
		} else {
			p.remote.Add(1)
		}
		if chunked == nil && d.Size > int64(p.chunkSize()) {
			if chunked, err = p.chunked(ctx, repo, img.Sources); err != nil {
				return "", "", err
			}
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := p.uploadBlob(ctx, repo, d, layer, chunked); err != nil {
				errs[i] = fmt.Errorf("uploading blob %s: %w", d.Digest, err)
			}
		}()
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		return "", "", err
	}
	want := digest.FromBytes(img.Raw)
	err = p.pusher.Put(ctx, t.Tag, &rawManifest{raw: img.Raw, mediaType: img.MediaType})
	if te := (*transport.Error)(nil); !errors.As(err, &te) {
		put = want
	}
	if err != nil {
		return "", put, fmt.Errorf("putting manifest %s: %w", want, err)
	}
	head, err := remote.Head(t.Tag, p.opts.Remote...)
	if err != nil {
		return "", put, fmt.Errorf("verifying pushed manifest with HEAD: %w", err)
	}
	if head.Digest.String() != want.String() {
		return "", put, fmt.Errorf("registry reports manifest digest %s after push, expected %s", head.Digest, want)
	}
	p.opts.Log.Printf("pod %s container %q pushed %s@%s", p.opts.Pod, t.Container, t.Repository(), head.Digest)
	return want, put, nil
}

// uploadBlob uploads a blob over one chunk in chunks unless they are refused.
func (p *Pusher) uploadBlob(ctx context.Context, repo name.Repository, d ocispec.Descriptor, layer v1.Layer, chunked *upload.Chunked) error {
	if d.Size <= int64(p.chunkSize()) {
		return p.pusher.Upload(ctx, repo, layer)
	}
	err := chunked.Upload(ctx, d, mountSource(layer), layer.Compressed)
	if errors.Is(err, upload.ErrChunkedRefused) {
		p.opts.Log.Printf("pod %s: %s: %v; uploading blob %s in one request", p.opts.Pod, repo, err, d.Digest)
		return p.pusher.Upload(ctx, repo, layer)
	}
	return err
}

// mountSource returns the repository a layer would be mounted from.
func mountSource(l v1.Layer) *name.Repository {
	if ml, ok := l.(*remote.MountableLayer); ok {
		r := ml.Reference.Context()
		return &r
	}
	return nil
}

// blobLayer returns Blobs.Layer as a mount candidate when a source is on the
// target registry, even if local: uploading is the fallback.
func (p *Pusher) blobLayer(ctx context.Context, d ocispec.Descriptor, target name.Repository, sources []name.Repository) (v1.Layer, bool, error) {
	l, local, err := p.blobs.Layer(ctx, d, sources)
	if err != nil {
		return nil, false, err
	}
	for _, s := range sources {
		if s.RegistryStr() == target.RegistryStr() {
			return &remote.MountableLayer{Layer: l, Reference: s.Digest(d.Digest.String())}, local, nil
		}
	}
	return l, local, nil
}

// rawManifest pushes verbatim manifest bytes, so the digest is the local one.
type rawManifest struct {
	raw       []byte
	mediaType string
}

func (r *rawManifest) RawManifest() ([]byte, error) { return r.raw, nil }

func (r *rawManifest) MediaType() (types.MediaType, error) { return types.MediaType(r.mediaType), nil }

// firstError returns the first error and how many others: uploads fail alike.
func firstError(errs []error) error {
	var first error
	more := 0
	for _, err := range errs {
		switch {
		case err == nil:
		case first == nil:
			first = err
		default:
			more++
		}
	}
	if first != nil && more > 0 {
		return fmt.Errorf("%w (and %d more blobs failed)", first, more)
	}
	return first
}
