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
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/keep"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/registry"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/upload"
)

// pushConcurrency bounds parallel blob uploads.
const pushConcurrency = 4

// PushStats counts where pushed blobs came from.
type PushStats struct {
	// Local blobs were read from the containerd content store.
	Local int64
	// Remote blobs were absent locally and delegated to a source repository
	// (cross-repo mount, or streamed through the committer).
	Remote int64
}

func (c *Committer) remoteOptions(ctx context.Context) []remote.Option {
	return append([]remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(c.cfg.Keychain),
		remote.WithJobs(pushConcurrency),
	}, upload.RemoteOptions(c.cfg.Params.Insecure, c.cfg.RootCAs)...)
}

// Push uploads every committed image to its target, verifies the manifest
// digest with a HEAD request, then keeps the image in containerd for a resume
// on this node (Config.KeepLocal) or removes it. A failed push removes it,
// and once every container's push has stopped, deletes from the registry
// what it put there (takeBack). Results are in the order of the containers
// param.
func (c *Committer) Push(ctx context.Context) ([]Pushed, *PushStats, error) {
	// Pushed or not, the layer files and archives are gone at the end.
	defer c.releaseRoom()
	ctx = c.nsCtx(ctx)
	opts := c.remoteOptions(ctx)
	pusher, err := remote.NewPusher(opts...)
	if err != nil {
		return nil, nil, err
	}
	puller, err := remote.NewPuller(opts...)
	if err != nil {
		return nil, nil, err
	}
	stats := &PushStats{}
	// The committed images are read first; the layer files they left are
	// removed on every path.
	committed := make([]*committedImage, len(c.cfg.Params.Targets))
	errs := make([]error, len(committed))
	for i, t := range c.cfg.Params.Targets {
		if committed[i], errs[i] = c.readStep(ctx, t); errs[i] != nil {
			errs[i] = fmt.Errorf("pod %s container %q -> %s: %w", c.podRef(), t.Container, t.Image, errs[i])
		}
	}
	defer func() {
		for _, ci := range committed {
			switch {
			case ci == nil:
			case ci.checkpoint != nil:
				c.removeCheckpoint(ci.target, ci.checkpoint)
			default:
				c.removeLayerFiles(ci.manifest.Layers...)
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		c.deleteLocal(ctx, c.cfg.Params.Targets)
		return nil, stats, err
	}
	// Ingesting and unpacking for a resume on this node run beside the
	// upload. A memory snapshot's image is built as it is pushed; built
	// says when.
	unpacked := make([]chan error, len(c.cfg.Params.Targets))
	built := make([]chan struct{}, len(c.cfg.Params.Targets))
	for i := range built {
		built[i] = make(chan struct{})
	}
	if c.cfg.KeepLocal {
		for i, ci := range committed {
			unpacked[i] = make(chan error, 1)
			go func() {
				var err error
				if ci.checkpoint != nil {
					err = c.ingestCheckpoint(ctx, ci, built[i])
				} else if err = c.layers().Ingest(ctx, ci.manifest); err == nil {
					err = keep.Unpack(ctx, c.client, ci.image)
				}
				unpacked[i] <- err
			}()
		}
	}
	// Containers are pushed concurrently; each bounds its own blob uploads.
	// The first failure cancels the others, and all are waited for: no
	// upload goes on once Push returns. It cancels with context.Canceled,
	// not as errgroup.WithContext does, with the failure as the cause:
	// net/http wraps the cause into each request it cuts short, where it
	// would read as that request's own answer from the registry.
	out := make([]Pushed, len(c.cfg.Params.Targets))
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var g errgroup.Group
	for i, t := range c.cfg.Params.Targets {
		g.Go(func() error {
			var err error
			if ci := committed[i]; ci.checkpoint != nil {
				err = c.buildCheckpoint(gctx, ci, pusher)
			}
			close(built[i])
			var p *Pushed
			if err == nil {
				p, err = c.pushOne(gctx, committed[i], pusher, puller, opts, stats)
			}
			if err != nil {
				cancel()
				return fmt.Errorf("pod %s container %q -> %s: %w", c.podRef(), t.Container, t.Image, err)
			}
			out[i] = *p
			return nil
		})
	}
	pushErr := g.Wait()
	// An image that could not be unpacked is not kept: the push stands.
	var keep []Pushed
	var drop []task.Target
	for i, ch := range unpacked {
		if ch == nil {
			continue
		}
		if err := <-ch; err != nil {
			c.log.Printf("pod %s container %q: not keeping %s for a resume on this node: %v",
				c.podRef(), c.cfg.Params.Targets[i].Container, c.cfg.Params.Targets[i].Image, err)
			drop = append(drop, c.cfg.Params.Targets[i])
		} else {
			keep = append(keep, out[i])
		}
	}
	if pushErr != nil {
		// A failed push leaves nothing behind: the committed images go, and
		// their content with them (containerd's garbage collector), and so
		// do the manifests it put in the registry.
		c.deleteLocal(ctx, c.cfg.Params.Targets)
		return nil, stats, c.takeBack(ctx, committed, pushErr)
	}
	if !c.cfg.KeepLocal {
		c.deleteLocal(ctx, c.cfg.Params.Targets)
		return out, stats, nil
	}
	c.deleteLocal(ctx, drop)
	if err := c.keepLocal(ctx, keep); err != nil {
		return nil, stats, err
	}
	return out, stats, nil
}

// takeBack deletes from the registry, with the push credentials, the
// manifests this run may have put there for committed, and their tags; it
// returns err, naming the images the registry still holds.
func (c *Committer) takeBack(ctx context.Context, committed []*committedImage, err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	reg := registry.New(c.cfg.Keychain, upload.RemoteOptions(c.cfg.Params.Insecure, c.cfg.RootCAs)...)
	var left []string
	for _, ci := range committed {
		if ci == nil || ci.put == "" {
			continue
		}
		d := ci.target.Tag.Context().Digest(ci.put.String())
		if derr := unpush(ctx, reg, ci.target.Tag, d); derr != nil {
			c.log.Printf("pod %s container %q: the failed push left %s in the registry: %v", c.podRef(), ci.target.Container, d, derr)
			left = append(left, d.String())
			continue
		}
		c.log.Printf("pod %s container %q: the failed push deleted %s from the registry", c.podRef(), ci.target.Container, d)
	}
	if len(left) > 0 {
		return fmt.Errorf("%w; the registry still holds what this push put there: %s", err, strings.Join(left, ", "))
	}
	return err
}

// unpush deletes the manifest d and, where it still points at d, tag; it
// fails while the registry holds either. Distribution drops a manifest's
// tags with it; other registries delete a tag by name (OCI distribution
// 1.1).
func unpush(ctx context.Context, reg registry.Client, tag name.Tag, d name.Digest) error {
	derr := reg.Delete(ctx, d)
	tagged, err := reg.Digest(ctx, tag)
	if err != nil {
		return err
	}
	if tagged == d.DigestStr() {
		if err := reg.Delete(ctx, tag); err != nil {
			return errors.Join(derr, err)
		}
	}
	if derr != nil {
		// The push may have stopped before the registry took the manifest.
		if held, err := reg.Digest(ctx, d); err != nil || held != "" {
			return derr
		}
	}
	return nil
}

// deleteLocal removes this run's committed images of targets from containerd.
func (c *Committer) deleteLocal(ctx context.Context, targets []task.Target) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, t := range targets {
		if err := c.client.ImageService().Delete(ctx, c.workingName(t)); err != nil && !errdefs.IsNotFound(err) {
			c.log.Printf("pod %s container %q: removing local image %s: %v", c.podRef(), t.Container, c.workingName(t), err)
		}
	}
}

// committedImage is a committed image as the commit step left it; for a
// memory snapshot, checkpoint, until the push builds its image.
type committedImage struct {
	target   task.Target
	image    images.Image
	raw      []byte
	manifest ocispec.Manifest

	checkpoint *checkpointRecord
	// uploaded is the layer the push uploaded as it built it.
	uploaded digest.Digest
	// put is the manifest the push may have put in the registry.
	put digest.Digest
}

// readStep reads what this run's commit step left for t: the record of a
// memory snapshot, or the image it committed.
func (c *Committer) readStep(ctx context.Context, t task.Target) (*committedImage, error) {
	rec, err := c.readCheckpointRecord(t)
	if rec != nil {
		c.own(t, rec)
	}
	if err != nil || rec != nil {
		return &committedImage{target: t, checkpoint: rec}, err
	}
	return c.readCommitted(ctx, t)
}

// readCommitted reads the image this run's commit step committed for t.
func (c *Committer) readCommitted(ctx context.Context, t task.Target) (*committedImage, error) {
	img, err := c.client.ImageService().Get(ctx, c.workingName(t))
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("no committed image in containerd (did the commit step run?)")
		}
		return nil, fmt.Errorf("reading committed image: %w", err)
	}
	if img.Target.MediaType != ocispec.MediaTypeImageManifest && img.Target.MediaType != images.MediaTypeDockerSchema2Manifest {
		return nil, fmt.Errorf("committed image has unexpected media type %q", img.Target.MediaType)
	}
	ci := &committedImage{target: t, image: img}
	if ci.raw, err = content.ReadBlob(ctx, c.client.ContentStore(), img.Target); err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", img.Target.Digest, err)
	}
	if err := json.Unmarshal(ci.raw, &ci.manifest); err != nil {
		return nil, fmt.Errorf("decoding manifest %s: %w", img.Target.Digest, err)
	}
	return ci, nil
}

