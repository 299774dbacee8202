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

package layerdir

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
)

// TestAsyncWriterKeepsBytesInOrder writes writes of every size, across and
// within blocks, and checks that the writer gets the same bytes in order.
func TestAsyncWriterKeepsBytesInOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 5*asyncBlock+12345)
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	var got bytes.Buffer
	a := newAsyncWriter(&got)
	for p := want; len(p) > 0; {
		k := min(len(p), []int{1, 511, 4096, asyncBlock - 1, asyncBlock, 3 * asyncBlock}[r.IntN(6)])
		if n, err := a.Write(p[:k]); n != k || err != nil {
			t.Fatalf("Write of %d bytes: %d, %v", k, n, err)
		}
		p = p[k:]
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("the writer got %d bytes that differ from the %d written", got.Len(), len(want))
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, errAsyncClosed) {
		t.Errorf("Write after Close: %v, want %v", err, errAsyncClosed)
	}
}

// failingWriter fails every write after its first ok ones.
type failingWriter struct {
	ok  int
	err error
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.ok == 0 {
		return 0, f.err
	}
	f.ok--
	return len(p), nil
}

// TestAsyncWriterReportsWriteErrors checks that a failed write stops the
// producer at a later Write and is what Close returns.
func TestAsyncWriterReportsWriteErrors(t *testing.T) {
	full := errors.New("no space left on device")
	a := newAsyncWriter(&failingWriter{ok: 2, err: full})
	block := make([]byte, asyncBlock)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = a.Write(block)
	}
	if !errors.Is(err, full) {
		t.Fatalf("100 blocks written to a writer failing at its third: Write returned %v, want %v", err, full)
	}
	if cerr := a.Close(); !errors.Is(cerr, full) {
		t.Fatalf("Close: %v, want %v", cerr, full)
	}
}

// BenchmarkLayerFile writes the layer of a directory holding one file of
// random bytes (a checkpoint's memory, or a change that does not compress)
// to a layer file, as a plain tar (a checkpoint's) or gzip (a filesystem
// snapshot's), the file written as the layer is built (async) or by the
// builder itself (direct):
// go test -run - -bench LayerFile -benchtime 3x ./pkg/committer/layerdir/
func BenchmarkLayerFile(b *testing.B) {
	for _, mib := range []int{64, 1024} {
		src := filepath.Join(b.TempDir(), "pages-1.img")
		f, err := os.Create(src)
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.CopyN(f, rand.NewChaCha8([32]byte{byte(mib)}), int64(mib)<<20)
		if err = errors.Join(err, f.Close()); err != nil {
			b.Fatal(err)
		}
		dst := b.TempDir()
		for _, tc := range []struct{ mediaType, name string }{{ocispec.MediaTypeImageLayer, "tar"}, {ocispec.MediaTypeImageLayerGzip, "gzip"}} {
			for _, mode := range []string{"direct", "async"} {
				b.Run(fmt.Sprintf("%dMiB/%s/%s", mib, tc.name, mode), func(b *testing.B) {
					b.SetBytes(int64(mib) << 20)
					for b.Loop() {
						lf, err := newLayerFile(dst)
						if err != nil {
							b.Fatal(err)
						}
						var w io.Writer = lf
						aw := newAsyncWriter(lf)
						if mode == "async" {
							w = aw
						}
						_, _, _, err = oci.WriteLayer(w, func(w io.Writer) error { return tarFile(src, w) }, tc.mediaType)
						if err = errors.Join(err, aw.Close(), lf.Close()); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// tarFile writes a tar holding the file at p alone.
func tarFile(p string, w io.Writer) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fi.Name(), Mode: 0o600, Size: fi.Size()}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return err
	}
	return tw.Close()
}
