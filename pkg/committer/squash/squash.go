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

// Package squash merges image layers' uncompressed tars into one layer.
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

type entry struct {
	hdr *tar.Header
	off int64
}

// Source opens the uncompressed tar of one layer; it may be called again.
type Source func() (io.ReadCloser, error)

// Layers writes to w one uncompressed layer equal, on any base, to layers
// applied bottom first. Whiteouts and opaque directories stay where they may
// hide base content; a hardlink whose target was replaced or removed above
// becomes a regular file. Contents are staged in a file in dir.
func Layers(layers []Source, dir string, w io.Writer) error {
	stage, err := os.CreateTemp(dir, "squash-")
	if err != nil {
		return err
	}
	defer os.Remove(stage.Name())
	defer stage.Close()
	s := &squasher{stage: stage, decided: map[string]bool{}, hidden: map[string]bool{}, opaque: map[string]bool{}, dirs: map[string]bool{}}
	for k := len(layers) - 1; k >= 0; k-- {
		// Re-read the layer to capture content its hardlinks missed.
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
	// Paths an upper layer removed the subtree of (hidden), hid the lower
	// children of (opaque) or made directories (dirs).
	hidden, opaque map[string]bool
	dirs           map[string]bool
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

// stageContent appends an entry's content to the stage and returns its offset.
func (s *squasher) stageContent(hdr *tar.Header, r io.Reader) (int64, error) {
	off := s.size
	n, err := io.Copy(s.stage, io.LimitReader(r, hdr.Size))
	if err == nil && n != hdr.Size {
		err = fmt.Errorf("%s: %d bytes, want %d", hdr.Name, n, hdr.Size)
	}
	s.size += n
	return off, err
}

// layer merges src below the layers merged so far, staging capture's content.
// It returns, changing nothing, the hardlink targets it needs but lacks.
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
		// keep stages an entry gone above for this layer's hardlinks.
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
				// Removed, then a directory again above: the
				// base's content there stays removed.
				s.out = append(s.out, opaqueMarker(hdr, target))
				opaque[target] = true
			}
			hidden[target] = true
			return nil
		case s.decided[name]:
			if hdr.Typeflag != tar.TypeDir {
				// This file removed what was under name, even
				// if a directory came back above.
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
			// A file hides what lower layers put under it.
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

// walkLayer calls fn per entry, then drains the stream so the Source checks it.
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

// writeSquashed writes the entries sorted by name: directories before their
// contents, an opaque marker first in its directory (an in-order applier
// removes everything there at the marker), and hardlinks last.
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

// Verified returns r, failing at EOF unless its bytes hash to diffID; Close
// closes closers.
func Verified(r io.Reader, diffID digest.Digest, closers ...io.Closer) io.ReadCloser {
	return &verifiedLayer{r: r, closers: closers, want: diffID, d: diffID.Algorithm().Digester()}
}

type verifiedLayer struct {
	r       io.Reader
	closers []io.Closer
	want    digest.Digest
	d       digest.Digester
}

func (v *verifiedLayer) Read(b []byte) (int, error) {
	n, err := v.r.Read(b)
	v.d.Hash().Write(b[:n])
	if errors.Is(err, io.EOF) && v.d.Digest() != v.want {
		return n, fmt.Errorf("layer with diff ID %s read as %s", v.want, v.d.Digest())
	}
	return n, err
}

func (v *verifiedLayer) Close() error {
	var errs []error
	for _, c := range v.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