func (c *Committer) pushOne(ctx context.Context, ci *committedImage, pusher *remote.Pusher, puller *remote.Puller, opts []remote.Option, stats *PushStats) (*Pushed, error) {
	t, img, mraw, m := ci.target, ci.image, ci.raw, ci.manifest
	sources := c.sourceRepositories(img.Labels[LabelSourceRepos])
	repo := t.Tag.Context()

	blobs := append([]ocispec.Descriptor{m.Config}, m.Layers...)
	errs := make([]error, len(blobs))
	sem := make(chan struct{}, pushConcurrency)
	var wg sync.WaitGroup
	var chunked *upload.Chunked
	for i, d := range blobs {
		if d.Digest == ci.uploaded {
			continue
		}
		layer, local, err := c.blobLayer(ctx, d, repo, sources, puller)
		if err != nil {
			errs[i] = err
			continue
		}
		if local {
			atomic.AddInt64(&stats.Local, 1)
		} else {
			atomic.AddInt64(&stats.Remote, 1)
		}
		// Blobs larger than one chunk go in chunks that resume after a
		// transient error; the rest in one request.
		if chunked == nil && d.Size > int64(c.chunkSizeOrDefault()) {
			if chunked, err = c.newChunkedUploader(ctx, repo, sources); err != nil {
				return nil, err
			}
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := c.uploadBlob(ctx, repo, d, layer, pusher, chunked); err != nil {
				errs[i] = fmt.Errorf("uploading blob %s: %w", d.Digest, err)
			}
		}()
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		return nil, err
	}
	want := digest.FromBytes(mraw)
	err := pusher.Put(ctx, t.Tag, &rawManifest{raw: mraw, mediaType: img.Target.MediaType})
	// A manifest the registry refused is not there; after any other
	// failure it may be.
	if te := (*transport.Error)(nil); !errors.As(err, &te) {
		ci.put = want
	}
	if err != nil {
		return nil, fmt.Errorf("putting manifest %s: %w", img.Target.Digest, err)
	}
	head, err := remote.Head(t.Tag, opts...)
	if err != nil {
		return nil, fmt.Errorf("verifying pushed manifest with HEAD: %w", err)
	}
	if head.Digest.String() != want.String() {
		return nil, fmt.Errorf("registry reports manifest digest %s after push, expected %s", head.Digest, want)
	}
	c.log.Printf("pod %s container %q pushed %s@%s", c.podRef(), t.Container, t.Repository(), head.Digest)
	return &Pushed{Target: t, Digest: head.Digest.String()}, nil
}

