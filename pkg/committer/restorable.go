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
	"time"

	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/pkg/reference"
	"github.com/opencontainers/go-digest"
)

// containerd 2.1's CRI restores a checkpoint only after pulling the
// checkpointed container's base image, by the digested name the CRI
// reported for it (its ImageRef, which config.dump carries), every time,
// through containerd's default resolver: anonymously, over HTTPS (plain HTTP
// only from loopback), without the CRI's registry configuration. A base image
// it cannot pull that way makes every resume of the snapshot fail, long after
// the sandbox's pod is gone. baseImagesRestorable finds that out before the
// freeze.

// baseResolveTimeout bounds the resolution of one base image.
const baseResolveTimeout = 30 * time.Second

// baseImagesRestorable fails with ErrMemorySnapshotUnsupported, before
// anything is frozen, when a container's base image cannot be pulled as
// containerd's restore pulls it (pullableAsRestored). An image on a loopback
// registry is the node's own, out of this step's network namespace: it is
// left unchecked, and logged.
func (c *Committer) baseImagesRestorable(ctx context.Context, live []*liveContainer) error {
	for _, l := range live {
		st, err := c.criStatus(ctx, l)
		if err != nil {
			return fmt.Errorf("pod %s %s: %w", c.podRef(), l, err)
		}
		ref := st.GetImageRef()
		if onLoopback(ref) {
			c.log.Printf("pod %s %s: base image %s is on a loopback registry, out of this step's reach: not checked that a restore can pull it", c.podRef(), l, ref)
			continue
		}
		if err := pullableAsRestored(ctx, ref); err != nil {
			return fmt.Errorf("pod %s %s: %w: containerd's restore pulls the container's base image %s anonymously, over HTTPS (plain HTTP only from loopback) and without the node's registry configuration, and so it cannot: %v",
				c.podRef(), l, ErrMemorySnapshotUnsupported, ref, err)
		}
	}
	return nil
}

// pullableAsRestored resolves ref with the resolver containerd's client
// pulls with when given none, the one its CRI restore uses for a
// checkpoint's base image.
func pullableAsRestored(ctx context.Context, ref string) error {
	if _, err := digest.Parse(ref); err == nil {
		return errors.New("the CRI reports it by its ID only, which names no registry")
	}
	ctx, cancel := context.WithTimeout(ctx, baseResolveTimeout)
	defer cancel()
	_, _, err := docker.NewResolver(docker.ResolverOptions{}).Resolve(ctx, ref)
	return err
}

// onLoopback reports whether ref names an image on a loopback registry
// (localhost, 127.0.0.0/8 or ::1).
func onLoopback(ref string) bool {
	spec, err := reference.Parse(ref)
	if err != nil {
		return false
	}
	local, err := docker.MatchLocalhost(spec.Hostname())
	return err == nil && local
}
