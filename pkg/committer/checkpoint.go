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
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/diskbudget"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/keep"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
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

// ErrMemorySnapshotUnsupported reports a container whose processes cannot
// be checkpointed and restored: a containerd older than 2.1, a runtime other
// than runc, no CRIU on containerd's PATH, a process CRIU refuses, or a base
// image containerd's restore cannot pull. Nothing is left frozen.
var ErrMemorySnapshotUnsupported = errors.New("MemorySnapshotUnsupported")

// runcRuntime is the only runtime whose checkpoint options this step sets.
const runcRuntime = "io.containerd.runc.v2"

// Checkpoint takes a memory snapshot of each target container and leaves
// each as a checkpoint archive in CheckpointDir, recorded in LayerDir, for
// the push step to build its image from (Push). It freezes all of them at
// once, as Commit does, so that they are checkpointed at one instant; the
// freeze lasts while CRIU dumps them and their filesystem changes are taken.
// It fails before freezing where anyone may pull from a target repository
// (privateTargets), the node cannot checkpoint them, a restore could pull
// neither their base images nor a restore base (restoreBases), or the
// node's disk has no room for their memory.
// CheckpointDir must be the same directory for containerd and this process;
// SweepCheckpoints, run first, frees what runs that are over left in it.
func (c *Committer) Checkpoint(ctx context.Context) (res *CommitResult, err error) {
	if c.cfg.CheckpointDir == "" || c.cfg.LayerDir == "" {
		return nil, fmt.Errorf("pod %s: a memory snapshot needs a checkpoint directory and a layer directory", c.podRef())
	}
	if err := c.privateTargets(ctx); err != nil {
		return nil, err
	}
	ctx, live, unlock, done, err := c.acquire(c.nsCtx(ctx))
	if err != nil {
		return nil, err
	}
	defer done()
	defer unlock()
	if err := c.checkpointable(ctx, live); err != nil {
		return nil, err
	}
	selfContained, err := c.restoreBases(ctx, live)
	if err != nil {
		return nil, err
	}

	preps := make([]*prepared, len(live))
	defer func() {
		for _, p := range preps {
			if p != nil {
				c.differ().Release(ctx, p.live, p.overlay)
			}
		}
	}()
	// The archives stay for the push step, which removes them; a failed
	// checkpoint leaves none, nor does a signal (Discard).
	archives := make([]*checkpointRecord, len(live))
	for i, l := range live {
		archives[i] = &checkpointRecord{Archive: archiveName(c.cfg.Params.TaskPodUID, c.cfg.Params.RunID, l.Target.Container)}
		c.own(l.Target, archives[i])
	}
	defer func() {
		if err != nil {
			for i, l := range live {
				c.removeCheckpoint(l.Target, archives[i])
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
			return nil, fmt.Errorf("pod %s %s: %w", c.podRef(), l, err)
		}
		preps[i] = &prepared{live: l, overlay: plan}
	}
	if err := c.checkRoom(ctx, preps, true); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.releaseRoom()
		}
	}()
	res = &CommitResult{}
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
				errs[i] = c.dump(pctx, l, c.archiveDir(archives[i]))
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
	for i, p := range preps {
		ci, err := c.completeArchive(ctx, p, archives[i], at)
		if err != nil {
			return nil, err
		}
		res.Images = append(res.Images, *ci)
	}
	return res, nil
}