// uploadBlob uploads one blob: in chunks when it is larger than one chunk,
// falling back to one request when the registry refuses chunks.
func (c *Committer) uploadBlob(ctx context.Context, repo name.Repository, d ocispec.Descriptor, layer v1.Layer, pusher *remote.Pusher, chunked *upload.Chunked) error {
	if d.Size <= int64(c.chunkSizeOrDefault()) {
		return pusher.Upload(ctx, repo, layer)
	}
	err := chunked.Upload(ctx, d, mountSource(layer), layer.Compressed)
	if errors.Is(err, upload.ErrChunkedRefused) {
		c.log.Printf("pod %s: %s: %v; uploading blob %s in one request", c.podRef(), repo, err, d.Digest)
		return pusher.Upload(ctx, repo, layer)
	}
	return err
}

// chunkSizeOrDefault is the chunk size of chunked blob uploads.
func (c *Committer) chunkSizeOrDefault() int {
	if c.chunkSize > 0 {
		return c.chunkSize
	}
	return upload.DefaultChunkSize
}

// newChunkedUploader returns an uploader authenticated for pushing to repo
// and mounting from sources.
func (c *Committer) newChunkedUploader(ctx context.Context, repo name.Repository, sources []name.Repository) (*upload.Chunked, error) {
	return upload.NewChunked(ctx, repo, sources, upload.Options{
		Keychain:  c.cfg.Keychain,
		Insecure:  c.cfg.Params.Insecure,
		RootCAs:   c.cfg.RootCAs,
		ChunkSize: c.chunkSizeOrDefault(),
		Logf:      c.log.Printf,
	})
}

