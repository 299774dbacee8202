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
	"fmt"
	"io"
	"strings"

	"github.com/containerd/containerd/v2/pkg/archive/compression"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/push"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/squash"
)

// squashedWrite returns what writes one layer of the base image's last n
// layers, each checked against its diff ID, and change on top, staged in dir.
func (c *Committer) squashedWrite(ctx context.Context, p *prepared, n int, dir string, change func(io.Writer) error) (func(io.Writer) error, error) {
	var rfs ocispec.RootFS
	if err := json.Unmarshal(p.config["rootfs"], &rfs); err != nil {
		return nil, fmt.Errorf("rootfs: %w", err)
	}
	blobs, err := push.NewBlobs(c.client.ContentStore(), c.ws.layers, c.remoteOptions(ctx))
	if err != nil {
		return nil, err
	}
	sources := push.SourceRepositories(strings.Join(p.sourceRepos, ","), c.cfg.Params.Insecure)
	first := len(p.manifest.Layers) - n
	srcs := make([]squash.Source, 0, n+1)
	for i, d := range p.manifest.Layers[first:] {
		diffID := rfs.DiffIDs[first+i]
		srcs = append(srcs, func() (io.ReadCloser, error) {
			l, _, err := blobs.Layer(ctx, d, sources)
			if err != nil {
				return nil, err
			}
			rc, err := l.Compressed()
			if err != nil {
				return nil, err
			}
			dr, err := compression.DecompressStream(rc)
			if err != nil {
				rc.Close()
				return nil, fmt.Errorf("layer %s: %w", d.Digest, err)
			}
			return squash.Verified(dr, diffID, dr, rc), nil
		})
	}
	srcs = append(srcs, func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(change(pw)) }()
		return pr, nil
	})
	return func(w io.Writer) error { return squash.Layers(srcs, dir, w) }, nil
}
