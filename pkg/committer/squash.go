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
	"os"
	"path"
	"sort"
	"strings"

	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Each commit appends one layer, and OpenSandbox resumes from the image the
// last pause pushed, so a sandbox paused and resumed N times sits on N
// layers of its own: every pull, resume and the registry grow with N, and
// overlayfs refuses more than 500 lower directories. Past max-layers a
// commit squashes the sandbox's own layers and its new change into one,
// after the thaw, on top of the sandbox's original base, whose layers stay
// shared.

// squashedEntry is one entry of a squashed layer.
type squashedEntry struct {
	hdr *tar.Header
	// off is where the entry's content starts in the staging file, for a
	// regular file of non-zero size.
	off int64
}

// layerSource opens the uncompressed tar of one layer; it may be opened
// more than once.
type layerSource func() (io.ReadCloser, error)

// squashLayers writes to w, as an uncompressed tar, one layer whose
// application on any base gives the same file system as applying layers in
// order (bottom first): for each path the entry of the topmost layer that
// has it; whiteouts and opaque directories of upper layers hiding the
// entries below them, and kept themselves where they may hide something of
// the base; a hardlink kept where its target comes from its own layer, and
// made a regular file with that target's content where an upper layer
// replaced or removed the target. Contents are staged in one file in dir
// before the tar is written, sorted by name, hardlinks last.
func squashLayers(layers []layerSource, dir string, w io.Writer) error {
	stage, err := os.CreateTemp(dir, "squash-")
	if err != nil {
		return err
	}
	defer os.Remove(stage.Name())
	defer stage.Close()
	s := &squasher{stage: stage, decided: map[string]bool{}, hidden: map[string]bool{}, opaque: map[string]bool{}, dirs: map[string]bool{}}
	for k := len(layers) - 1; k >= 0; k-- {
		// A layer is read once, unless it has a hardlink whose target an
		// upper layer replaced: the content the link keeps went by before
		// it, and the layer is read again, keeping it.
		var capture map[string]bool
		for {
			mark := len(s.out)
			missed, err := s.layer(layers[k], capture)
			if err != nil {
				return fmt.Errorf("layer %d: %w", k, err)
			}
			if len(missed) == 0 {
				break
			}
			s.out, capture = s.out[:mark], missed
		}
	}
	return writeSquashed(s.out, stage, w)
}

// squasher merges layers, the topmost first, into the entries of one.
type squasher struct {
	// stage holds the contents of the entries, size bytes so far.
	stage *os.File
	size  int64
	out   []squashedEntry
	// decided holds the paths an upper layer emitted or removed.
	decided map[string]bool
	// hidden holds the paths whose subtree an upper layer removed, and
	// opaque the directories whose lower children it hid.
	hidden, opaque map[string]bool
	// dirs holds the paths an upper layer made directories.
	dirs map[string]bool
}

// covered reports whether an upper layer hid name with one of its parents.
func (s *squasher) covered(name string) bool {
	for p := path.Dir(name); p != "." && p != "/"; p = path.Dir(p) {
		if s.hidden[p] || s.opaque[p] {
			return true
		}
	}
	return false
}

// stageContent appends an entry's content to the stage file and returns
// where it starts.
func (s *squasher) stageContent(hdr *tar.Header, r io.Reader) (int64, error) {
	off := s.size
	n, err := io.Copy(s.stage, io.LimitReader(r, hdr.Size))
	if err == nil && n != hdr.Size {
		err = fmt.Errorf("%s: %d bytes, want %d", hdr.Name, n, hdr.Size)
	}
	s.size += n
	return off, err
}

