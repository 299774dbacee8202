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
	"bufio"
	"context"
	"io"
	"runtime"
	"strings"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// GzipBlock is the gzip block size; each core compresses one block at a time.
const GzipBlock = 1 << 20

// BuildLayer runs WriteLayer into a new blob of cs under ingest ref ref.
func BuildLayer(ctx context.Context, cs content.Store, ref string, write func(io.Writer) error,
	mediaType string) (ocispec.Descriptor, digest.Digest, int64, error) {
	var none ocispec.Descriptor
	w, err := content.OpenWriter(ctx, cs, content.WithRef(ref))
	if err != nil {
		return none, "", 0, err
	}
	defer w.Close()
	if err := w.Truncate(0); err != nil {
		return none, "", 0, err
	}
	desc, diffID, size, err := WriteLayer(w, write, mediaType)
	if err != nil {
		return none, "", 0, err
	}
	err = w.Commit(ctx, desc.Size, desc.Digest, content.WithLabels(map[string]string{LabelUncompressed: diffID.String()}))
	if err != nil && !errdefs.IsAlreadyExists(err) {
		return none, "", 0, err
	}
	return desc, diffID, size, nil
}

// WriteLayer writes write's tar to w, compressed unless mediaType is plain, and
// returns the layer's descriptor, diff ID and uncompressed size.
func WriteLayer(w io.Writer, write func(io.Writer) error, mediaType string) (ocispec.Descriptor, digest.Digest, int64, error) {
	var none ocispec.Descriptor
	if mediaType == ocispec.MediaTypeImageLayer {
		dg := digest.Canonical.Digester()
		cnt := &CountingWriter{}
		bw := bufio.NewWriterSize(w, 1<<20)
		if err := write(io.MultiWriter(bw, dg.Hash(), cnt)); err != nil {
			return none, "", 0, err
		}
		if err := bw.Flush(); err != nil {
			return none, "", 0, err
		}
		return ocispec.Descriptor{MediaType: mediaType, Digest: dg.Digest(), Size: cnt.N}, dg.Digest(), cnt.N, nil
	}
	dg := digest.Canonical.Digester()
	cnt := &CountingWriter{}
	bw := bufio.NewWriterSize(io.MultiWriter(w, dg.Hash(), cnt), 1<<20)
	zw, err := Compressor(bw, mediaType)
	if err != nil {
		return none, "", 0, err
	}
	udg := digest.Canonical.Digester()
	ucnt := &CountingWriter{}
	err = write(io.MultiWriter(zw, udg.Hash(), ucnt))
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return none, "", 0, err
	}
	if err := bw.Flush(); err != nil {
		return none, "", 0, err
	}
	return ocispec.Descriptor{MediaType: mediaType, Digest: dg.Digest(), Size: cnt.N}, udg.Digest(), ucnt.N, nil
}

// Compressor returns a writer for mediaType: fastest zstd or pgzip, all cores.
func Compressor(w io.Writer, mediaType string) (io.WriteCloser, error) {
	if strings.HasSuffix(mediaType, "+zstd") {
		return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	}
	zw, err := pgzip.NewWriterLevel(w, pgzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if err := zw.SetConcurrency(GzipBlock, runtime.GOMAXPROCS(0)); err != nil {
		return nil, err
	}
	return zw, nil
}

// CountingWriter counts the bytes written to it, in N.
type CountingWriter struct{ N int64 }

// Write implements io.Writer.
func (c *CountingWriter) Write(p []byte) (int, error) {
	c.N += int64(len(p))
	return len(p), nil
}
