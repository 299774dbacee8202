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

package checkpoint

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
)

// Record is what the commit step leaves the push step of one container's
// memory snapshot (in the layer directory, Records): where its archive is
// and what its image carries besides the layer.
type Record struct {
	// Archive is the archive's directory, in the checkpoint directory.
	Archive string `json:"archive"`
	// MediaType is the layer's: zstd when the archive compresses, else a
	// plain tar (LayerType).
	MediaType string `json:"mediaType"`
	// Created is when the containers were frozen.
	Created time.Time `json:"created"`
	// CreatedBy is the image history's entry.
	CreatedBy string `json:"createdBy"`
	// Annotations are the manifest's: those containerd's CRI restores by.
	Annotations map[string]string `json:"annotations"`
	// Labels are the containerd image record's.
	Labels map[string]string `json:"labels"`
}

// Records are the records of one run's memory snapshots, left in its layer
// directory, of archives in its checkpoint directory.
type Records struct {
	LayerDir      string
	CheckpointDir string
}

// Path is where the commit step leaves the record of container's memory
// snapshot.
func (r Records) Path(container string) string {
	return filepath.Join(r.LayerDir, "checkpoint-"+container+".json")
}

// Write leaves rec for the push step of container.
func (r Records) Write(container string, rec *Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return os.WriteFile(r.Path(container), b, 0o600)
}

// Read reads the record the commit step left of container's memory
// snapshot; nil when it took none.
func (r Records) Read(container string) (*Record, error) {
	if r.LayerDir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(r.Path(container))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	rec := &Record{}
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("decoding the commit step's checkpoint record: %w", err)
	}
	if r.CheckpointDir == "" {
		return nil, errors.New("the commit step took a memory snapshot, and this step has no checkpoint directory to read it from")
	}
	if rec.Archive == "" || rec.Archive == "." || rec.Archive == ".." || filepath.Base(rec.Archive) != rec.Archive {
		return nil, fmt.Errorf("the commit step's checkpoint record names archive %q, not a directory of %s", rec.Archive, r.CheckpointDir)
	}
	return rec, nil
}

// ArchiveDir is the directory of rec's archive.
func (r Records) ArchiveDir(rec *Record) string {
	return filepath.Join(r.CheckpointDir, rec.Archive)
}

// Remove removes the archive of container's memory snapshot and its
// record: they hold the sandbox's memory.
func (r Records) Remove(container string, rec *Record) error {
	var errs []error
	for _, p := range []string{r.ArchiveDir(rec), r.Path(container)} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// ArchiveLayer returns the descriptor of the layer of the archive in dir.
func ArchiveLayer(dir, mediaType string) (ocispec.Descriptor, error) {
	layer, _, _, err := oci.WriteLayer(io.Discard, func(w io.Writer) error { return TarDir(dir, w) }, mediaType)
	return layer, err
}

// WriteArchiveLayer writes to w the layer of the archive in dir: its files
// as a tar, compressed when mediaType says (oci.Compressor). It returns the
// tar's size and, when it is compressed, its digest; the layer's own digest
// (a plain tar's, its diff ID too) is left to whoever reads w, which hashes
// what it sends or stores.
func WriteArchiveLayer(w io.Writer, dir, mediaType string) (digest.Digest, int64, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	cnt := &oci.CountingWriter{}
	if mediaType == ocispec.MediaTypeImageLayer {
		if err := TarDir(dir, io.MultiWriter(bw, cnt)); err != nil {
			return "", 0, err
		}
		return "", cnt.N, bw.Flush()
	}
	zw, err := oci.Compressor(bw, mediaType)
	if err != nil {
		return "", 0, err
	}
	dg := digest.Canonical.Digester()
	err = TarDir(dir, io.MultiWriter(zw, dg.Hash(), cnt))
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, err
	}
	return dg.Digest(), cnt.N, bw.Flush()
}
