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

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/diskbudget"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// Snapshot runs Commit or Checkpoint as the snapshot mode asks, falling back to
// Commit where memory-fallback allows (fallsBack).
func (c *Committer) Snapshot(ctx context.Context) (*CommitResult, error) {
	p := c.cfg.Params
	if p.SnapshotMode != task.SnapshotModeMemory {
		return c.Commit(ctx)
	}
	res, err := c.Checkpoint(ctx)
	if fallsBack(err, p.MemoryFallback) {
		c.log.Printf("pod %s: %v; taking a filesystem snapshot instead (%s=%s)", c.pod, err, task.ParamMemoryFallback, p.MemoryFallback)
		return c.Commit(ctx)
	}
	return res, err
}

// fallsBack tells whether a failed memory snapshot falls back to a filesystem
// one: the node could not checkpoint or had no disk room, and everything was
// thawed.
func fallsBack(err error, fallback string) bool {
	return (errors.Is(err, checkpoint.ErrUnsupported) || errors.Is(err, diskbudget.ErrNoRoom)) &&
		!errors.Is(err, freeze.ErrThawFailed) && fallback == task.MemoryFallbackFilesystem
}