// checkpointable fails with ErrMemorySnapshotUnsupported, before anything
// is frozen, when the node's containerd cannot restore what this step
// writes through the pod creation OpenSandbox's resume makes (before 2.1;
// 2.2 and 2.3 with restore through CreateContainer turned off; 2.4 and
// later, which restore only through the kubelet's RestorePod) or a
// container's runtime is not runc.
func (c *Committer) checkpointable(ctx context.Context, live []*freeze.Container) error {
	v, err := c.client.Version(ctx)
	if err != nil {
		return fmt.Errorf("pod %s: containerd's version: %w", c.podRef(), err)
	}
	major, minor, ok := majorMinor(v.Version)
	switch {
	case !ok || major < 2 || major == 2 && minor < 1:
		return fmt.Errorf("pod %s: %w: the node's containerd is %s; restoring a memory snapshot needs containerd 2.1 or later (with CRIU 4 on its PATH)",
			c.podRef(), ErrMemorySnapshotUnsupported, v.Version)
	case major > 2 || minor >= 4:
		return fmt.Errorf("pod %s: %w: the node's containerd is %s, which restores a checkpoint only through the kubelet's RestorePod, not when a pod is created from its image as OpenSandbox's resume does; memory snapshots need containerd 2.1 to 2.3",
			c.podRef(), ErrMemorySnapshotUnsupported, v.Version)
	case minor >= 2:
		off, err := c.restoreViaCreateOff(ctx)
		if err != nil {
			c.log.Printf("pod %s: not checked that containerd %s restores through CreateContainer: %v", c.podRef(), v.Version, err)
		} else if off {
			return fmt.Errorf("pod %s: %w: the node's containerd %s restores a checkpoint when a pod is created from its image only with enable_experimental_restore_via_create = true in its CRI configuration",
				c.podRef(), ErrMemorySnapshotUnsupported, v.Version)
		}
	}
	for _, l := range live {
		if l.Info.Runtime.Name != runcRuntime {
			return fmt.Errorf("pod %s %s: %w: its runtime is %s; memory snapshots need %s", c.podRef(), l, ErrMemorySnapshotUnsupported, l.Info.Runtime.Name, runcRuntime)
		}
	}
	return nil
}

// restoreViaCreateOff reports whether the CRI's configuration, as its
// verbose status shows it, turns restore through CreateContainer off:
// containerd 2.2.7 and 2.3.4 brought the setting, off unless set; earlier
// 2.2 and 2.3 releases have none, and restore.
func (c *Committer) restoreViaCreateOff(ctx context.Context) (bool, error) {
	rs := runtimeapi.NewRuntimeServiceClient(c.client.Conn().(*grpc.ClientConn))
	r, err := rs.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return false, fmt.Errorf("the CRI's status: %w", err)
	}
	var cfg struct {
		RestoreViaCreate *bool `json:"enableExperimentalRestoreViaCreate"`
	}
	if err := json.Unmarshal([]byte(r.GetInfo()["config"]), &cfg); err != nil {
		return false, fmt.Errorf("the CRI's configuration: %w", err)
	}
	return cfg.RestoreViaCreate != nil && !*cfg.RestoreViaCreate, nil
}

var versionRE = regexp.MustCompile(`^v?(\d+)\.(\d+)`)

// majorMinor reads the major and minor numbers of a containerd version, as
// "v2.1.3" or Debian's "1.6.20~ds1".
func majorMinor(v string) (major, minor int, ok bool) {
	m := versionRE.FindStringSubmatch(v)
	if m == nil {
		return 0, 0, false
	}
	major, _ = strconv.Atoi(m[1])
	minor, _ = strconv.Atoi(m[2])
	return major, minor, true
}

// dump has CRIU dump l, frozen, through containerd's task API into dir's
// checkpoint directory, with its log and statistics in dir, as containerd's
// CRI does into the container's own directory. The container runs on.
func (c *Committer) dump(ctx context.Context, l *freeze.Container, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("pod %s %s: removing an earlier attempt's checkpoint: %w", c.podRef(), l, err)
	}
	images := filepath.Join(dir, crmetadata.CheckpointDirectory)
	if err := os.MkdirAll(images, 0o700); err != nil {
		return fmt.Errorf("pod %s %s: %w", c.podRef(), l, err)
	}
	start := time.Now()
	_, err := l.Task.Checkpoint(ctx, func(info *client.CheckpointTaskInfo) error {
		info.Options = &options.CheckpointOptions{ImagePath: images, WorkPath: dir}
		return nil
	})
	if err != nil {
		if full, free := dumpFull(dir); full {
			return fmt.Errorf("pod %s %s: %w: checkpoint-dir %s filled up while CRIU dumped (%s free): %v", c.podRef(), l, diskbudget.ErrNoRoom, c.cfg.CheckpointDir, diskbudget.Size(free), err)
		}
		return c.checkpointError(l, err)
	}
	c.log.Printf("pod %s %s: CRIU dumped it in %s", c.podRef(), l, time.Since(start).Round(time.Millisecond))
	return nil
}

