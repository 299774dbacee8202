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

// Package oci reads, writes and builds OCI blobs in containerd's content store.
package oci

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

const (
	// LabelUncompressed records a compressed layer's diff ID.
	LabelUncompressed = "containerd.io/uncompressed"
	// LabelGCRefContent prefixes labels naming blobs this one keeps alive.
	LabelGCRefContent = "containerd.io/gc.ref.content"
	// LabelDistributionSource+host names the repositories a blob came from.
	LabelDistributionSource = "containerd.io/distribution.source."
)

// WriteBlob writes b into cs with labels; an existing blob is left as it is.
func WriteBlob(ctx context.Context, cs content.Ingester, desc ocispec.Descriptor, b []byte, labels map[string]string) error {
	var opts []content.Opt
	if labels != nil {
		opts = append(opts, content.WithLabels(labels))
	}
	err := content.WriteBlob(ctx, cs, "sandbox-commit-"+desc.Digest.String(), bytes.NewReader(b), desc, opts...)
	if err != nil && errdefs.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// WriteManifest writes m into cs, labelled so GC keeps its config and layers.
func WriteManifest(ctx context.Context, cs content.Ingester, m ocispec.Manifest) (ocispec.Descriptor, []byte, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return ocispec.Descriptor{}, nil, fmt.Errorf("encoding manifest: %w", err)
	}
	desc := ocispec.Descriptor{MediaType: m.MediaType, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
	gc := map[string]string{LabelGCRefContent + ".config": m.Config.Digest.String()}
	for i, ld := range m.Layers {
		gc[LabelGCRefContent+".l."+strconv.Itoa(i)] = ld.Digest.String()
	}
	if err := WriteBlob(ctx, cs, desc, raw, gc); err != nil {
		return ocispec.Descriptor{}, nil, fmt.Errorf("writing manifest: %w", err)
	}
	return desc, raw, nil
}

// CopyBlob copies blob d of cs to w a MiB at a time: each read is an RPC.
func CopyBlob(ctx context.Context, cs content.Provider, d ocispec.Descriptor, w io.Writer) error {
	ra, err := cs.ReaderAt(ctx, d)
	if err != nil {
		return err
	}
	defer ra.Close()
	_, err = io.CopyBuffer(w, io.NewSectionReader(ra, 0, ra.Size()), make([]byte, 1<<20))
	return err
}

// OpenContent opens blob d of cs for reading, buffered by the MiB.
func OpenContent(ctx context.Context, cs content.Provider, d ocispec.Descriptor) (io.ReadCloser, error) {
	ra, err := cs.ReaderAt(ctx, d)
	if err != nil {
		return nil, err
	}
	return &readCloser{Reader: bufio.NewReaderSize(io.NewSectionReader(ra, 0, ra.Size()), 1<<20), Closer: ra}, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// IngestFile writes file, whose content d describes, into cs with labels.
func IngestFile(ctx context.Context, cs content.Ingester, d ocispec.Descriptor, file string, labels map[string]string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	// A SectionReader hides WriteTo, which sends a gRPC message per 32 KiB.
	err = content.WriteBlob(ctx, cs, "sandbox-ingest-"+d.Digest.String(), io.NewSectionReader(f, 0, d.Size), d, content.WithLabels(labels))
	if errdefs.IsAlreadyExists(err) {
		return nil
	}
	return err
}
