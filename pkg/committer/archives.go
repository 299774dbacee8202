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

// A checkpoint archive holds a sandbox's memory from the commit step's dump
// until the push step has uploaded it; it lives in the commit pod's two
// steps, so that pod owns it. Its name carries the UID of that pod, the
// Task's pod (Params.TaskPodUID): <task-pod-uid>_<run-id>-<container>. Every
// run of the Task on the node sweeps CheckpointDir first (SweepCheckpoints)
// and removes the archives of Task pods none of whose containers runs any
// more, whatever their age. A process that is signalled removes the
// archives it was writing or pushing before it exits (Discard).

// SweepCheckpoints removes from CheckpointDir the checkpoint archives of runs
// that are over: those whose Task pod has no container running (or paused)
// in containerd any more, whatever their age, and those that name no Task
// pod and were last written more than an hour ago. An archive whose pod
// containerd cannot tell about is kept. It only logs what goes wrong: a
// sweep never fails a run.
func (c *Committer) SweepCheckpoints(ctx context.Context) {
	if c.cfg.CheckpointDir == "" {
		return
	}
	checkpoint.Sweep(c.cfg.CheckpointDir, podRuns(ctx, c.client, c.cfg.Namespace), c.log)
}

// Discard is meant for a signal handler, after Abort: it removes the
// checkpoint archives this process was writing or pushing and had not
// removed yet, and their records, and returns how many archives it
// removed; they hold a sandbox's memory, and the run is over. It gives back
// the run's disk reservation too.
func (c *Committer) Discard() int {
	n := c.ws.discard()
	c.room.release()
	return n
}
