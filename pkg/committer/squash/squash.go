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

// Package squash merges the uncompressed tars of image layers into one
// layer that gives, applied on any base, the file system the layers give
// applied in order.
package squash

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
)

// entry is one entry of a squashed layer.
type entry struct {
	hdr *tar.Header
	// off is where the entry's content starts in the staging file, for a
	// regular file of non-zero size.
	off int64
}

// Source opens the uncompressed tar of one layer; it may be opened
// more than once.
type Source func() (io.ReadCloser, error)

// Layers writes to w, as an uncompressed tar, one layer whose
// application on any base gives the same file system as applying layers in
// order (bottom first): for each path the entry of the topmost layer that
// has it; whiteouts and opaque directories of upper layers hiding the
// entries below them, and kept themselves where they may hide something of
// the base; a hardlink kept where its target comes from its own layer, and
// made a regular file with that target's content where an upper layer
// replaced or removed the target. Contents are staged in one file in dir
// before the tar is written, sorted by name, hardlinks last.
func Layers(layers []Source, dir string, w io.Writer) error {
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
	out   []entry
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
func (s *squasher) layer(src Source, capture map[string]bool) (map[string]bool, error) {
	decided := map[string]bool{}
	hidden := map[string]bool{}
	opaque := map[string]bool{}
	captured := map[string]entry{}
	emitted := map[string]bool{}
	dirs := map[string]bool{}
	materialized := map[string]string{}
	missed := map[string]bool{}
	err := walkLayer(src, func(hdr *tar.Header, r io.Reader) error {
		name := oci.CleanTarName(hdr.Name)
		// An entry gone above whose content a hardlink of this layer keeps.
		keep := func() error {
			if !capture[name] || hdr.Typeflag != tar.TypeReg {
				return nil
			}
			off, err := s.stageContent(hdr, r)
			captured[name] = entry{hdr: hdr, off: off}
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
		case base == oci.WhiteoutOpaque:
			if !s.opaque[parent] && !s.hidden[parent] {
				s.out = append(s.out, entry{hdr: hdr})
				opaque[parent] = true
			}
			return nil
		case strings.HasPrefix(base, oci.WhiteoutPrefix):
			target := path.Join(parent, strings.TrimPrefix(base, oci.WhiteoutPrefix))
			switch {
			case !s.decided[target]:
				s.out = append(s.out, entry{hdr: hdr})
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
		e := entry{hdr: hdr}
		if hdr.Typeflag == tar.TypeLink {
			target := oci.CleanTarName(hdr.Linkname)
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
				e = entry{hdr: &t, off: c.off}
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
func opaqueMarker(hdr *tar.Header, dir string) entry {
	return entry{hdr: &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(dir, oci.WhiteoutOpaque),
		Mode: 0o644, ModTime: hdr.ModTime, Format: tar.FormatPAX}}
}

// walkLayer reads a layer's tar, calling fn for each entry with a reader of
// its content, then reads the stream to its end, where a Source
// checks it.
func walkLayer(open Source, fn func(*tar.Header, io.Reader) error) error {
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
func writeSquashed(entries []entry, stage *os.File, w io.Writer) error {
	key := func(e entry) string {
		return strings.Replace(oci.CleanTarName(e.hdr.Name), "/"+oci.WhiteoutOpaque, "/\x00", 1)
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

// Verified reads the uncompressed layer r, failing at its end when its
// bytes are not diffID; closing it closes closers.
func Verified(r io.Reader, diffID digest.Digest, closers ...io.Closer) io.ReadCloser {
	return &verifiedLayer{r: r, closers: closers, want: diffID, d: diffID.Algorithm().Digester()}
}

// verifiedLayer is what Verified returns.
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
