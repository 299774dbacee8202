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

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
)

// SweepCheckpoints removes from CheckpointDir the archives of runs whose Task
// pod has no container running or paused any more (checkpoint.Sweep). It only
// logs failures: a sweep never fails a run.
func (c *Committer) SweepCheckpoints(ctx context.Context) {
	if c.cfg.CheckpointDir == "" {
		return
	}
	checkpoint.Sweep(c.cfg.CheckpointDir, podRuns(ctx, c.client, c.cfg.Namespace), c.log)
}

// Discard, for a signal handler after Abort, removes the checkpoint archives
// this process still owns, so that no sandbox's memory stays on disk, and gives
// back the run's disk reservation. It returns how many archives it removed.
func (c *Committer) Discard() int {
	n := c.ws.discard()
	c.room.release()
	return n
}
