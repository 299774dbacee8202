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
	"fmt"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/keep"
)

// keepLocal keeps each pushed image in containerd under its digest for a
// resume on this node (keep.Store.Keep), then evicts kept images beyond the
// disk bound.
func (c *Committer) keepLocal(ctx context.Context, pushed []Pushed) error {
	kept := c.keeper()
	for _, p := range pushed {
		name := p.Target.Repository() + "@" + p.Digest
		if err := kept.Keep(ctx, c.workingName(p.Target), name, c.cfg.Params.RunID); err != nil {
			return fmt.Errorf("pod %s container %q: %w", c.podRef(), p.Target.Container, err)
		}
		c.log.Printf("pod %s container %q: kept %s in containerd for a resume on this node", c.podRef(), p.Target.Container, name)
	}
	return kept.Evict(ctx)
}

// keeper returns the store of the images kept on this node.
func (c *Committer) keeper() *keep.Store {
	return keep.New(c.client, c.cfg.KeepLocalMaxBytes, c.log)
}

// Release implements mode=release, run when the snapshot of this run ID is
// deleted (keep.Store.Release).
func (c *Committer) Release(ctx context.Context) (removed, marked int, err error) {
	return c.keeper().Release(c.nsCtx(ctx), c.cfg.Params.RunID)
}
