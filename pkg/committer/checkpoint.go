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
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/keep"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/upload"
)

// A memory snapshot is a checkpoint archive as containerd's CRI
// CheckpointContainer writes it (the call behind kubelet's checkpoint API,
// KEP-2008): CRIU's dump of the processes in checkpoint/, the container's
// spec, CRI config and status (spec.dump, config.dump, status.dump), and its
// filesystem change (rootfs-diff.tar). The archive's files become the one
// layer of a checkpoint image, the format containerd's CRI (2.1 and later)
// restores a container from and CRI-O reads too.
//
// The archive is written here, not by CheckpointContainer: that call copies
// CRIU's dump four times before it returns, while the container stays
// frozen. Here CRIU dumps through containerd's task API straight into the
// checkpoint directory, the filesystem change is taken beside it, and the
// containers thaw; the rest of the archive is written after the thaw, and
// the push step builds the image from it (checkpointimage.go).

// Checkpoint takes a memory snapshot of each target container and leaves
// each as a checkpoint archive in CheckpointDir, recorded in LayerDir, for
// the push step to build its image from (Push). It freezes all of them at
// once, as Commit does, so that they are checkpointed at one instant; the
// freeze lasts while CRIU dumps them and their filesystem changes are taken.
// It fails before freezing where anyone may pull from a target repository
// (checkpoint.PrivateTargets), the node cannot checkpoint them, a restore
// could pull neither their base images nor a restore base
// (checkpoint.Dumper.RestoreBases), or the
// node's disk has no room for their memory.
// CheckpointDir must be the same directory for containerd and this process;
// SweepCheckpoints, run first, frees what runs that are over left in it.
func (c *Committer) Checkpoint(ctx context.Context) (res *CommitResult, err error) {
	if c.cfg.CheckpointDir == "" || c.cfg.LayerDir == "" {
		return nil, fmt.Errorf("pod %s: a memory snapshot needs a checkpoint directory and a layer directory", c.pod)
	}
	if !c.cfg.Params.AllowAnonymousPull {
		if err := checkpoint.PrivateTargets(ctx, c.cfg.Params.Targets, upload.RemoteOptions(c.cfg.Params.Insecure, c.cfg.RootCAs), c.pod); err != nil {
			return nil, err
		}
	}
	ctx, live, unlock, done, err := c.acquire(c.nsCtx(ctx))
	if err != nil {
		return nil, err
	}
	defer done()
	defer unlock()
	if err := c.dumper.Checkpointable(ctx, live); err != nil {
		return nil, err
	}
	selfContained, err := c.dumper.RestoreBases(ctx, live, c.cfg.Params.MemoryRestoreBase)
	if err != nil {
		return nil, err
	}

	preps := make([]*prepared, len(live))
	defer func() {
		for _, p := range preps {
			if p != nil {
				c.differ.Release(ctx, p.live, p.overlay)
			}
		}
	}()
	// The archives stay for the push step, which removes them; a failed
	// checkpoint leaves none, nor does a signal (Discard).
	archives := make([]*checkpoint.Record, len(live))
	for i, l := range live {
		archives[i] = &checkpoint.Record{Archive: checkpoint.ArchiveName(c.cfg.Params.TaskPodUID, c.cfg.Params.RunID, l.Target.Container)}
		c.ws.own(l.Target, archives[i])
	}
	defer func() {
		if err != nil {
			for i, l := range live {
				c.ws.removeCheckpoint(l.Target, archives[i])
			}
		}
	}()
	for i, l := range live {
		if selfContained[i] {
			// Its whole root filesystem: the base image's layers, read as a
			// squash reads them, and the change.
			if preps[i], err = c.prepare(ctx, l); err != nil {
				return nil, err
			}
			preps[i].selfContained = true
			continue
		}
		plan, err := c.planOverlay(ctx, l)
		if err != nil {
			return nil, fmt.Errorf("pod %s %s: %w", c.pod, l, err)
		}
		preps[i] = &prepared{live: l, overlay: plan}
	}
	if err := c.room.check(ctx, preps, true); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.room.release()
		}
	}()
	res = &CommitResult{Mode: task.SnapshotModeMemory}
	var at time.Time
	res.PauseWindow, err = c.frz.WhileFrozen(ctx, live, func(pctx context.Context) error {
		at = time.Now()
		errs := make([]error, len(live)+1)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[len(live)] = c.diffAll(pctx, preps)
		}()
		for i, l := range live {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = c.dumper.Dump(pctx, l, c.ws.records.ArchiveDir(archives[i]))
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	if err != nil {
		return nil, err
	}
	c.log.Printf("pod %s: %d containers checkpointed and thawed; pause window %d ms", c.pod, len(live), res.PauseWindow.Milliseconds())
	unlock()
	for i, p := range preps {
		ci, err := c.completeArchive(ctx, p, archives[i], at)
		if err != nil {
			return nil, err
		}
		res.Images = append(res.Images, *ci)
	}
	return res, nil
}

// completeArchive completes the checkpoint archive rec names, where CRIU's
// dump is (taken when the containers were frozen, at), and leaves rec for
// the push step, which builds the checkpoint image from it
// (checkpointImages.build): one layer holding the archive's files (zstd
// where that pays, checkpoint.LayerType), and on the manifest the
// annotations that make containerd's CRI restore from it.
func (c *Committer) completeArchive(ctx context.Context, p *prepared, rec *checkpoint.Record, at time.Time) (*Committed, error) {
	l, dir := p.live, c.ws.records.ArchiveDir(rec)
	fail := func(format string, a ...any) error {
		return fmt.Errorf("pod %s %s: %s", c.pod, l, fmt.Sprintf(format, a...))
	}
	st, err := c.dumper.Status(ctx, l)
	if err != nil {
		return nil, fail("%v", err)
	}
	// The image a restore pulls before it restores (config.dump's
	// RootfsImageRef): it must stay in its registry while this one may be
	// resumed.
	restoreName, restoreRef := st.GetImage().GetImage(), st.GetImageRef()
	if p.selfContained {
		restoreName, restoreRef = c.cfg.Params.MemoryRestoreBase, c.cfg.Params.MemoryRestoreBase
	}
	if err := checkpoint.WriteDumps(l, st, dir, at, restoreName, restoreRef); err != nil {
		return nil, fail("%v", err)
	}
	if err := c.writeRootfsDiff(ctx, p, filepath.Join(dir, crmetadata.RootFsDiffTar)); err != nil {
		return nil, fail("writing the filesystem change: %v", err)
	}
	if err := checkpoint.Restrict(dir); err != nil {
		return nil, fail("leaving the checkpoint %s to root alone: %v", dir, err)
	}
	mediaType, size, err := checkpoint.LayerType(dir)
	if err != nil {
		return nil, fail("sampling the checkpoint: %v", err)
	}
	rec.MediaType, rec.Created = mediaType, at.UTC()
	rec.CreatedBy = fmt.Sprintf("sandbox-checkpoint pod %s container %s", c.pod, l.Target.Container)
	rec.Annotations = map[string]string{
		task.AnnotationCheckpointName:     l.Target.Container,
		task.AnnotationCRIOCheckpointName: l.Target.Container,
		ocispec.AnnotationBaseImageName:   restoreName,
	}
	rec.Labels = map[string]string{
		LabelSourceImage:      l.Info.Image,
		LabelCommittedFrom:    c.pod + "/" + l.Target.Container,
		keep.LabelSnapshotter: l.Info.Snapshotter,
	}
	if _, d, ok := strings.Cut(restoreRef, "@"); ok && digest.Digest(d).Validate() == nil {
		rec.Annotations[ocispec.AnnotationBaseImageDigest] = d
	}
	if err := c.ws.records.Write(l.Target.Container, rec); err != nil {
		return nil, fail("leaving the checkpoint's record for the push step: %v", err)
	}
	c.log.Printf("pod %s %s checkpointed (archive %s, %d bytes; its %s layer is built as it is pushed)",
		c.pod, l, dir, size, mediaType)
	return &Committed{Target: l.Target, DiffSize: size, Layer: ocispec.Descriptor{MediaType: mediaType}}, nil
}

// writeRootfsDiff writes the filesystem change taken in the freeze, an
// uncompressed layer, to file; for a self-contained checkpoint, the whole
// root filesystem: the base image's layers and the change, squashed into
// one.
func (c *Committer) writeRootfsDiff(ctx context.Context, p *prepared, file string) error {
	write := func(w io.Writer) error {
		if p.upper != nil {
			return p.upper.WriteLayer(ctx, c.client.ContentStore(), w)
		}
		return oci.CopyBlob(ctx, c.client.ContentStore(), p.diff, w)
	}
	if p.selfContained {
		var err error
		if write, err = c.squashedWrite(ctx, p, len(p.manifest.Layers), c.room.scratch, write); err != nil {
			return fmt.Errorf("reading the base image's layers: %w", err)
		}
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	return errors.Join(write(f), f.Close())
}
