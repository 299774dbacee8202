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

// Checkpoint takes a memory snapshot of each target container, all frozen at
// once as in Commit, and leaves each as a checkpoint archive in CheckpointDir,
// in the layout containerd's CRI restores from, for Push to build its image. It
// fails before freezing where a target repository is public
// (checkpoint.PrivateTargets), the node cannot checkpoint, a restore could pull
// no base image (checkpoint.Dumper.RestoreBases) or the disk has no room for
// the memory.
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
	// A failed checkpoint leaves no archive; Push removes the others.
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

// completeArchive writes, after the thaw, the rest of rec's archive beside
// CRIU's dump, taken at at, and leaves rec for the push step.
func (c *Committer) completeArchive(ctx context.Context, p *prepared, rec *checkpoint.Record, at time.Time) (*Committed, error) {
	l, dir := p.live, c.ws.records.ArchiveDir(rec)
	fail := func(format string, a ...any) error {
		return fmt.Errorf("pod %s %s: %s", c.pod, l, fmt.Sprintf(format, a...))
	}
	st, err := c.dumper.Status(ctx, l)
	if err != nil {
		return nil, fail("%v", err)
	}
	// The image a restore pulls first must stay in its registry while this
	// snapshot may be resumed.
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

// writeRootfsDiff writes the change taken in the freeze to file, uncompressed;
// of a self-contained checkpoint, the whole root filesystem.
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
