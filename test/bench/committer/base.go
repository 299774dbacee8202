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

package main

import (
	"archive/tar"
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
)

// filesPerDir is how many files each generated package directory holds.
const filesPerDir = 10

// words make the generated content compress like source and text files.
var words = strings.Fields(`import return func struct package const error string int64 context the of and
to in is for that with as on by this be are from or an at not which have it was all can will more one
libc python node ruby java chromium cuda runtime library module config version license copyright`)

// largeImage appends to img generated layers holding about totalBytes of
// deterministic, compressible content in nFiles files (usr/lib/pkgNNNN, ten
// files each), with whole-second mtimes as when unpacked from a registry
// tar. The compressed layers are written under dir. It returns the image and
// the regular files of the base.
func largeImage(img v1.Image, dir string, nFiles int, totalBytes int64, layers int) (v1.Image, []string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	// Sizes: 70% small, 25% medium, 5% large; scaled to totalBytes.
	weights := make([]float64, nFiles)
	var sum float64
	for i := range weights {
		switch {
		case i%20 == 7:
			weights[i] = 12
		case i%4 == 1:
			weights[i] = 1
		default:
			weights[i] = 0.25
		}
		sum += weights[i]
	}
	unit := float64(totalBytes) / sum
	files := []string{"bin/busybox"}
	mtime := time.Unix(1700000000, 0)
	dirs := (nFiles + filesPerDir - 1) / filesPerDir
	for l := 0; l < layers; l++ {
		path := filepath.Join(dir, fmt.Sprintf("layer%d.tar.gz", l))
		f, err := os.Create(path)
		if err != nil {
			return nil, nil, err
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		zw, _ := gzip.NewWriterLevel(bw, gzip.BestSpeed)
		tw := tar.NewWriter(zw)
		r := rand.New(rand.NewPCG(uint64(l), 0xba5e))
		for _, d := range []string{"usr/", "usr/lib/"} {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: mtime}); err != nil {
				return nil, nil, err
			}
		}
		for d := l * dirs / layers; d < (l+1)*dirs/layers; d++ {
			dname := fmt.Sprintf("usr/lib/pkg%04d/", d)
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dname, Mode: 0o755, ModTime: mtime}); err != nil {
				return nil, nil, err
			}
			for k := 0; k < filesPerDir && d*filesPerDir+k < nFiles; k++ {
				i := d*filesPerDir + k
				size := int64(weights[i] * unit)
				fname := fmt.Sprintf("%sfile%02d.txt", dname, k)
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fname, Mode: 0o644, Size: size, ModTime: mtime}); err != nil {
					return nil, nil, err
				}
				if err := writeText(tw, r, size); err != nil {
					return nil, nil, err
				}
				files = append(files, fname)
			}
		}
		if err := tw.Close(); err != nil {
			return nil, nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, nil, err
		}
		if err := bw.Flush(); err != nil {
			return nil, nil, err
		}
		if err := f.Close(); err != nil {
			return nil, nil, err
		}
		layer, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{CreatedBy: fmt.Sprintf("generated layer %d", l), Created: v1.Time{Time: mtime}}})
		if err != nil {
			return nil, nil, err
		}
	}
	return img, files, nil
}

// writeText writes size bytes of word soup.
func writeText(w *tar.Writer, r *rand.Rand, size int64) error {
	buf := make([]byte, 0, 64<<10)
	for size > 0 {
		buf = buf[:0]
		for int64(len(buf)) < min(size, 60<<10) {
			buf = append(buf, words[r.IntN(len(words))]...)
			if r.IntN(12) == 0 {
				buf = append(buf, '\n')
			} else {
				buf = append(buf, ' ')
			}
		}
		n := min(int64(len(buf)), size)
		if _, err := w.Write(buf[:n]); err != nil {
			return err
		}
		size -= n
	}
	return nil
}
