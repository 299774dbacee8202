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
	"bytes"
	"crypto/rand"
	"io"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/klauspost/compress/gzip"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
)

func TestConvertUpperTarWhiteoutsAndOpaque(t *testing.T) {
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeChar, Name: "gone"},
		{Typeflag: tar.TypeDir, Name: "keep/", Mode: 0o755},
		{Typeflag: tar.TypeLink, Name: "keep/del.txt", Linkname: "gone"},
		{Typeflag: tar.TypeReg, Name: "keep/new.txt", Mode: 0o644, Size: 3},
		{Typeflag: tar.TypeDir, Name: "redo/", Mode: 0o750},
		{Typeflag: tar.TypeLink, Name: "redo/hl", Linkname: "keep/new.txt"},
		{Typeflag: tar.TypeChar, Name: "dev/null", Devmajor: 1, Devminor: 3},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("abc"))
		}
	}
	_ = tw.Close()
	var out bytes.Buffer
	if err := convertUpperTar(&in, &out, map[string]bool{"redo": true}); err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got = append(got, string(h.Typeflag)+" "+h.Name+" "+h.Linkname+" "+string(b))
	}
	want := []string{
		"0 .wh.gone  ",
		"5 keep/  ",
		"0 keep/.wh.del.txt  ",
		"0 keep/new.txt  abc",
		"5 redo/  ",
		"0 redo/.wh..wh..opq  ",
		"1 redo/hl keep/new.txt ",
		"3 dev/null  ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("converted layer:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestGzipCompressorRoundTrip checks that a gzip layer's compressor gives
// back, through a plain gzip reader, exactly what was written to it in
// writes that cross its blocks.
func TestGzipCompressorRoundTrip(t *testing.T) {
	for _, size := range []int{0, 1, 4096, 3*oci.GzipBlock + 17} {
		in := make([]byte, size)
		_, _ = rand.Read(in[:size/2])
		var z bytes.Buffer
		w, err := oci.Compressor(&z, ocispec.MediaTypeImageLayerGzip)
		if err != nil {
			t.Fatal(err)
		}
		for rest := in; len(rest) > 0; {
			n := min(len(rest), 700_001)
			if _, err := w.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := gzip.NewReader(&z)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		out, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(out, in) {
			t.Errorf("size %d: round trip gave %d bytes, err %v", size, len(out), err)
		}
	}
}

func TestOverlayLayout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		m      mount.Mount
		upper  string
		lowers int
		ok     bool
	}{
		{"overlay", mount.Mount{Type: "overlay", Options: []string{"index=off", "workdir=/s/2/work", "upperdir=/s/2/fs", "lowerdir=/s/1/fs:/s/0/fs"}}, "/s/2/fs", 2, true},
		{"no parent", mount.Mount{Type: "bind", Source: "/s/3/fs", Options: []string{"rw", "rbind"}}, "/s/3/fs", 0, true},
		{"read-only view", mount.Mount{Type: "overlay", Options: []string{"lowerdir=/s/1/fs:/s/0/fs"}}, "", 0, false},
		{"metacopy", mount.Mount{Type: "overlay", Options: []string{"upperdir=/u", "lowerdir=/l", "metacopy=on"}}, "", 0, false},
		{"redirect_dir", mount.Mount{Type: "overlay", Options: []string{"upperdir=/u", "lowerdir=/l", "redirect_dir=on"}}, "", 0, false},
		{"other type", mount.Mount{Type: "btrfs"}, "", 0, false},
	} {
		upper, lowers, ok := overlayLayout([]mount.Mount{tc.m})
		if ok != tc.ok || (ok && (upper != tc.upper || len(lowers) != tc.lowers)) {
			t.Errorf("%s: got %q %v %v", tc.name, upper, lowers, ok)
		}
	}
}
