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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/base"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/keep"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/overlay"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// Commit freezes every target container, diffs each rootfs, thaws them and
// stores one image per container under its working name. The containers are
// thawed on every path. The pod's lock is held from before the first read until
// after the thaw; where another run holds it or someone else froze the pod,
// Commit fails with freeze.ErrFrozenElsewhere, touching nothing.
func (c *Committer) Commit(ctx context.Context) (res *CommitResult, err error) {
	ctx, live, unlock, done, err := c.acquire(c.nsCtx(ctx))
	if err != nil {
		return nil, err
	}
	defer done()
	defer unlock()
	preps := make([]*prepared, len(live))
	defer func() {
		for _, p := range preps {
			if p != nil {
				c.differ.Release(ctx, p.live, p.overlay)
			}
		}
	}()
	for i, l := range live {
		if preps[i], err = c.prepare(ctx, l); err != nil {
			return nil, err
		}
	}
	if err := c.room.check(ctx, preps, false); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.room.release()
		}
	}()

	res = &CommitResult{Mode: task.SnapshotModeFilesystem}
	if res.PauseWindow, err = c.frz.WhileFrozen(ctx, live, func(pctx context.Context) error { return c.diffAll(pctx, preps) }); err != nil {
		return nil, err
	}
	c.log.Printf("pod %s: containers thawed; pause window %d ms", c.pod, res.PauseWindow.Milliseconds())
	// The rest only writes this run's own image: let the next run in.
	unlock()

	for _, p := range preps {
		ci, err := c.finish(ctx, p)
		if err != nil {
			for _, done := range res.Images {
				c.ws.removeLayerFiles(done.Layer)
				c.ws.removeImages(ctx, done.Target)
			}
			return nil, err
		}
		res.Images = append(res.Images, *ci)
	}
	return res, nil
}

// acquire locks the pod, finds the live targets, checks that no one else froze
// them and opens a lease. unlock releases the lock, once; done ends the lease.
func (c *Committer) acquire(ctx context.Context) (_ context.Context, live []*freeze.Container, unlock, done func(), err error) {
	lock, err := c.frz.TryLock(ctx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var once sync.Once
	unlock = func() {
		once.Do(func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if rerr := lock.Release(rctx); rerr != nil {
				c.log.Printf("pod %s: releasing the containerd lock: %v", c.pod, rerr)
			}
		})
	}
	if live, err = c.frz.FindLive(ctx, c.cfg.Params.Targets); err == nil {
		err = c.frz.CheckOwnership(ctx, live)
	}
	if err != nil {
		unlock()
		return nil, nil, nil, nil, err
	}
	lctx, doneLease, err := c.client.WithLease(ctx, leases.WithRandomID(), leases.WithExpiration(leaseExpiration))
	if err != nil {
		unlock()
		return nil, nil, nil, nil, fmt.Errorf("pod %s: creating containerd lease: %w", c.pod, err)
	}
	done = func() {
		if derr := doneLease(context.WithoutCancel(lctx)); derr != nil {
			c.log.Printf("pod %s: deleting lease: %v", c.pod, derr)
		}
	}
	return lctx, live, unlock, done, nil
}

