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

// Package oci writes and reads the blobs of OCI images in containerd's
// content store: blobs and manifests labelled for its garbage collector,
// files ingested as blobs, and layers compressed on every core as they are
// written.
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

// Labels containerd reads on blobs of its content store.
const (
	// LabelUncompressed records a compressed layer's diff ID.
	LabelUncompressed = "containerd.io/uncompressed"
	// LabelGCRefContent prefixes the labels naming the blobs a blob refers
	// to, which containerd's garbage collector keeps while it keeps that one.
	LabelGCRefContent = "containerd.io/gc.ref.content"
	// LabelDistributionSource prefixes the labels naming the repositories,
	// by registry host, that a pulled blob came from.
	LabelDistributionSource = "containerd.io/distribution.source."
)

// WriteBlob writes b, which desc describes, into cs with labels; a blob
// already there is left as it is.
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

// WriteManifest writes manifest m into cs, labelled so that containerd's
// garbage collector keeps its config and layers while it keeps m.
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

// CopyBlob writes a blob of the content store to w.
func CopyBlob(ctx context.Context, cs content.Provider, d ocispec.Descriptor, w io.Writer) error {
	ra, err := cs.ReaderAt(ctx, d)
	if err != nil {
		return err
	}
	defer ra.Close()
	// Large buffers: every content-store read is one RPC.
	_, err = io.CopyBuffer(w, io.NewSectionReader(ra, 0, ra.Size()), make([]byte, 1<<20))
	return err
}

// OpenContent opens a blob of the content store for reading.
func OpenContent(ctx context.Context, cs content.Provider, d ocispec.Descriptor) (io.ReadCloser, error) {
	ra, err := cs.ReaderAt(ctx, d)
	if err != nil {
		return nil, err
	}
	// Each content-store read is one RPC: read in large chunks.
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
	// A section reader, not the file: content.WriteBlob copies from a
	// reader that has WriteTo with it, which writes a gRPC message per
	// 32 KiB, against one per MiB through its own buffer.
	err = content.WriteBlob(ctx, cs, "sandbox-ingest-"+d.Digest.String(), io.NewSectionReader(f, 0, d.Size), d, content.WithLabels(labels))
	if errdefs.IsAlreadyExists(err) {
		return nil
	}
	return err
}
