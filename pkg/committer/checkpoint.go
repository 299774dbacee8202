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
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A memory snapshot is the archive containerd's CRI CheckpointContainer
// writes, the call behind kubelet's checkpoint API (KEP-2008): CRIU's dump
// of the processes, their spec and status, and the container's filesystem
// change. The archive becomes the one layer of a checkpoint image, the
// format containerd's CRI (2.1 and later) restores a container from and
// CRI-O reads too. containerd's task checkpoint API was not chosen: its
// image is containerd's own format, which the CRI does not restore.

// ErrMemorySnapshotUnsupported reports a node that cannot checkpoint a
// container's processes: a containerd without CRI checkpoint, no CRIU on its
// PATH, or a process CRIU refuses. Nothing is left frozen.
var ErrMemorySnapshotUnsupported = errors.New("MemorySnapshotUnsupported")

// Annotations on a checkpoint image's manifest: containerd's CRI restores an
// image carrying the first, CRI-O one carrying the second.
const (
	AnnotationCheckpointName     = "org.criu.checkpoint.container.name"
	AnnotationCRIOCheckpointName = "io.kubernetes.cri-o.annotations.checkpoint.name"
)

// Checkpoint takes a memory snapshot of each target container and stores
// each as a checkpoint image under its working name (workingName) for the
// push step. It freezes all of them at once, as Commit does, so that they
// are checkpointed at one instant, and containerd, finding them frozen,
// leaves the thaw to it. CheckpointDir must be the same directory for
// containerd and this process.
func (c *Committer) Checkpoint(ctx context.Context) (res *CommitResult, err error) {
	if c.cfg.CheckpointDir == "" {
		return nil, fmt.Errorf("pod %s: no checkpoint directory", c.podRef())
	}
	ctx, live, unlock, done, err := c.acquire(c.nsCtx(ctx))
	if err != nil {
		return nil, err
	}
	defer done()
	defer unlock()

	c.removeStaleArchives()
	archives := make([]string, len(live))
	for i, l := range live {
		archives[i] = filepath.Join(c.cfg.CheckpointDir, fmt.Sprintf("%s-%s.tar", c.cfg.Params.RunID, l.target.Container))
		defer os.Remove(archives[i])
	}
	res = &CommitResult{}
	res.PauseWindow, err = c.whileFrozen(ctx, live, func(pctx context.Context) error {
		errs := make([]error, len(live))
		var wg sync.WaitGroup
		for i, l := range live {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = c.checkpointOne(pctx, l, archives[i])
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	if err != nil {
		return nil, err
	}
	c.log.Printf("pod %s: %d containers checkpointed and thawed; pause window %d ms", c.podRef(), len(live), res.PauseWindow.Milliseconds())
	unlock()
	for i, l := range live {
		ci, err := c.checkpointImage(ctx, l, archives[i])
		if err != nil {
			c.removeImages(ctx, res.Images)
			return nil, err
		}
		res.Images = append(res.Images, *ci)
	}
	return res, nil
}

// staleArchiveAge is the age past which an archive in CheckpointDir is
// taken for one a killed run left: a run reads its own within minutes.
const staleArchiveAge = time.Hour

// removeStaleArchives removes the archives runs killed before they could
// remove their own left in CheckpointDir: they hold a sandbox's memory.
func (c *Committer) removeStaleArchives() {
	old, _ := filepath.Glob(filepath.Join(c.cfg.CheckpointDir, "*.tar"))
	for _, f := range old {
		if st, err := os.Stat(f); err == nil && time.Since(st.ModTime()) > staleArchiveAge {
			if err := os.Remove(f); err == nil {
				c.log.Printf("removed %s, left by a run killed %s ago", f, time.Since(st.ModTime()).Round(time.Minute))
			}
		}
	}
}

// checkpointOne writes the checkpoint archive of l, frozen, to archive, in
// place of any an earlier attempt of this run left (containerd does not
// truncate it).
func (c *Committer) checkpointOne(ctx context.Context, l *liveContainer, archive string) error {
	if err := os.Remove(archive); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pod %s %s: removing an earlier archive: %w", c.podRef(), l, err)
	}
	timeout := int64(1)
	if d, ok := ctx.Deadline(); ok {
		timeout = max(timeout, int64(time.Until(d).Seconds()))
	}
	rs := runtimeapi.NewRuntimeServiceClient(c.client.Conn().(*grpc.ClientConn))
	_, err := rs.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: l.info.ID, Location: archive, Timeout: timeout})
	if err != nil {
		return c.checkpointError(l, err)
	}
	return nil
}

