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
	"context"
	"errors"
	"fmt"
	"io"
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

// newLayer builds the compressed layer (mediaType) of the tar write produces into
// containerd (buildLayer) and, with Config.LayerDir set, into a file there
// for the push step.
func (c *Committer) newLayer(ctx context.Context, ref string, write func(io.Writer) error, mediaType string) (ocispec.Descriptor, digest.Digest, int64, error) {
	var none ocispec.Descriptor
	var also []io.Writer
	var lf *layerFileWriter
	if c.cfg.LayerDir != "" {
		var err error
		if lf, err = newLayerFile(c.cfg.LayerDir); err != nil {
			return none, "", 0, fmt.Errorf("creating layer file: %w", err)
		}
		defer lf.Close()
		also = append(also, lf)
	}
	layer, diffID, size, err := buildLayer(ctx, c.client.ContentStore(), ref, write, mediaType, also...)
	if err != nil {
		return none, "", 0, err
	}
	if lf != nil {
		if err := lf.commit(layer); err != nil {
			return none, "", 0, fmt.Errorf("writing layer file: %w", err)
		}
	}
	return layer, diffID, size, nil
}

// newLayerFile creates the file a new layer is written to, in dir.
func newLayerFile(dir string) (*layerFileWriter, error) {
	f, err := os.CreateTemp(dir, "layer-")
	if err != nil {
		return nil, err
	}
	return &layerFileWriter{File: f, dir: dir}, nil
}

// layerFileWriter is a new layer's temporary file; commit names it after the
// layer's digest.
type layerFileWriter struct {
	*os.File
	dir       string
	committed bool
}

// commit names the file after d, the descriptor of what was written to it.
func (f *layerFileWriter) commit(d ocispec.Descriptor) error {
	if err := f.File.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), layerPath(f.dir, d.Digest)); err != nil {
		return err
	}
	f.committed = true
	return nil
}

// Close removes the file unless it was committed.
func (f *layerFileWriter) Close() error {
	if f.committed {
		return nil
	}
	f.File.Close()
	return os.Remove(f.Name())
}

// removeLayerFiles removes the files of layers from Config.LayerDir.
func (c *Committer) removeLayerFiles(layers ...ocispec.Descriptor) {
	for _, d := range layers {
		if c.cfg.LayerDir == "" || d.Digest.Validate() != nil {
			continue
		}
		if err := os.Remove(layerPath(c.cfg.LayerDir, d.Digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.log.Printf("pod %s: removing layer file: %v", c.podRef(), err)
		}
	}
}
