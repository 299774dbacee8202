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

package oci

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// BenchmarkCompressor compresses a layer of real files (a tar of the first
// 64 MiB of regular files under /usr: binaries, libraries, text) as the
// commit and push steps do, in each layer media type, and reports the
// compressed size as a fraction of the tar.
func BenchmarkCompressor(b *testing.B) {
	in := usrTar(b, 64<<20)
	for _, mediaType := range []string{ocispec.MediaTypeImageLayerGzip, ocispec.MediaTypeImageLayerZstd} {
		b.Run(filepath.Ext(mediaType)[1:], func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			var out CountingWriter
			for b.Loop() {
				out = CountingWriter{}
				w, err := Compressor(&out, mediaType)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := w.Write(in); err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(out.N)/float64(len(in)), "size/tar")
		})
	}
}

// usrTar returns a tar of regular files under /usr, up to limit bytes.
func usrTar(b *testing.B, limit int) []byte {
	b.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir("/usr", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if buf.Len() >= limit {
			return filepath.SkipAll
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil || buf.Len() == 0 {
		b.Fatalf("a tar of /usr: %d bytes, %v", buf.Len(), err)
	}
	return buf.Bytes()
}
