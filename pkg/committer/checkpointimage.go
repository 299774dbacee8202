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
	"io"
	"log"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/keep"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/push"
)

// checkpointImages builds memory snapshots' images in the push step (build),
// hashing each archive's layer as it is uploaded, so that the commit step never
// copies the archive into a layer file; ingest keeps them on the node.
type checkpointImages struct {
	client *client.Client
	ws     *workspace
	pusher *push.Pusher
	runID  string
	pod    string
	log    *log.Logger
}

// build uploads ci's layer and writes its config and manifest into containerd
// under the working name, filling ci as readCommitted does.
func (b *checkpointImages) build(ctx context.Context, ci *committedImage) error {
	rec := ci.checkpoint
	start := time.Now()
	layer, diffID, tarSize, err := b.uploadLayer(ctx, ci)
	if err != nil {
		return fmt.Errorf("uploading the checkpoint's layer: %w", err)
	}
	b.log.Printf("pod %s container %q: uploaded the checkpoint's layer %s (%d bytes, %s) in %s",
		b.pod, ci.target.Container, layer.Digest, layer.Size, layer.MediaType, time.Since(start).Round(time.Millisecond))
	// The lease holds the config and manifest until an image names them.
	lctx, done, err := b.client.WithLease(ctx, leases.WithRandomID(), leases.WithExpiration(leaseExpiration))
	if err != nil {
		return fmt.Errorf("creating containerd lease: %w", err)
	}
	defer func() {
		if derr := done(context.WithoutCancel(lctx)); derr != nil {
			b.log.Printf("pod %s container %q: deleting lease: %v", b.pod, ci.target.Container, derr)
		}
	}()
	m, err := b.writeConfig(lctx, rec, layer, diffID)
	if err != nil {
		return err
	}
	// What keeping it takes on the node: the layer and its unpacked tar.
	labels := map[string]string{keep.LabelLocalBytes: strconv.FormatInt(layer.Size+tarSize, 10)}
	for k, v := range rec.Labels {
		labels[k] = v
	}
	mdesc, raw, err := b.ws.saveImage(lctx, ci.target, m, labels)
	if err != nil {
		return err
	}
	ci.image = images.Image{Name: b.ws.name(ci.target), Target: mdesc, Labels: labels}
	ci.raw, ci.manifest, ci.uploaded = raw, m, layer.Digest
	return nil
}

// writeConfig writes rec's image config into containerd and returns its
// manifest, the same bytes in build and ingest.
func (b *checkpointImages) writeConfig(ctx context.Context, rec *checkpoint.Record, layer ocispec.Descriptor, diffID digest.Digest) (ocispec.Manifest, error) {
	cfg, err := json.Marshal(ocispec.Image{
		Created:  &rec.Created,
		Platform: ocispec.Platform{Architecture: runtime.GOARCH, OS: "linux"},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
		History:  []ocispec.History{{Created: &rec.Created, Comment: historyComment, CreatedBy: rec.CreatedBy}},
	})
	if err != nil {
		return ocispec.Manifest{}, fmt.Errorf("encoding image config: %w", err)
	}
	cfgDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(cfg), Size: int64(len(cfg))}
	if err := oci.WriteBlob(ctx, b.client.ContentStore(), cfgDesc, cfg, nil); err != nil {
		return ocispec.Manifest{}, fmt.Errorf("writing config: %w", err)
	}
	return ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   ocispec.MediaTypeImageManifest,
		Config:      cfgDesc,
		Layers:      []ocispec.Descriptor{layer},
		Annotations: rec.Annotations,
	}, nil
}

