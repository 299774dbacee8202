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
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/stage"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The overlay differ takes a container's diff from its overlayfs upper
// directory alone, so that the pause window grows with the change and not
// with the image. While the containers are frozen it takes two small diffs:
//
//  1. the upper directory against an empty directory: every added or changed
//     entry, deletions as overlayfs whiteouts (character devices 0/0). When
//     the upper directory is readable here (Config.CopyDir, stage.go), the
//     committer copies it itself and tars the copy after the thaw; otherwise
//     containerd's diff service tars it into the content store;
//  2. an overlay of the upper directory over a probe layer holding one probe
//     file in every directory of (1), against the upper directory: the probe
//     of a directory shows through unless that directory is opaque (deleted
//     and recreated), since containerd's tar writer keeps no trusted.*
//     extended attributes.
//
// The probes of the directories the upper directory holds before the pause
// are applied then (prescanOverlay), so that inside the pause (2) runs beside
// (1), and only directories made in the meantime need a probe round after
// (1).
//
// After the thaw, whiteouts become ".wh." entries and opaque directories get
// a ".wh..wh..opq" entry: the same filesystem as containerd's walking differ
// gives, which compares the whole image.

const (
	overlayProbeName = ".sandbox-commit-opaque-probe-6f1d"
	snapshotterOvl   = "overlayfs"
	// overlayParamsDir holds the overlay module's defaults; redirect_dir and
	// metacopy make an upper directory depend on its lower layers.
	overlayParamsDir = "/sys/module/overlay/parameters"
)

// overlayPlan is what the overlay differ needs, all read before the pause.
type overlayPlan struct {
	upper  string
	lowers []string
	// probeKey is an empty active snapshot the probe layer is applied to.
	probeKey    string
	probeMounts []mount.Mount
	// probed lists the directories whose probes were applied before the
	// pause, from a scan of the upper directory then (see prescanOverlay).
	probed map[string]bool
	// copyDir, when set, receives the copy of the upper directory.
	copyDir string
}

