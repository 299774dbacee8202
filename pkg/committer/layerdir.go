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
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// With Config.LayerDir set, the commit step writes each new compressed
// layer to a file there as well as into containerd's content store, and the
// push step uploads it from that file: containerd, which hashes every byte
// it stores on one core, then only has the unpack for a resume on this node
// to do beside the upload, not also serving the upload's reads.

// layerPath is where a layer with digest d lives in dir.
func layerPath(dir string, d digest.Digest) string {
	return filepath.Join(dir, d.Algorithm().String()+"-"+d.Encoded())
}

// layerFile reports the file of a layer the commit step left in
// Config.LayerDir; "" when there is none.
func (c *Committer) layerFile(d digest.Digest) string {
	if c.cfg.LayerDir == "" || d.Validate() != nil {
		return ""
	}
	p := layerPath(c.cfg.LayerDir, d)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// newLayerFile creates the file a new layer is written to, in dir.
func newLayerFile(dir string) (*layerFileWriter, error) {
	f, err := os.CreateTemp(dir, "layer-")
	if err != nil {
		return nil, err
	}
	return &layerFileWriter{f: f, dir: dir}, nil
}

// layerFileWriter writes a layer to a temporary file and, on commit, names
// it after its digest.
type layerFileWriter struct {
	f         *os.File
	dir       string
	n         int64
	committed bool
}

// Write implements io.Writer.
func (w *layerFileWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.n += int64(n)
	return n, err
}

// commit checks the size and names the file after d, the digest the caller
// computed of what it wrote.
func (w *layerFileWriter) commit(d ocispec.Descriptor) error {
	if d.Size != w.n {
		return fmt.Errorf("layer %s: wrote %d bytes to its file, expected %d", d.Digest, w.n, d.Size)
	}
	if err := w.f.Close(); err != nil {
		return err
	}
	if err := os.Rename(w.f.Name(), layerPath(w.dir, d.Digest)); err != nil {
		return err
	}
	w.committed = true
	return nil
}

// Close removes the file unless it was committed.
func (w *layerFileWriter) Close() error {
	if w.committed {
		return nil
	}
	w.f.Close()
	return os.Remove(w.f.Name())
}

// removeLayerFiles removes the files of the layers of ms from
// Config.LayerDir.
func (c *Committer) removeLayerFiles(ms ...ocispec.Manifest) {
	for _, m := range ms {
		for _, d := range m.Layers {
			if p := c.layerFile(d.Digest); p != "" {
				if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
					c.log.Printf("pod %s: removing layer file: %v", c.podRef(), err)
				}
			}
		}
	}
}