// checkpointError names why a checkpoint failed: CRIU could not dump the
// container (ErrMemorySnapshotUnsupported, with runc's and CRIU's own words:
// no CRIU, or a process it refuses), or something else went wrong.
func (c *Committer) checkpointError(l *freeze.Container, err error) error {
	if strings.Contains(strings.ToLower(err.Error()), "criu") {
		return fmt.Errorf("pod %s %s: %w: %v", c.podRef(), l, ErrMemorySnapshotUnsupported, err)
	}
	return fmt.Errorf("pod %s %s: checkpointing: %w", c.podRef(), l, err)
}

// completeArchive completes the checkpoint archive rec names, where CRIU's
// dump is (taken when the containers were frozen, at), and leaves rec for
// the push step, which builds the checkpoint image from it
// (buildCheckpoint): one layer holding the archive's files (zstd where that
// pays, checkpointLayerType), and on the manifest the annotations that make
// containerd's CRI restore from it.
func (c *Committer) completeArchive(ctx context.Context, p *prepared, rec *checkpointRecord, at time.Time) (*Committed, error) {
	l, dir := p.live, c.archiveDir(rec)
	fail := func(format string, a ...any) error {
		return fmt.Errorf("pod %s %s: %s", c.podRef(), l, fmt.Sprintf(format, a...))
	}
	st, err := c.criStatus(ctx, l)
	if err != nil {
		return nil, fail("%v", err)
	}
	// The image a restore pulls before it restores (config.dump's
	// RootfsImageRef): it must stay in its registry while this one may be
	// resumed.
	restoreName, restoreRef := st.GetImage().GetImage(), st.GetImageRef()
	if p.selfContained {
		restoreName, restoreRef = c.cfg.MemoryRestoreBase, c.cfg.MemoryRestoreBase
	}
	if err := c.writeDumps(l, st, dir, at, restoreName, restoreRef); err != nil {
		return nil, fail("%v", err)
	}
	if err := c.writeRootfsDiff(ctx, p, filepath.Join(dir, crmetadata.RootFsDiffTar)); err != nil {
		return nil, fail("writing the filesystem change: %v", err)
	}
	if err := restrictArchive(dir); err != nil {
		return nil, fail("leaving the checkpoint %s to root alone: %v", dir, err)
	}
	mediaType, size, err := checkpointLayerType(dir)
	if err != nil {
		return nil, fail("sampling the checkpoint: %v", err)
	}
	rec.MediaType, rec.Created = mediaType, at.UTC()
	rec.CreatedBy = fmt.Sprintf("sandbox-checkpoint pod %s container %s", c.podRef(), l.Target.Container)
	rec.Annotations = map[string]string{
		task.AnnotationCheckpointName:     l.Target.Container,
		task.AnnotationCRIOCheckpointName: l.Target.Container,
		ocispec.AnnotationBaseImageName:   restoreName,
	}
	rec.Labels = map[string]string{
		LabelSourceImage:      l.Info.Image,
		LabelCommittedFrom:    c.podRef() + "/" + l.Target.Container,
		keep.LabelSnapshotter: l.Info.Snapshotter,
	}
	if _, d, ok := strings.Cut(restoreRef, "@"); ok && digest.Digest(d).Validate() == nil {
		rec.Annotations[ocispec.AnnotationBaseImageDigest] = d
	}
	if err := c.writeCheckpointRecord(l.Target, rec); err != nil {
		return nil, fail("leaving the checkpoint's record for the push step: %v", err)
	}
	c.log.Printf("pod %s %s checkpointed (archive %s, %d bytes; its %s layer is built as it is pushed)",
		c.podRef(), l, dir, size, mediaType)
	return &Committed{Target: l.Target, DiffSize: size, Layer: ocispec.Descriptor{MediaType: mediaType}}, nil
}

