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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
)

// With Config.LayerDir set, the commit step writes each new compressed
// layer to a file there and not into containerd's content store. The push
// step uploads it from that file, and ingests it into containerd only to
// keep the image for a resume on this node, beside the upload
// (ingestLayerFiles). A layer goes through containerd's content API only
// when it is kept: that costs more than building it (a gRPC message per
// MiB, which containerd hashes again on one core).

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

// newLayer builds the layer (mediaType, writeLayer) of the tar write
// produces: into a file in Config.LayerDir when it is set, written beside
// the build (asyncWriter), else into containerd (buildLayer).
func (c *Committer) newLayer(ctx context.Context, ref string, write func(io.Writer) error, mediaType string) (ocispec.Descriptor, digest.Digest, int64, error) {
	if c.cfg.LayerDir == "" {
		return oci.BuildLayer(ctx, c.client.ContentStore(), ref, write, mediaType)
	}
	var none ocispec.Descriptor
	lf, err := newLayerFile(c.cfg.LayerDir)
	if err != nil {
		return none, "", 0, fmt.Errorf("creating layer file: %w", err)
	}
	defer lf.Close()
	aw := newAsyncWriter(lf)
	layer, diffID, size, err := oci.WriteLayer(aw, write, mediaType)
	if cerr := aw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return none, "", 0, err
	}
	if err := lf.commit(layer); err != nil {
		return none, "", 0, fmt.Errorf("writing layer file: %w", err)
	}
	return layer, diffID, size, nil
}

// ingestLayerFiles writes into containerd's content store the layers of ci
// that the commit step left only as files in Config.LayerDir, so that the
// image can be unpacked and kept on this node.
func (c *Committer) ingestLayerFiles(ctx context.Context, ci *committedImage) error {
	cs := c.client.ContentStore()
	var diffIDs []digest.Digest
	for i, d := range ci.manifest.Layers {
		f := c.layerFile(d.Digest)
		if f == "" {
			continue
		}
		if _, err := cs.Info(ctx, d.Digest); err == nil {
			continue
		}
		if diffIDs == nil {
			raw, err := content.ReadBlob(ctx, cs, ci.manifest.Config)
			if err != nil {
				return fmt.Errorf("reading config %s: %w", ci.manifest.Config.Digest, err)
			}
			var img ocispec.Image
			if err := json.Unmarshal(raw, &img); err != nil {
				return fmt.Errorf("decoding config %s: %w", ci.manifest.Config.Digest, err)
			}
			diffIDs = img.RootFS.DiffIDs
		}
		if i >= len(diffIDs) {
			return fmt.Errorf("config %s has %d diff IDs for %d layers", ci.manifest.Config.Digest, len(diffIDs), len(ci.manifest.Layers))
		}
		if err := oci.IngestFile(ctx, cs, d, f, map[string]string{oci.LabelUncompressed: diffIDs[i].String()}); err != nil {
			return fmt.Errorf("ingesting layer %s: %w", d.Digest, err)
		}
	}
	return nil
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
