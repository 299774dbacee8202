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

// Package overlay takes a container's diff from its overlayfs upper
// directory alone, so that the pause window grows with the change and not
// with the image.
package overlay

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"path"
	"path/filepath"
	"sort"
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

// While the containers are frozen, the differ takes two small diffs:
//
//  1. the upper directory against an empty directory: every added or changed
//     entry, deletions as overlayfs whiteouts (character devices 0/0). When
//     the upper directory is readable here (a Differ's copyDir, package stage), the
//     differ copies it itself and tars the copy after the thaw; otherwise
//     containerd's diff service tars it into the content store;
//  2. an overlay of the upper directory over a probe layer holding one probe
//     file in every directory of (1), against the upper directory: the probe
//     of a directory shows through unless that directory is opaque (deleted
//     and recreated), since containerd's tar writer keeps no trusted.*
//     extended attributes.
//
// The probes of the directories the upper directory holds before the pause
// are applied then (prescan), so that inside the pause (2) runs beside
// (1), and only directories made in the meantime need a probe round after
// (1).
//
// After the thaw, whiteouts become ".wh." entries and opaque directories get
// a ".wh..wh..opq" entry: the same filesystem as containerd's walking differ
// gives, which compares the whole image.

const (
	overlayProbeName = ".sandbox-commit-opaque-probe-6f1d"
	// overlayParamsDir holds the overlay module's defaults; redirect_dir and
	// metacopy make an upper directory depend on its lower layers.
	overlayParamsDir = "/sys/module/overlay/parameters"
)

// Snapshotter is the snapshotter whose containers the differ applies to.
const Snapshotter = "overlayfs"

// Differ takes the diffs of one pod's containers.
type Differ struct {
	client *client.Client
	// copyDir, when set, is where the differ copies an upper directory
	// inside the pause, when that directory is readable here; otherwise
	// containerd tars it inside the pause.
	copyDir string
	// pod names the pod in messages.
	pod string
	log *log.Logger
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
	// probed lists the directories whose probes were applied before the
	// pause, from a scan of the upper directory then (see prescan).
	probed map[string]bool
	// copyDir, when set, receives the copy of the upper directory.
	copyDir string
}

// Upper returns the upper directory.
func (p *Plan) Upper() string { return p.upper }

// CopyDir returns where the upper directory is copied in the pause, or ""
// when containerd tars it.
func (p *Plan) CopyDir() string { return p.copyDir }

// Probed reports whether dir's probe was applied before the pause.
func (p *Plan) Probed(dir string) bool { return p.probed[dir] }

// Diff is the result of the in-pause part of the differ.
type Diff struct {
	// staged is the copy of the upper directory; when nil, upper is its tar
	// in the content store (whiteouts as devices).
	staged *stage.Upper
	upper  ocispec.Descriptor
	// opaque lists the opaque directories of upper, cleaned, without "/".
	opaque map[string]bool
}