// writeDumps writes the files containerd's CRI restore reads besides CRIU's
// dump, as its CheckpointContainer writes them: the OCI spec (spec.dump),
// the CRI's view of the container (config.dump), naming the image a
// restore starts from (restoreName, pinned as restoreRef), and its CRI
// status st (status.dump), which the restored container's metadata comes
// from.
func (c *Committer) writeDumps(l *freeze.Container, st *runtimeapi.ContainerStatus, dir string, at time.Time, restoreName, restoreRef string) error {
	if l.Info.Spec == nil {
		return errors.New("the container has no spec")
	}
	status, err := json.Marshal(st)
	if err != nil {
		return err
	}
	config, err := json.Marshal(&crmetadata.ContainerConfig{
		ID:              l.Info.ID,
		Name:            st.GetMetadata().GetName(),
		RootfsImageName: restoreName,
		RootfsImageRef:  restoreRef,
		OCIRuntime:      l.Info.Runtime.Name,
		RootfsImage:     st.GetImage().GetImage(),
		CheckpointedAt:  at,
		CreatedTime:     l.Info.CreatedAt,
	})
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{
		crmetadata.SpecDumpFile:   l.Info.Spec.GetValue(),
		crmetadata.ConfigDumpFile: config,
		crmetadata.StatusDumpFile: status,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// criStatus returns the CRI's status of container l.
func (c *Committer) criStatus(ctx context.Context, l *freeze.Container) (*runtimeapi.ContainerStatus, error) {
	rs := runtimeapi.NewRuntimeServiceClient(c.client.Conn().(*grpc.ClientConn))
	r, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: l.Info.ID})
	if err != nil {
		return nil, fmt.Errorf("the container's CRI status: %w", err)
	}
	return r.GetStatus(), nil
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
		if write, err = c.squashedWrite(ctx, p, len(p.manifest.Layers), c.scratchDir(), write); err != nil {
			return fmt.Errorf("reading the base image's layers: %w", err)
		}
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	return errors.Join(write(f), f.Close())
}

// A checkpoint is sampled before its layer is written: sampleWindows
// windows of sampleWindow bytes, spread evenly through its files' bytes.
const (
	sampleWindows = 64
	sampleWindow  = 64 << 10
)

// minZstdSaving is the part of a checkpoint's sample that zstd must save for
// its layer to be compressed. Below it, zstd and the hash of its output
// would about double the CPU the layer takes, for a few percent less to
// push.
const minZstdSaving = 0.10

// checkpointLayerType returns the media type of the layer of the checkpoint
// archive in dir, and the bytes of its files: zstd when it compresses a
// sample of the archive's files by at least minZstdSaving, else a plain tar.
// Memory may not compress (random, compressed or encrypted data), and then
// a plain tar is written in half the time.
func checkpointLayerType(dir string) (string, int64, error) {
	saving, size, err := zstdSaving(dir)
	if err != nil {
		return "", 0, err
	}
	if saving < minZstdSaving {
		return ocispec.MediaTypeImageLayer, size, nil
	}
	return ocispec.MediaTypeImageLayerZstd, size, nil
}

// zstdSaving returns the part of its size that zstd, at its fastest level,
// saves on a sample of the regular files under dir (0 when they are empty),
// and the bytes of those files.
func zstdSaving(dir string) (float64, int64, error) {
	type file struct {
		path string
		size int64
	}
	var files []file
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, file{p, fi.Size()})
		total += fi.Size()
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return 0, 0, err
	}
	defer enc.Close()
	buf := make([]byte, sampleWindow)
	var sampled, compressed int64
	// The files laid end to end, window i starts at byte i*total/sampleWindows
	// and ends at its file's end at the latest.
	i, start := 0, int64(0)
	at := func() int64 { return int64(i) * total / sampleWindows }
	for _, fl := range files {
		if i < sampleWindows && at() < start+fl.size {
			f, err := os.Open(fl.path)
			if err != nil {
				return 0, 0, err
			}
			for ; i < sampleWindows && at() < start+fl.size; i++ {
				n, err := f.ReadAt(buf, at()-start)
				if err != nil && !errors.Is(err, io.EOF) {
					f.Close()
					return 0, 0, err
				}
				sampled += int64(n)
				compressed += int64(len(enc.EncodeAll(buf[:n], nil)))
			}
			f.Close()
		}
		start += fl.size
	}
	if sampled == 0 {
		return 0, total, nil
	}
	return float64(sampled-compressed) / float64(sampled), total, nil
}

// tarDir writes the regular files and directories under dir to w as a tar,
// named relative to dir, owned by root.
func tarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(rel), 0, 0, "", ""
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyBuffer(tw, f, make([]byte, 1<<20))
		return err
	})
	return errors.Join(err, tw.Close())
}
