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

// Package overlay takes a container's diff from its overlayfs upper directory
// alone, so the pause grows with the change, not the image. In the pause it
// takes two small diffs: the upper directory against an empty one (deletions
// as whiteout devices 0/0), copied by package stage if readable, else tarred by
// containerd; and the upper directory over a probe layer with one file per
// directory, to find opaque directories, since containerd's tar writer drops
// trusted.* xattrs. After the thaw they give the walking differ's layer.
package overlay

import (
	"archive/tar"
	"context"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/stage"
)

const (
	overlayProbeName = ".sandbox-commit-opaque-probe-6f1d"
	overlayParamsDir = "/sys/module/overlay/parameters"
)

// Snapshotter is the snapshotter whose containers the differ applies to.
const Snapshotter = "overlayfs"

// Differ takes the diffs of one pod's containers.
type Differ struct {
	client *client.Client
	// copyDir holds in-pause copies of upper directories; "" for none.
	copyDir string
	pod     string
	log     *log.Logger
}

// New returns a Differ of pod's containers in c.
func New(c *client.Client, copyDir, pod string, log *log.Logger) *Differ {
	return &Differ{client: c, copyDir: copyDir, pod: pod, log: log}
}

// Plan is what the differ needs, all read before the pause.
type Plan struct {
	upper  string
	lowers []string
	// probeKey is an empty active snapshot the probe layer is applied to.
	probeKey    string
	probeMounts []mount.Mount
	probed      map[string]bool
	copyDir     string
}

// Upper returns the upper directory.
func (p *Plan) Upper() string { return p.upper }

// CopyDir is where the upper directory is copied, "" if containerd tars it.
func (p *Plan) CopyDir() string { return p.copyDir }

// Probed reports whether dir's probe was applied before the pause.
func (p *Plan) Probed(dir string) bool { return p.probed[dir] }

// Diff is the result of the in-pause part of the differ.
type Diff struct {
	// staged is the upper copy; if nil, upper is containerd's tar.
	staged *stage.Upper
	upper  ocispec.Descriptor
	// opaque lists the opaque directories of upper, cleaned, without "/".
	opaque map[string]bool
}

// overlayLayout returns the upper and lower directories of a plain overlay.
func overlayLayout(mounts []mount.Mount) (upper string, lowers []string, ok bool) {
	if len(mounts) != 1 {
		return "", nil, false
	}
	m := mounts[0]
	switch m.Type {
	case "bind":
		// A snapshot without a parent: the whole rootfs is upper.
		return m.Source, nil, true
	case "overlay":
	default:
		return "", nil, false
	}
	for _, o := range m.Options {
		switch {
		case strings.HasPrefix(o, "upperdir="):
			upper = strings.TrimPrefix(o, "upperdir=")
		case strings.HasPrefix(o, "lowerdir="):
			lowers = strings.Split(strings.TrimPrefix(o, "lowerdir="), ":")
		case strings.HasPrefix(o, "redirect_dir=") && o != "redirect_dir=off",
			strings.HasPrefix(o, "metacopy=") && o != "metacopy=off",
			strings.Contains(o, "{{"):
			return "", nil, false
		}
	}
	return upper, lowers, upper != ""
}

// overlayKernelDefaultsSafe fails unless redirect_dir and metacopy, which make
// upper depend on lowers, default to off; unreadable is unsafe.
func overlayKernelDefaultsSafe() error {
	for _, p := range []string{"redirect_dir", "metacopy"} {
		b, err := os.ReadFile(overlayParamsDir + "/" + p)
		if err != nil {
			return fmt.Errorf("reading overlay parameter %s: %w", p, err)
		}
		if v := strings.TrimSpace(string(b)); v != "N" && v != "off" {
			return fmt.Errorf("overlay parameter %s is %q", p, v)
		}
	}
	return nil
}

// Plan decides before the pause whether the differ applies to a container and
// prepares its probe snapshot; nil, reason logged, means the walking differ.
func (d *Differ) Plan(ctx context.Context, l *freeze.Container) (*Plan, error) {
	if l.Info.Snapshotter != Snapshotter {
		return nil, nil
	}
	sn := d.client.SnapshotService(l.Info.Snapshotter)
	mounts, err := sn.Mounts(ctx, l.Info.SnapshotKey)
	if err != nil {
		return nil, fmt.Errorf("mounts of snapshot %s: %w", l.Info.SnapshotKey, err)
	}
	upper, lowers, ok := overlayLayout(mounts)
	if !ok {
		d.log.Printf("pod %s %s: snapshot mounts are not a plain overlay; using the walking differ", d.pod, l)
		return nil, nil
	}
	if err := overlayKernelDefaultsSafe(); err != nil {
		d.log.Printf("pod %s %s: %v; using the walking differ", d.pod, l, err)
		return nil, nil
	}
	plan := &Plan{upper: upper, lowers: lowers}
	if d.copyDir != "" {
		if fi, err := os.Stat(upper); err != nil || !fi.IsDir() {
			if err == nil {
				err = fmt.Errorf("%s is not a directory", upper)
			}
			d.log.Printf("pod %s %s: upper directory not visible here (%v); containerd tars it in the pause", d.pod, l, err)
		} else if plan.copyDir, err = os.MkdirTemp(d.copyDir, "upper-"+freeze.ShortID(l.Info.ID)+"-"); err != nil {
			return nil, fmt.Errorf("making a directory for the copy of the upper directory: %w", err)
		}
	}
	if len(lowers) == 0 {
		return plan, nil
	}
	plan.probeKey = fmt.Sprintf("sandbox-commit-probe-%s-%d", l.Info.ID, time.Now().UnixNano())
	plan.probeMounts, err = sn.Prepare(ctx, plan.probeKey, "")
	if err != nil {
		plan.probeKey = ""
		d.Release(ctx, l, plan)
		return nil, fmt.Errorf("preparing probe snapshot: %w", err)
	}
	if len(plan.probeMounts) != 1 || plan.probeMounts[0].Type != "bind" {
		d.Release(ctx, l, plan)
		d.log.Printf("pod %s %s: unexpected probe snapshot mounts; using the walking differ", d.pod, l)
		return nil, nil
	}
	d.prescan(ctx, l, plan)
	return plan, nil
}