// overlayLayout returns the upper and lower directories of an overlayfs
// snapshot's mounts, or ok=false when they are not a plain overlay.
func overlayLayout(mounts []mount.Mount) (upper string, lowers []string, ok bool) {
	if len(mounts) != 1 {
		return "", nil, false
	}
	m := mounts[0]
	switch m.Type {
	case "bind":
		// An active snapshot without a parent: the whole rootfs is upper.
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

// overlayKernelDefaultsSafe reports whether the overlay module's defaults
// keep upper directories self-contained (no redirect_dir, no metacopy). An
// unreadable parameter counts as unsafe.
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

// Plan decides, before the pause, whether the differ applies
// to a container, and prepares its probe snapshot. It returns nil, with the
// reason logged, when the walking differ must be used.
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

// prescanMaxBytes bounds the upper directories containerd scans before the
// pause: its scan copies the upper directory once more, which only pays off
// when the change is small and the probe round is a large part of the pause.
// A readable upper directory is listed directly, whatever its size.
const prescanMaxBytes = 64 << 20

// prescan applies, before the pause, the probes of the directories
// the upper directory holds now, so that inside the pause the probe diff can
// run beside the upper diff; only directories made since need a probe round
// in the pause. Any failure just leaves the probes to the pause.
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

// upperDirs lists the directories of the upper directory before the pause:
// directly when it is readable here, else from a containerd diff of it; nil
// when it is too large for that.
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

// upperRO mounts the upper directory read-only.
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

// Diff runs the in-pause part of the differ. When probes
// were applied before the pause, the probe diff runs beside the upper diff,
// and a second probe round is needed only for directories made since.
func (d *Differ) Diff(ctx context.Context, l *freeze.Container, plan *Plan) (*Diff, error) {
	ds := d.client.DiffService()
	start := time.Now()
	defer func() {
		d.log.Printf("pod %s %s: overlay differ took %s in the pause", d.pod, l, time.Since(start).Round(time.Millisecond))
	}()
	ref := fmt.Sprintf("sandbox-commit-upper-%s-%d", l.Info.ID, time.Now().UnixNano())
	var (
		pd   ocispec.Descriptor
		perr error
		done chan struct{}
	)
	if len(plan.probed) > 0 {
		done = make(chan struct{})
		go func() {
			defer close(done)
			pd, perr = d.probeDiff(ctx, plan, ref+"-probe")
		}()
	}
	out := &Diff{opaque: map[string]bool{}}
	var (
		dirs []string
		err  error
	)
	if plan.copyDir != "" {
		out.staged, err = stage.Copy(ctx, plan.upper, plan.copyDir)
		switch {
		case err == nil:
			dirs = out.staged.Dirs()
			d.log.Printf("pod %s %s: copied the upper directory in the pause: %d entries, %d bytes in %s",
				d.pod, l, out.staged.Entries(), out.staged.Bytes(), time.Since(start).Round(time.Millisecond))
		case ctx.Err() == nil:
			// Unreadable entries or a full disk: containerd may still manage.
			d.log.Printf("pod %s %s: copying the upper directory: %v; containerd tars it instead", d.pod, l, err)
			err = nil
		}
	}
	if out.staged == nil && err == nil {
		if out.upper, err = ds.Compare(ctx, nil, plan.upperRO(), diff.WithMediaType(ocispec.MediaTypeImageLayer),
			diff.WithReference(ref)); err != nil {
			err = fmt.Errorf("diffing upper directory: %w", err)
		} else if len(plan.lowers) > 0 {
			if dirs, err = tarDirs(ctx, d.client.ContentStore(), out.upper); err != nil {
				err = fmt.Errorf("reading upper diff: %w", err)
			}
		}
	}
	if done != nil {
		<-done
	}
	if err != nil {
		return nil, err
	}
	if len(plan.lowers) == 0 || len(dirs) == 0 {
		return out, nil
	}
	var unprobed []string
	for _, dir := range dirs {
		if !plan.probed[dir] {
			unprobed = append(unprobed, dir)
		}
	}
	if len(unprobed) > 0 || perr != nil {
		if len(unprobed) > 0 {
			if err := d.applyProbes(ctx, plan, unprobed); err != nil {
				return nil, err
			}
		}
		pd, perr = d.probeDiff(ctx, plan, ref+"-probe2")
	}
	if perr != nil {
		return nil, perr
	}
	visible := map[string]bool{}
	if err := walkTarHeaders(ctx, d.client.ContentStore(), pd, func(h *tar.Header) {
		if n := oci.CleanTarName(h.Name); path.Base(n) == overlayProbeName {
			visible[path.Dir(n)] = true
		}
	}); err != nil {
		return nil, fmt.Errorf("reading probe diff: %w", err)
	}
	for _, dir := range dirs {
		if !visible[dir] {
			out.opaque[dir] = true
		}
	}
	return out, nil
}

// probeDiff diffs the upper directory laid over the probe snapshot against
// the upper directory alone: the probe of a directory shows through unless
// that directory is opaque.
func (d *Differ) probeDiff(ctx context.Context, plan *Plan, ref string) (ocispec.Descriptor, error) {
	opts := []string{"ro", "lowerdir=" + plan.upper + ":" + plan.probeMounts[0].Source}
	if _, err := os.Stat(overlayParamsDir + "/index"); err == nil {
		// The upper directory is in use by the container's mount: with the
		// index feature on, the kernel would refuse to mount it again.
		opts = append(opts, "index=off")
	}
	merged := []mount.Mount{{Type: "overlay", Source: "overlay", Options: opts}}
	pd, err := d.client.DiffService().Compare(ctx, plan.upperRO(), merged, diff.WithMediaType(ocispec.MediaTypeImageLayer),
		diff.WithReference(ref))
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("diffing probe overlay: %w", err)
	}
	return pd, nil
}

// probeTar builds a tar with every directory of dirs and one probe file in each.
func probeTar(dirs []string) ([]byte, error) {
	sort.Strings(dirs)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: d + "/" + overlayProbeName, Mode: 0o644}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// walkTarHeaders calls fn for every header of a tar blob, skipping contents.
func walkTarHeaders(ctx context.Context, cs content.Provider, d ocispec.Descriptor, fn func(*tar.Header)) error {
	ra, err := cs.ReaderAt(ctx, d)
	if err != nil {
		return err
	}
	defer ra.Close()
	// Headers are read through a buffer (each content-store read is one
	// RPC), and file contents are skipped by seeking, not read.
	tr := tar.NewReader(&seekBuffer{ra: ra, size: ra.Size(), buf: make([]byte, 0, 64<<10)})
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		fn(h)
	}
}