// checkpointError names why a checkpoint call failed: the node cannot take
// memory snapshots (ErrMemorySnapshotUnsupported, with containerd's and
// CRIU's own words), or something else went wrong.
func (c *Committer) checkpointError(l *liveContainer, err error) error {
	st := status.Convert(err)
	msg := st.Message()
	switch {
	case st.Code() == codes.Unimplemented:
		return fmt.Errorf("pod %s %s: %w: the node's containerd does not checkpoint containers (CRI CheckpointContainer needs containerd 2.1 or later with CRIU 4 on its PATH): %s",
			c.podRef(), l, ErrMemorySnapshotUnsupported, msg)
	case strings.Contains(msg, "CRIU binary not found"), strings.Contains(msg, "checkpointing container"):
		return fmt.Errorf("pod %s %s: %w: %s", c.podRef(), l, ErrMemorySnapshotUnsupported, msg)
	}
	return fmt.Errorf("pod %s %s: checkpointing: %w", c.podRef(), l, err)
}

// checkpointImage stores the archive of l as a checkpoint image: one
// gzipped layer holding the archive's files as they are, and on the
// manifest the annotations that make containerd's CRI restore from it.
func (c *Committer) checkpointImage(ctx context.Context, l *liveContainer, archive string) (_ *Committed, err error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("pod %s %s: %s", c.podRef(), l, fmt.Sprintf(format, a...))
	}
	cs := c.client.ContentStore()
	write := func(w io.Writer) error {
		f, err := os.Open(archive)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyBuffer(w, f, make([]byte, 1<<20))
		return err
	}
	ref := fmt.Sprintf("sandbox-checkpoint-gzip-%s-%d", l.info.ID, time.Now().UnixNano())
	layer, diffID, size, err := c.newLayer(ctx, ref, write, ocispec.MediaTypeImageLayerGzip)
	if err != nil {
		return nil, fail("compressing the checkpoint: %v", err)
	}
	defer func() {
		if err != nil {
			c.removeLayerFiles(layer)
		}
	}()
	now := time.Now().UTC()
	cfg, err := json.Marshal(ocispec.Image{
		Created:  &now,
		Platform: ocispec.Platform{Architecture: runtime.GOARCH, OS: "linux"},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
		History: []ocispec.History{{Created: &now, Comment: historyComment,
			CreatedBy: fmt.Sprintf("sandbox-checkpoint pod %s container %s", c.podRef(), l.target.Container)}},
	})
	if err != nil {
		return nil, fail("encoding image config: %v", err)
	}
	cfgDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(cfg), Size: int64(len(cfg))}
	if err := writeBlob(ctx, cs, cfgDesc, cfg, nil); err != nil {
		return nil, fail("writing config: %v", err)
	}
	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfgDesc,
		Layers:    []ocispec.Descriptor{layer},
		Annotations: map[string]string{
			AnnotationCheckpointName:     l.target.Container,
			AnnotationCRIOCheckpointName: l.target.Container,
			annotationBaseName:           l.info.Image,
		},
	}
	mdesc, err := c.saveImage(ctx, l, m, map[string]string{
		LabelSourceImage:   l.info.Image,
		LabelCommittedFrom: c.podRef() + "/" + l.target.Container,
		LabelLocalBytes:    strconv.FormatInt(size+layer.Size, 10),
		LabelSnapshotter:   l.info.Snapshotter,
	})
	if err != nil {
		return nil, fail("%v", err)
	}
	c.log.Printf("pod %s %s checkpointed as %s (manifest %s, checkpoint %d bytes, layer %d bytes)",
		c.podRef(), l, c.workingName(l.target), mdesc.Digest, size, layer.Size)
	return &Committed{Target: l.target, Manifest: mdesc, DiffSize: size, Layer: layer}, nil
}