// layer merges a layer under the upper layers merged so far, keeping the
// content of the paths in capture that it has but an upper layer decided.
// It returns, changing nothing then, the targets of its hardlinks whose
// content it needs to keep and was not asked to.
func (s *squasher) layer(src layerSource, capture map[string]bool) (map[string]bool, error) {
	decided := map[string]bool{}
	hidden := map[string]bool{}
	opaque := map[string]bool{}
	captured := map[string]squashedEntry{}
	emitted := map[string]bool{}
	dirs := map[string]bool{}
	materialized := map[string]string{}
	missed := map[string]bool{}
	err := walkLayer(src, func(hdr *tar.Header, r io.Reader) error {
		name := cleanTarName(hdr.Name)
		// An entry gone above whose content a hardlink of this layer keeps.
		keep := func() error {
			if !capture[name] || hdr.Typeflag != tar.TypeReg {
				return nil
			}
			off, err := s.stageContent(hdr, r)
			captured[name] = squashedEntry{hdr: hdr, off: off}
			return err
		}
		if name == "" {
			return nil
		}
		if s.covered(name) {
			return keep()
		}
		base, parent := path.Base(name), path.Dir(name)
		switch {
		case base == whiteoutOpaque:
			if !s.opaque[parent] && !s.hidden[parent] {
				s.out = append(s.out, squashedEntry{hdr: hdr})
				opaque[parent] = true
			}
			return nil
		case strings.HasPrefix(base, whiteoutPrefix):
			target := path.Join(parent, strings.TrimPrefix(base, whiteoutPrefix))
			switch {
			case !s.decided[target]:
				s.out = append(s.out, squashedEntry{hdr: hdr})
				decided[target] = true
			case s.dirs[target] && !s.opaque[target]:
				// Removed, then made a directory again above: what the
				// base holds there stays removed.
				s.out = append(s.out, opaqueMarker(hdr, target))
				opaque[target] = true
			}
			hidden[target] = true
			return nil
		case s.decided[name]:
			if hdr.Typeflag != tar.TypeDir {
				// What was under name went when this file took its
				// place, also where a directory came back above.
				hidden[name] = true
				if s.dirs[name] && !s.opaque[name] {
					s.out = append(s.out, opaqueMarker(hdr, name))
					opaque[name] = true
				}
			}
			return keep()
		}
		e := squashedEntry{hdr: hdr}
		if hdr.Typeflag == tar.TypeLink {
			target := cleanTarName(hdr.Linkname)
			switch first, ok := materialized[target]; {
			case emitted[target]:
			case ok:
				t := *hdr
				t.Linkname = first
				e.hdr = &t
			default:
				c, ok := captured[target]
				if !ok && capture == nil {
					missed[target] = true
					return nil
				}
				if !ok {
					return fmt.Errorf("hardlink %s: its target %s is not in the layer before it", name, target)
				}
				// Its target was replaced or removed above: a file of its
				// own, with the target's content in this layer, which the
				// target's other links share.
				t := *c.hdr
				t.Name = hdr.Name
				e = squashedEntry{hdr: &t, off: c.off}
				materialized[target] = name
			}
		} else if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			off, err := s.stageContent(hdr, r)
			if err != nil {
				return err
			}
			e.off = off
			if capture[name] {
				captured[name] = e
			}
		}
		s.out = append(s.out, e)
		emitted[name] = true
		decided[name] = true
		if hdr.Typeflag == tar.TypeDir {
			dirs[name] = true
		} else {
			// A file where a directory was: what lower layers put under
			// it is gone.
			hidden[name] = true
		}
		return nil
	})
	if err != nil || len(missed) > 0 {
		return missed, err
	}
	for p := range decided {
		s.decided[p] = true
	}
	for p := range hidden {
		s.hidden[p] = true
	}
	for p := range opaque {
		s.opaque[p] = true
	}
	for p := range dirs {
		s.dirs[p] = true
	}
	return nil, nil
}

// opaqueMarker is the entry that makes directory dir opaque, from hdr.
func opaqueMarker(hdr *tar.Header, dir string) squashedEntry {
	return squashedEntry{hdr: &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(dir, whiteoutOpaque),
		Mode: 0o644, ModTime: hdr.ModTime, Format: tar.FormatPAX}}
}

// walkLayer reads a layer's tar, calling fn for each entry with a reader of
// its content, then reads the stream to its end, where a layerSource
// checks it.
func walkLayer(open layerSource, fn func(*tar.Header, io.Reader) error) error {
	rc, err := open()
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			_, err = io.Copy(io.Discard, rc)
			return err
		}
		if err != nil {
			return err
		}
		if err := fn(hdr, tr); err != nil {
			return err
		}
	}
}

// writeSquashed writes the entries as a tar, contents from stage: sorted by
// name, so that a directory comes before what it holds, an opaque marker
// first in its directory (an applier that unpacks entries in order removes,
// at the marker, what the layer has not unpacked yet), and hardlinks last,
// after their targets.
func writeSquashed(entries []squashedEntry, stage *os.File, w io.Writer) error {
	key := func(e squashedEntry) string {
		return strings.Replace(cleanTarName(e.hdr.Name), "/"+whiteoutOpaque, "/\x00", 1)
	}
	sort.SliceStable(entries, func(i, j int) bool {
		li, lj := entries[i].hdr.Typeflag == tar.TypeLink, entries[j].hdr.Typeflag == tar.TypeLink
		if li != lj {
			return lj
		}
		return key(entries[i]) < key(entries[j])
	})
	tw := tar.NewWriter(w)
	buf := make([]byte, 1<<20)
	for _, e := range entries {
		if err := tw.WriteHeader(e.hdr); err != nil {
			return err
		}
		if e.hdr.Typeflag != tar.TypeReg || e.hdr.Size == 0 {
			continue
		}
		if _, err := io.CopyBuffer(tw, io.NewSectionReader(stage, e.off, e.hdr.Size), buf); err != nil {
			return err
		}
	}
	return tw.Close()
}