// seekBuffer reads an io.ReaderAt sequentially through a read-ahead buffer
// and seeks without reading.
type seekBuffer struct {
	ra     io.ReaderAt
	size   int64
	off    int64
	buf    []byte
	bufOff int64
}

// Read implements io.Reader.
func (s *seekBuffer) Read(p []byte) (int, error) {
	if s.off >= s.size {
		return 0, io.EOF
	}
	if s.off < s.bufOff || s.off >= s.bufOff+int64(len(s.buf)) {
		n, err := s.ra.ReadAt(s.buf[:min(int64(cap(s.buf)), s.size-s.off)], s.off)
		if err != nil && !(errors.Is(err, io.EOF) && n > 0) {
			return 0, err
		}
		s.buf, s.bufOff = s.buf[:n], s.off
	}
	n := copy(p, s.buf[s.off-s.bufOff:])
	s.off += int64(n)
	return n, nil
}

// Seek implements io.Seeker.
func (s *seekBuffer) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += s.off
	case io.SeekEnd:
		offset += s.size
	default:
		return 0, fmt.Errorf("seek: invalid whence %d", whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("seek: negative offset %d", offset)
	}
	s.off = offset
	return offset, nil
}

// Copied reports whether the differ copied the upper directory in the
// pause, rather than containerd tarring it.
func (od *Diff) Copied() bool { return od.staged != nil }

// Opaque lists the opaque directories of the upper directory, sorted.
func (od *Diff) Opaque() []string {
	dirs := make([]string, 0, len(od.opaque))
	for d := range od.opaque {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs
}

// WriteLayer writes the layer of the diff to w.
func (od *Diff) WriteLayer(ctx context.Context, cs content.Provider, w io.Writer) error {
	if od.staged != nil {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(od.staged.WriteTar(pw)) }()
		defer pr.Close()
		return convertUpperTar(pr, w, od.opaque)
	}
	ra, err := cs.ReaderAt(ctx, od.upper)
	if err != nil {
		return err
	}
	defer ra.Close()
	return convertUpperTar(bufio.NewReaderSize(io.NewSectionReader(ra, 0, ra.Size()), 1<<20), w, od.opaque)
}

// convertUpperTar writes the layer for an upper-directory tar: whiteout
// devices (and hard links to them) become ".wh." entries, and every opaque
// directory gets a ".wh..wh..opq" entry after its own.
func convertUpperTar(r io.Reader, w io.Writer, opaque map[string]bool) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	whiteouts := map[string]bool{}
	epoch := time.Unix(0, 0).UTC()
	marker := func(dir, base string) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(dir, base), ModTime: epoch, Format: tar.FormatPAX}
	}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		n := oci.CleanTarName(h.Name)
		isWhiteout := (h.Typeflag == tar.TypeChar && h.Devmajor == 0 && h.Devminor == 0) ||
			(h.Typeflag == tar.TypeLink && whiteouts[oci.CleanTarName(h.Linkname)])
		if isWhiteout {
			whiteouts[n] = true
			if err := tw.WriteHeader(marker(path.Dir(n), oci.WhiteoutPrefix+path.Base(n))); err != nil {
				return err
			}
			continue
		}
		h.Xattrs = nil //nolint:staticcheck // PAXRecords carries the same values
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
		}
		if h.Typeflag == tar.TypeDir && opaque[n] {
			if err := tw.WriteHeader(marker(n, oci.WhiteoutOpaque)); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}
