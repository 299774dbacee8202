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

package overlay

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/mount"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/stage"
)

// Diff runs the in-pause part of the differ; with probes applied before the
// pause, only directories made since need a second probe round.
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
			// Unreadable entries or a full disk: try containerd.
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

// probeDiff diffs the upper directory over the probe snapshot against it
// alone: a directory's probe shows through unless the directory is opaque.
func (d *Differ) probeDiff(ctx context.Context, plan *Plan, ref string) (ocispec.Descriptor, error) {
	opts := []string{"ro", "lowerdir=" + plan.upper + ":" + plan.probeMounts[0].Source}
	if _, err := os.Stat(overlayParamsDir + "/index"); err == nil {
		// With index on, mounting the container's upper again fails.
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

// probeTar builds a tar of dirs with one probe file in each.
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
	// Buffer reads, each an RPC; seek over contents.
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

// seekBuffer reads an io.ReaderAt ahead into a buffer; seeks read nothing.
type seekBuffer struct {
	ra     io.ReaderAt
	size   int64
	off    int64
	buf    []byte
	bufOff int64
}

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

// Copied reports whether the upper directory was copied rather than tarred.
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

// convertUpperTar turns whiteout devices (and hard links to them) into ".wh."
// entries and adds ".wh..wh..opq" after each opaque directory's entry.
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