func (c *Committer) diffAll(ctx context.Context, preps []*prepared) error {
	if c.cfg.InPause != nil {
		live := make([]*freeze.Container, len(preps))
		for i, p := range preps {
			live[i] = p.live
		}
		if err := c.cfg.InPause(ctx, live); err != nil {
			return fmt.Errorf("pod %s: %w", c.pod, err)
		}
	}
	errs := make([]error, len(preps))
	var wg sync.WaitGroup
	for i, p := range preps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := p.live
			var err error
			if p.overlay != nil {
				p.upper, err = c.differ.Diff(ctx, l, p.overlay)
			} else {
				sn := c.client.SnapshotService(l.Info.Snapshotter)
				ref := fmt.Sprintf("sandbox-commit-diff-%s-%d", l.Info.ID, time.Now().UnixNano())
				p.diff, err = rootfs.CreateDiff(ctx, l.Info.SnapshotKey, sn, c.client.DiffService(),
					diff.WithMediaType(ocispec.MediaTypeImageLayer), diff.WithReference(ref))
			}
			if err != nil {
				errs[i] = fmt.Errorf("pod %s %s: diffing rootfs (snapshotter %s): %w", c.pod, l, l.Info.Snapshotter, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// prepare reads the base image of l, before the pause.
func (c *Committer) prepare(ctx context.Context, l *freeze.Container) (*prepared, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("pod %s %s: %s", c.pod, l, fmt.Sprintf(format, a...))
	}
	if l.Info.SnapshotKey == "" || l.Info.Snapshotter == "" {
		return nil, fail("container has no snapshot")
	}
	st, err := c.client.SnapshotService(l.Info.Snapshotter).Stat(ctx, l.Info.SnapshotKey)
	if err != nil {
		return nil, fail("snapshot %s: %v", l.Info.SnapshotKey, err)
	}
	res := base.New(c.client, c.remoteOptions(ctx), c.cfg.Params.Insecure, c.pod, c.log)
	b, err := res.Resolve(ctx, l, st.Parent)
	if err != nil {
		return nil, fail("%v", err)
	}
	cs := c.client.ContentStore()
	mdesc := b.Manifest
	raw, err := content.ReadBlob(ctx, cs, mdesc)
	if err != nil {
		return nil, fail("reading base manifest %s: %v", mdesc.Digest, err)
	}
	p := &prepared{live: l, baseName: res.Name(ctx, l, b), manifestMT: mdesc.MediaType, manifestDgs: mdesc.Digest}
	if err := json.Unmarshal(raw, &p.manifest); err != nil {
		return nil, fail("decoding base manifest %s: %v", mdesc.Digest, err)
	}
	craw, err := content.ReadBlob(ctx, cs, p.manifest.Config)
	if err != nil {
		return nil, fail("reading base config %s: %v", p.manifest.Config.Digest, err)
	}
	if err := json.Unmarshal(craw, &p.config); err != nil {
		return nil, fail("decoding base config %s: %v", p.manifest.Config.Digest, err)
	}
	p.configMT = p.manifest.Config.MediaType
	if b.Record.Name != l.Info.Image {
		c.log.Printf("pod %s %s: base resolved by layers to %s (manifest %s)", c.pod, l, p.baseName, mdesc.Digest)
	}
	p.sourceRepos = base.Repositories(ctx, c.client, b.Record, mdesc)
	if p.overlay, err = c.planOverlay(ctx, l); err != nil {
		return nil, fail("%v", err)
	}
	return p, nil
}

// planOverlay plans the overlay differ for l, or returns nil for containerd's
// walking differ.
func (c *Committer) planOverlay(ctx context.Context, l *freeze.Container) (*overlay.Plan, error) {
	if c.cfg.WalkingDiffer {
		return nil, nil
	}
	return c.differ.Plan(ctx, l)
}

// finish writes the layer, config, manifest and image of p after the thaw.
func (c *Committer) finish(ctx context.Context, p *prepared) (_ *Committed, err error) {
	l := p.live
	fail := func(format string, a ...any) error {
		return fmt.Errorf("pod %s %s: %s", c.pod, l, fmt.Sprintf(format, a...))
	}
	cs := c.client.ContentStore()
	layerMT := ocispec.MediaTypeImageLayerGzip
	if p.manifestMT == mediaTypeDockerManif {
		layerMT = mediaTypeDockerGzip
	}
	write := func(w io.Writer) error { return oci.CopyBlob(ctx, cs, p.diff, w) }
	if p.upper != nil {
		write = func(w io.Writer) error { return p.upper.WriteLayer(ctx, cs, w) }
	}
	// Past MaxLayers, earlier commits' layers are squashed with the change.
	own, squashed := ownLayers(p.config, len(p.manifest.Layers)), 0
	if c.cfg.Params.MaxLayers > 0 && own >= c.cfg.Params.MaxLayers {
		squashed = own
		if write, err = c.squashedWrite(ctx, p, squashed, c.room.scratch, write); err != nil {
			return nil, fail("squashing %d layers of earlier commits: %v", squashed, err)
		}
	}
	ref := fmt.Sprintf("sandbox-commit-gzip-%s-%d", l.Info.ID, time.Now().UnixNano())
	layer, diffID, diffSize, err := c.ws.layers.Build(ctx, ref, write, layerMT)
	if err != nil {
		if squashed > 0 {
			return nil, fail("squashing %d layers of earlier commits and this change: %v", squashed, err)
		}
		return nil, fail("compressing layer: %v", err)
	}
	defer func() {
		if err != nil {
			c.ws.removeLayerFiles(layer)
		}
	}()

	now := time.Now().UTC()
	createdBy := fmt.Sprintf("sandbox-commit pod %s container %s", c.pod, l.Target.Container)
	if squashed > 0 {
		createdBy += fmt.Sprintf(", squashing %d earlier commits", squashed)
	}
	cfg, err := appendLayerToConfig(p.config, squashed, diffID, now, createdBy)
	if err != nil {
		return nil, fail("updating image config: %v", err)
	}
	cfgDesc := ocispec.Descriptor{MediaType: p.configMT, Digest: digest.FromBytes(cfg), Size: int64(len(cfg))}
	if err := oci.WriteBlob(ctx, cs, cfgDesc, cfg, nil); err != nil {
		return nil, fail("writing config: %v", err)
	}

	m := p.manifest
	m.Config = cfgDesc
	m.Layers = append(append([]ocispec.Descriptor{}, p.manifest.Layers[:len(p.manifest.Layers)-squashed]...), layer)
	m.Subject = nil
	if p.manifestMT == mediaTypeDockerManif {
		m.MediaType = mediaTypeDockerManif
	} else {
		m.MediaType = ocispec.MediaTypeImageManifest
		ann := map[string]string{}
		for k, v := range p.manifest.Annotations {
			ann[k] = v
		}
		// A first commit names the base; later ones keep it.
		if own == 0 {
			delete(ann, ocispec.AnnotationBaseImageName)
			if !strings.HasPrefix(p.baseName, "sha256:") {
				ann[ocispec.AnnotationBaseImageName] = p.baseName
			}
			ann[ocispec.AnnotationBaseImageDigest] = p.manifestDgs.String()
		}
		m.Annotations = ann
	}
	mdesc, _, err := c.ws.saveImage(ctx, l.Target, m, map[string]string{
		LabelSourceImage:      p.baseName,
		LabelSourceRepos:      strings.Join(p.sourceRepos, ","),
		LabelCommittedFrom:    c.pod + "/" + l.Target.Container,
		keep.LabelLocalBytes:  strconv.FormatInt(diffSize+layer.Size, 10),
		keep.LabelSnapshotter: l.Info.Snapshotter,
	})
	if err != nil {
		return nil, fail("%v", err)
	}
	c.log.Printf("pod %s %s committed as %s (manifest %s, %d layers, diff %d bytes, layer %d bytes)",
		c.pod, l, c.ws.name(l.Target), mdesc.Digest, len(m.Layers), diffSize, layer.Size)
	return &Committed{Target: l.Target, Manifest: mdesc, DiffSize: diffSize, Layer: layer}, nil
}