// uploadLayer uploads the layer of ci's archive (push.Pusher.UploadStream) and
// returns its descriptor, its diff ID and its tar's size.
func (b *checkpointImages) uploadLayer(ctx context.Context, ci *committedImage) (ocispec.Descriptor, digest.Digest, int64, error) {
	rec, dir := ci.checkpoint, b.ws.records.ArchiveDir(ci.checkpoint)
	var mu sync.Mutex
	var tarDigest digest.Digest
	var tarSize int64
	open := func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() {
			d, n, err := checkpoint.WriteArchiveLayer(pw, dir, rec.MediaType)
			if err == nil {
				mu.Lock()
				tarDigest, tarSize = d, n
				mu.Unlock()
			}
			pw.CloseWithError(err)
		}()
		return pr, nil
	}
	layer, err := b.pusher.UploadStream(ctx, ci.target.Tag.Context(), rec.MediaType, open, func() (ocispec.Descriptor, error) {
		return checkpoint.ArchiveLayer(dir, rec.MediaType)
	})
	if err != nil {
		return ocispec.Descriptor{}, "", 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	if rec.MediaType == ocispec.MediaTypeImageLayer {
		tarDigest = layer.Digest
	}
	return layer, tarDigest, tarSize, nil
}

// ingest keeps ci's memory snapshot on this node, beside the upload: it writes
// the layer into containerd from a pass of its own and unpacks the image, then
// waits for built and checks that the pushed image is the same. It does not
// wait for the upload's digest: unpacking takes as long as the upload.
func (b *checkpointImages) ingest(ctx context.Context, ci *committedImage, built <-chan struct{}) (err error) {
	rec := ci.checkpoint
	lctx, done, err := b.client.WithLease(ctx, leases.WithRandomID(), leases.WithExpiration(leaseExpiration))
	if err != nil {
		return fmt.Errorf("creating containerd lease: %w", err)
	}
	defer done(context.WithoutCancel(ctx))
	cs := b.client.ContentStore()
	ref := "sandbox-ingest-checkpoint-" + b.runID + "-" + ci.target.Container
	// A failed ingest leaves no part of the sandbox's memory in containerd.
	defer func() {
		if err != nil {
			if aerr := cs.Abort(context.WithoutCancel(ctx), ref); aerr != nil && !errdefs.IsNotFound(aerr) {
				b.log.Printf("pod %s container %q: aborting ingest %s: %v", b.pod, ci.target.Container, ref, aerr)
			}
		}
	}()
	w, err := content.OpenWriter(lctx, cs, content.WithRef(ref))
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Truncate(0); err != nil {
		return err
	}
	cnt := &oci.CountingWriter{}
	diffID, tarSize, err := checkpoint.WriteArchiveLayer(io.MultiWriter(w, cnt), b.ws.records.ArchiveDir(rec), rec.MediaType)
	if err != nil {
		return fmt.Errorf("writing the checkpoint's layer into containerd: %w", err)
	}
	layer := ocispec.Descriptor{MediaType: rec.MediaType, Digest: w.Digest(), Size: cnt.N}
	if layer.Digest.Validate() != nil {
		return fmt.Errorf("containerd reports the digest %q for the checkpoint's layer", layer.Digest)
	}
	if diffID == "" {
		diffID = layer.Digest
	}
	err = w.Commit(lctx, layer.Size, layer.Digest, content.WithLabels(map[string]string{oci.LabelUncompressed: diffID.String()}))
	if err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("committing the checkpoint's layer %s into containerd: %w", layer.Digest, err)
	}
	m, err := b.writeConfig(lctx, rec, layer, diffID)
	if err != nil {
		return err
	}
	mdesc, _, err := oci.WriteManifest(lctx, cs, m)
	if err != nil {
		return err
	}
	if err := keep.Unpack(lctx, b.client, images.Image{Name: b.ws.name(ci.target), Target: mdesc, Labels: rec.Labels}); err != nil {
		return err
	}
	b.log.Printf("pod %s container %q: unpacked the checkpoint's image %s (%d bytes, %d unpacked) for a resume on this node",
		b.pod, ci.target.Container, mdesc.Digest, layer.Size, tarSize)
	select {
	case <-built:
	case <-ctx.Done():
		return ctx.Err()
	}
	if ci.image.Target.Digest != mdesc.Digest {
		return fmt.Errorf("the image unpacked, %s, is not the one pushed, %q", mdesc.Digest, ci.image.Target.Digest)
	}
	return nil
}