// overlayDiff is the result of the in-pause part of the overlay differ.
type overlayDiff struct {
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

// planOverlay decides, before the pause, whether the overlay differ applies
// to a container, and prepares its probe snapshot. It returns nil, with the
// reason logged, when the walking differ must be used.
func (c *Committer) planOverlay(ctx context.Context, l *liveContainer) (*overlayPlan, error) {
	if l.info.Snapshotter != snapshotterOvl || c.cfg.WalkingDiffer {
		return nil, nil
	}
	sn := c.client.SnapshotService(l.info.Snapshotter)
	mounts, err := sn.Mounts(ctx, l.info.SnapshotKey)
	if err != nil {
		return nil, fmt.Errorf("mounts of snapshot %s: %w", l.info.SnapshotKey, err)
	}
	upper, lowers, ok := overlayLayout(mounts)
	if !ok {
		c.log.Printf("pod %s %s: snapshot mounts are not a plain overlay; using the walking differ", c.podRef(), l)
		return nil, nil
	}
	if err := overlayKernelDefaultsSafe(); err != nil {
		c.log.Printf("pod %s %s: %v; using the walking differ", c.podRef(), l, err)
		return nil, nil
	}
	plan := &overlayPlan{upper: upper, lowers: lowers}
	if c.cfg.CopyDir != "" {
		if fi, err := os.Stat(upper); err != nil || !fi.IsDir() {
			if err == nil {
				err = fmt.Errorf("%s is not a directory", upper)
			}
			c.log.Printf("pod %s %s: upper directory not visible here (%v); containerd tars it in the pause", c.podRef(), l, err)
		} else if plan.copyDir, err = os.MkdirTemp(c.cfg.CopyDir, "upper-"+shortID(l.info.ID)+"-"); err != nil {
			return nil, fmt.Errorf("making a directory for the copy of the upper directory: %w", err)
		}
	}
	if len(lowers) == 0 {
		return plan, nil
	}
	plan.probeKey = fmt.Sprintf("sandbox-commit-probe-%s-%d", l.info.ID, time.Now().UnixNano())
	plan.probeMounts, err = sn.Prepare(ctx, plan.probeKey, "")
	if err != nil {
		plan.probeKey = ""
		c.releasePlan(ctx, l, plan)
		return nil, fmt.Errorf("preparing probe snapshot: %w", err)
	}
	if len(plan.probeMounts) != 1 || plan.probeMounts[0].Type != "bind" {
		c.releasePlan(ctx, l, plan)
		c.log.Printf("pod %s %s: unexpected probe snapshot mounts; using the walking differ", c.podRef(), l)
		return nil, nil
	}
	c.prescanOverlay(ctx, l, plan)
	return plan, nil
}

// prescanMaxBytes bounds the upper directories containerd scans before the
// pause: its scan copies the upper directory once more, which only pays off
// when the change is small and the probe round is a large part of the pause.
// A readable upper directory is listed directly, whatever its size.
const prescanMaxBytes = 64 << 20

// prescanOverlay applies, before the pause, the probes of the directories
// the upper directory holds now, so that inside the pause the probe diff can
// run beside the upper diff; only directories made since need a probe round
// in the pause. Any failure just leaves the probes to the pause.
func (c *Committer) prescanOverlay(ctx context.Context, l *liveContainer, plan *overlayPlan) {
	dirs, err := c.upperDirs(ctx, l, plan)
	if err == nil && len(dirs) > 0 {
		err = c.applyProbes(ctx, plan, dirs)
	}
	if err != nil {
		c.log.Printf("pod %s %s: probing the upper directory before the pause: %v", c.podRef(), l, err)
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
func (c *Committer) upperDirs(ctx context.Context, l *liveContainer, plan *overlayPlan) ([]string, error) {
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
	sn := c.client.SnapshotService(l.info.Snapshotter)
	if u, err := sn.Usage(ctx, l.info.SnapshotKey); err != nil || u.Size > prescanMaxBytes {
		return nil, err
	}
	ref := fmt.Sprintf("sandbox-commit-prescan-%s-%d", l.info.ID, time.Now().UnixNano())
	d, err := c.client.DiffService().Compare(ctx, nil, plan.upperRO(), diff.WithMediaType(ocispec.MediaTypeImageLayer), diff.WithReference(ref))
	if err != nil {
		return nil, err
	}
	return tarDirs(ctx, c.client.ContentStore(), d)
}

// upperRO mounts the upper directory read-only.
func (p *overlayPlan) upperRO() []mount.Mount {
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
func (c *Committer) applyProbes(ctx context.Context, plan *overlayPlan, dirs []string) error {
	probe, err := probeTar(dirs)
	if err != nil {
		return err
	}
	pdesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(probe), Size: int64(len(probe))}
	if err := oci.WriteBlob(ctx, c.client.ContentStore(), pdesc, probe, nil); err != nil {
		return fmt.Errorf("writing probe layer: %w", err)
	}
	if _, err := c.client.DiffService().Apply(ctx, pdesc, plan.probeMounts); err != nil {
		return fmt.Errorf("applying probe layer: %w", err)
	}
	return nil
}

// releasePlan removes the probe snapshot and the copy of a plan, if any.
func (c *Committer) releasePlan(ctx context.Context, l *liveContainer, plan *overlayPlan) {
	if plan == nil {
		return
	}
	if plan.copyDir != "" {
		if err := os.RemoveAll(plan.copyDir); err != nil {
			c.log.Printf("pod %s %s: removing the copy of the upper directory: %v", c.podRef(), l, err)
		}
		plan.copyDir = ""
	}
	if plan.probeKey == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := c.client.SnapshotService(l.info.Snapshotter).Remove(ctx, plan.probeKey); err != nil {
		c.log.Printf("pod %s %s: removing probe snapshot %s: %v", c.podRef(), l, plan.probeKey, err)
	}
	plan.probeKey = ""
}

// diffOverlay runs the in-pause part of the overlay differ. When probes
// were applied before the pause, the probe diff runs beside the upper diff,
// and a second probe round is needed only for directories made since.
func (c *Committer) diffOverlay(ctx context.Context, l *liveContainer, plan *overlayPlan) (*overlayDiff, error) {
	ds := c.client.DiffService()
	start := time.Now()
	defer func() {
		c.log.Printf("pod %s %s: overlay differ took %s in the pause", c.podRef(), l, time.Since(start).Round(time.Millisecond))
	}()
	ref := fmt.Sprintf("sandbox-commit-upper-%s-%d", l.info.ID, time.Now().UnixNano())
	var (
		pd   ocispec.Descriptor
		perr error
		done chan struct{}
	)
	if len(plan.probed) > 0 {
		done = make(chan struct{})
		go func() {
			defer close(done)
			pd, perr = c.probeDiff(ctx, plan, ref+"-probe")
		}()
	}
	out := &overlayDiff{opaque: map[string]bool{}}
	var (
		dirs []string
		err  error
	)
	if plan.copyDir != "" {
		out.staged, err = stage.Copy(ctx, plan.upper, plan.copyDir)
		switch {
		case err == nil:
			dirs = out.staged.Dirs()
			c.log.Printf("pod %s %s: copied the upper directory in the pause: %d entries, %d bytes in %s",
				c.podRef(), l, out.staged.Entries(), out.staged.Bytes(), time.Since(start).Round(time.Millisecond))
		case ctx.Err() == nil:
			// Unreadable entries or a full disk: containerd may still manage.
			c.log.Printf("pod %s %s: copying the upper directory: %v; containerd tars it instead", c.podRef(), l, err)
			err = nil
		}
	}
	if out.staged == nil && err == nil {
		if out.upper, err = ds.Compare(ctx, nil, plan.upperRO(), diff.WithMediaType(ocispec.MediaTypeImageLayer),
			diff.WithReference(ref)); err != nil {
			err = fmt.Errorf("diffing upper directory: %w", err)
		} else if len(plan.lowers) > 0 {
			if dirs, err = tarDirs(ctx, c.client.ContentStore(), out.upper); err != nil {
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
			if err := c.applyProbes(ctx, plan, unprobed); err != nil {
				return nil, err
			}
		}
		pd, perr = c.probeDiff(ctx, plan, ref+"-probe2")
	}
	if perr != nil {
		return nil, perr
	}
	visible := map[string]bool{}
	if err := walkTarHeaders(ctx, c.client.ContentStore(), pd, func(h *tar.Header) {
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
func (c *Committer) probeDiff(ctx context.Context, plan *overlayPlan, ref string) (ocispec.Descriptor, error) {
	opts := []string{"ro", "lowerdir=" + plan.upper + ":" + plan.probeMounts[0].Source}
	if _, err := os.Stat(overlayParamsDir + "/index"); err == nil {
		// The upper directory is in use by the container's mount: with the
		// index feature on, the kernel would refuse to mount it again.
		opts = append(opts, "index=off")
	}
	merged := []mount.Mount{{Type: "overlay", Source: "overlay", Options: opts}}
	pd, err := c.client.DiffService().Compare(ctx, plan.upperRO(), merged, diff.WithMediaType(ocispec.MediaTypeImageLayer),
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

// writeLayer writes the layer of an overlay diff to w.
func (od *overlayDiff) writeLayer(ctx context.Context, cs content.Provider, w io.Writer) error {
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