// mountSource returns the repository a layer would be mounted from.
func mountSource(l v1.Layer) *name.Repository {
	if ml, ok := l.(*remote.MountableLayer); ok {
		r := ml.Reference.Context()
		return &r
	}
	return nil
}

// sourceRepositories parses the LabelSourceRepos value; the insecure param
// applies to source registries too.
func (c *Committer) sourceRepositories(label string) []name.Repository {
	var out []name.Repository
	opts := []name.Option{name.StrictValidation}
	if c.cfg.Params.Insecure {
		opts = append(opts, name.Insecure)
	}
	for _, s := range strings.Split(label, ",") {
		if s == "" {
			continue
		}
		if r, err := name.NewRepository(s, opts...); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// blobLayer returns a v1.Layer for one blob (sourcedLayer), a
// cross-repository mount candidate when a source is on the target registry.
func (c *Committer) blobLayer(ctx context.Context, d ocispec.Descriptor, target name.Repository, sources []name.Repository, puller *remote.Puller) (v1.Layer, bool, error) {
	l, local, err := c.sourcedLayer(ctx, d, sources, puller)
	if err != nil {
		return nil, false, err
	}
	// A blob already on the target registry is mounted from its source
	// repository instead of uploaded, even when containerd holds it: the
	// upload (from the local copy) is only the fallback.
	for _, s := range sources {
		if s.RegistryStr() == target.RegistryStr() {
			return &remote.MountableLayer{Layer: l, Reference: s.Digest(d.Digest.String())}, local, nil
		}
	}
	return l, local, nil
}

// sourcedLayer returns a v1.Layer for one blob: read from the commit step's
// layer file or the containerd content store when present (local), otherwise
// fetched lazily from a source repository.
func (c *Committer) sourcedLayer(ctx context.Context, d ocispec.Descriptor, sources []name.Repository, puller *remote.Puller) (l v1.Layer, local bool, err error) {
	cs := c.client.ContentStore()
	if p := c.layers().File(d.Digest); p != "" {
		if l, err = partial.CompressedToLayer(&localLayer{desc: d, open: func() (io.ReadCloser, error) { return os.Open(p) }}); err != nil {
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
	} else if l, err = partial.CompressedToLayer(&sourceLayer{ctx: ctx, desc: d, sources: sources, puller: puller}); err != nil {
		return nil, false, err
	}
	return l, local, nil
}

// rawManifest is a remote.Taggable for manifest bytes taken verbatim from
// containerd, so the pushed digest equals the local one.
type rawManifest struct {
	raw       []byte
	mediaType string
}

// RawManifest implements remote.Taggable.
func (r *rawManifest) RawManifest() ([]byte, error) { return r.raw, nil }

// MediaType implements remote.Taggable.
func (r *rawManifest) MediaType() (types.MediaType, error) { return types.MediaType(r.mediaType), nil }

// localLayer is a partial.CompressedLayer read from this node: a layer
// file, or the containerd content store.
type localLayer struct {
	desc ocispec.Descriptor
	open func() (io.ReadCloser, error)
}

// Digest implements partial.CompressedLayer.
func (l *localLayer) Digest() (v1.Hash, error) { return v1.NewHash(l.desc.Digest.String()) }

// Size implements partial.CompressedLayer.
func (l *localLayer) Size() (int64, error) { return l.desc.Size, nil }

// MediaType implements partial.CompressedLayer.
func (l *localLayer) MediaType() (types.MediaType, error) {
	return types.MediaType(l.desc.MediaType), nil
}

// Compressed implements partial.CompressedLayer.
func (l *localLayer) Compressed() (io.ReadCloser, error) { return l.open() }

// sourceLayer is a partial.CompressedLayer fetched from the first source
// repository that serves it, only when its bytes are actually needed.
type sourceLayer struct {
	ctx     context.Context
	desc    ocispec.Descriptor
	sources []name.Repository
	puller  *remote.Puller
}

// Digest implements partial.CompressedLayer.
func (l *sourceLayer) Digest() (v1.Hash, error) { return v1.NewHash(l.desc.Digest.String()) }

// Size implements partial.CompressedLayer.
func (l *sourceLayer) Size() (int64, error) { return l.desc.Size, nil }

// MediaType implements partial.CompressedLayer.
func (l *sourceLayer) MediaType() (types.MediaType, error) {
	return types.MediaType(l.desc.MediaType), nil
}

// Compressed implements partial.CompressedLayer.
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

// firstError returns the first error and how many others there were; blob
// uploads to one registry tend to fail alike.
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