// ownLayers is how many of an image's last layers earlier commits of this
// committer added: the trailing history entries it wrote, when the config's
// diff IDs are the manifest's layers (0 otherwise, and nothing is squashed).
func ownLayers(cfg map[string]json.RawMessage, layers int) int {
	var img struct {
		RootFS  ocispec.RootFS    `json:"rootfs"`
		History []ocispec.History `json:"history"`
	}
	for k, v := range map[string]any{"rootfs": &img.RootFS, "history": &img.History} {
		if raw, ok := cfg[k]; ok {
			if err := json.Unmarshal(raw, v); err != nil {
				return 0
			}
		}
	}
	if len(img.RootFS.DiffIDs) != layers {
		return 0
	}
	n := 0
	for i := len(img.History) - 1; i >= 0 && n < layers; i-- {
		if h := img.History[i]; h.Comment != historyComment || h.EmptyLayer {
			break
		}
		n++
	}
	return n
}

// squashedWrite returns what writes the layer of a commit that squashes the
// last n layers of its base image (earlier commits) and its change into
// one: those layers read from containerd's content store, else from the
// base image's repositories, each checked against its diff ID, then change
// on top. Contents are staged in dir.
func (c *Committer) squashedWrite(ctx context.Context, p *prepared, n int, dir string, change func(io.Writer) error) (func(io.Writer) error, error) {
	var rfs ocispec.RootFS
	if err := json.Unmarshal(p.config["rootfs"], &rfs); err != nil {
		return nil, fmt.Errorf("rootfs: %w", err)
	}
	opts := c.remoteOptions(ctx)
	puller, err := remote.NewPuller(opts...)
	if err != nil {
		return nil, err
	}
	sources := c.sourceRepositories(strings.Join(p.sourceRepos, ","))
	first := len(p.manifest.Layers) - n
	srcs := make([]layerSource, 0, n+1)
	for i, d := range p.manifest.Layers[first:] {
		diffID := rfs.DiffIDs[first+i]
		srcs = append(srcs, func() (io.ReadCloser, error) {
			l, _, err := c.sourcedLayer(ctx, d, sources, puller)
			if err != nil {
				return nil, err
			}
			rc, err := l.Compressed()
			if err != nil {
				return nil, err
			}
			dr, err := compression.DecompressStream(rc)
			if err != nil {
				rc.Close()
				return nil, fmt.Errorf("layer %s: %w", d.Digest, err)
			}
			return &verifiedLayer{r: dr, closers: []io.Closer{dr, rc}, want: diffID, d: diffID.Algorithm().Digester()}, nil
		})
	}
	srcs = append(srcs, func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(change(pw)) }()
		return pr, nil
	})
	return func(w io.Writer) error { return squashLayers(srcs, dir, w) }, nil
}

// verifiedLayer reads an uncompressed layer, failing at its end when the
// bytes are not its diff ID.
type verifiedLayer struct {
	r       io.Reader
	closers []io.Closer
	want    digest.Digest
	d       digest.Digester
}

// Read implements io.Reader.
func (v *verifiedLayer) Read(b []byte) (int, error) {
	n, err := v.r.Read(b)
	v.d.Hash().Write(b[:n])
	if errors.Is(err, io.EOF) && v.d.Digest() != v.want {
		return n, fmt.Errorf("layer with diff ID %s read as %s", v.want, v.d.Digest())
	}
	return n, err
}

// Close implements io.Closer.
func (v *verifiedLayer) Close() error {
	var errs []error
	for _, c := range v.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// scratchDir is where a squash stages contents: the layer directory, else
// the copy directory, else the system's temporary directory.
func (c *Committer) scratchDir() string {
	for _, d := range []string{c.cfg.LayerDir, c.cfg.CopyDir} {
		if d != "" {
			return d
		}
	}
	return os.TempDir()
}