// prescanMaxBytes bounds the unreadable upper directories containerd diffs
// before the pause: that copies them once more, worth it only when small.
const prescanMaxBytes = 64 << 20

// prescan applies the probes of the upper directory's directories before the
// pause, so the probe diff can run beside the upper diff; failure defers them.
func (d *Differ) prescan(ctx context.Context, l *freeze.Container, plan *Plan) {
	dirs, err := d.upperDirs(ctx, l, plan)
	if err == nil && len(dirs) > 0 {
		err = d.applyProbes(ctx, plan, dirs)
	}
	if err != nil {
		d.log.Printf("pod %s %s: probing the upper directory before the pause: %v", d.pod, l, err)
		return
	}
	plan.probed = map[string]bool{}
	for _, d := range dirs {
		plan.probed[d] = true
	}
}

// upperDirs lists the upper directory's directories: directly when readable
// here, else from a containerd diff; nil when it is too large for that.
func (d *Differ) upperDirs(ctx context.Context, l *freeze.Container, plan *Plan) ([]string, error) {
	if plan.copyDir != "" {
		var dirs []string
		err := filepath.WalkDir(plan.upper, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() || p == plan.upper {
				return err
			}
			rel, err := filepath.Rel(plan.upper, p)
			dirs = append(dirs, filepath.ToSlash(rel))
			return err
		})
		return dirs, err
	}
	sn := d.client.SnapshotService(l.Info.Snapshotter)
	if u, err := sn.Usage(ctx, l.Info.SnapshotKey); err != nil || u.Size > prescanMaxBytes {
		return nil, err
	}
	ref := fmt.Sprintf("sandbox-commit-prescan-%s-%d", l.Info.ID, time.Now().UnixNano())
	desc, err := d.client.DiffService().Compare(ctx, nil, plan.upperRO(), diff.WithMediaType(ocispec.MediaTypeImageLayer), diff.WithReference(ref))
	if err != nil {
		return nil, err
	}
	return tarDirs(ctx, d.client.ContentStore(), desc)
}

func (p *Plan) upperRO() []mount.Mount {
	return []mount.Mount{{Type: "bind", Source: p.upper, Options: []string{"ro", "rbind"}}}
}

// tarDirs lists the directories of a tar blob, cleaned.
func tarDirs(ctx context.Context, cs content.Provider, d ocispec.Descriptor) ([]string, error) {
	var dirs []string
	err := walkTarHeaders(ctx, cs, d, func(h *tar.Header) {
		if n := oci.CleanTarName(h.Name); h.Typeflag == tar.TypeDir && n != "" {
			dirs = append(dirs, n)
		}
	})
	return dirs, err
}

// applyProbes adds the probe files of dirs to the probe snapshot.
func (d *Differ) applyProbes(ctx context.Context, plan *Plan, dirs []string) error {
	probe, err := probeTar(dirs)
	if err != nil {
		return err
	}
	pdesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(probe), Size: int64(len(probe))}
	if err := oci.WriteBlob(ctx, d.client.ContentStore(), pdesc, probe, nil); err != nil {
		return fmt.Errorf("writing probe layer: %w", err)
	}
	if _, err := d.client.DiffService().Apply(ctx, pdesc, plan.probeMounts); err != nil {
		return fmt.Errorf("applying probe layer: %w", err)
	}
	return nil
}

// Release removes the probe snapshot and the copy of a plan, if any.
func (d *Differ) Release(ctx context.Context, l *freeze.Container, plan *Plan) {
	if plan == nil {
		return
	}
	if plan.copyDir != "" {
		if err := os.RemoveAll(plan.copyDir); err != nil {
			d.log.Printf("pod %s %s: removing the copy of the upper directory: %v", d.pod, l, err)
		}
		plan.copyDir = ""
	}
	if plan.probeKey == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.client.SnapshotService(l.Info.Snapshotter).Remove(ctx, plan.probeKey); err != nil {
		d.log.Printf("pod %s %s: removing probe snapshot %s: %v", d.pod, l, plan.probeKey, err)
	}
	plan.probeKey = ""
}
