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

// Package layerdir holds a commit's new layers as files the commit and push
// steps share, taken into containerd's content store only for a kept image.
package layerdir

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

// Dir is the directory of a commit's layer files. Ingesting a layer costs more
// than building it: a gRPC message per MiB, hashed again on one core.
type Dir struct {
	path string
	cs   content.Store
}

// New returns the Dir at path; with path "" it builds new layers into cs.
func New(path string, cs content.Store) *Dir {
	return &Dir{path: path, cs: cs}
}

// Path is where a layer with digest d lives in dir.
func Path(dir string, d digest.Digest) string {
	return filepath.Join(dir, d.Algorithm().String()+"-"+d.Encoded())
}

// File returns the file of layer d in the directory, or "" when there is none.
func (l *Dir) File(d digest.Digest) string {
	if l.path == "" || d.Validate() != nil {
		return ""
	}
	p := Path(l.path, d)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// Build builds the layer of write's tar into a file in the directory, else cs.
func (l *Dir) Build(ctx context.Context, ref string, write func(io.Writer) error, mediaType string) (ocispec.Descriptor, digest.Digest, int64, error) {
	if l.path == "" {
		return oci.BuildLayer(ctx, l.cs, ref, write, mediaType)
	}
	var none ocispec.Descriptor
	lf, err := newLayerFile(l.path)
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

// Ingest writes into cs the layers of m held only as files, to keep the image.
func (l *Dir) Ingest(ctx context.Context, m ocispec.Manifest) error {
	cs := l.cs
	var diffIDs []digest.Digest
	for i, d := range m.Layers {
		f := l.File(d.Digest)
		if f == "" {
			continue
		}
		if _, err := cs.Info(ctx, d.Digest); err == nil {
			continue
		}
		if diffIDs == nil {
			raw, err := content.ReadBlob(ctx, cs, m.Config)
			if err != nil {
				return fmt.Errorf("reading config %s: %w", m.Config.Digest, err)
			}
			var img ocispec.Image
			if err := json.Unmarshal(raw, &img); err != nil {
				return fmt.Errorf("decoding config %s: %w", m.Config.Digest, err)
			}
			diffIDs = img.RootFS.DiffIDs
		}
		if i >= len(diffIDs) {
			return fmt.Errorf("config %s has %d diff IDs for %d layers", m.Config.Digest, len(diffIDs), len(m.Layers))
		}
		if err := oci.IngestFile(ctx, cs, d, f, map[string]string{oci.LabelUncompressed: diffIDs[i].String()}); err != nil {
			return fmt.Errorf("ingesting layer %s: %w", d.Digest, err)
		}
	}
	return nil
}

func newLayerFile(dir string) (*layerFileWriter, error) {
	f, err := os.CreateTemp(dir, "layer-")
	if err != nil {
		return nil, err
	}
	return &layerFileWriter{File: f, dir: dir}, nil
}

// layerFileWriter is a new layer's temp file; commit names it by its digest.
type layerFileWriter struct {
	*os.File
	dir       string
	committed bool
}

func (f *layerFileWriter) commit(d ocispec.Descriptor) error {
	if err := f.File.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), Path(f.dir, d.Digest)); err != nil {
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

// Remove removes the files of layers from the directory.
func (l *Dir) Remove(layers ...ocispec.Descriptor) error {
	var errs []error
	for _, d := range layers {
		if l.path == "" || d.Digest.Validate() != nil {
			continue
		}
		if err := os.Remove(Path(l.path, d.Digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing layer file: %w", err))
		}
	}
	return errors.Join(errs...)
}
