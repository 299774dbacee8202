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
	"log"
	"path/filepath"
	"strconv"

	v1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2stats "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/cri"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/diskbudget"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
)

// tarEntryBytes bounds what a tar adds to each entry it holds: a header
// block and the padding of the entry's content to a whole block.
const tarEntryBytes = 1024

// scratchMarginFraction is the part of Config.ScratchLimit left to the
// rest of the commit pod's disk use: its logs and containers' layers.
const scratchMarginFraction = 20

// ledgerDir is the directory of CheckpointDir that holds the disk ledger
// every snapshot on the node shares (diskbudget.Ledger).
const ledgerDir = ".disk-ledger"

// room checks and reserves, before the freeze, the node's disk a snapshot
// writes (check), and gives it back when the run is over (release).
type room struct {
	cfg     *Config
	client  *client.Client
	scratch string
	pod     string
	log     *log.Logger
}

// change is the size of a container's filesystem change, as its snapshotter
// counts the active snapshot (the upper directory), and a bound on its tar.
type change struct {
	bytes, tarBytes uint64
}

// changeOf measures the filesystem change of l.
func (r *room) changeOf(ctx context.Context, l *freeze.Container) (change, error) {
	u, err := r.client.SnapshotService(l.Info.Snapshotter).Usage(ctx, l.Info.SnapshotKey)
	if err != nil {
		return change{}, fmt.Errorf("pod %s %s: measuring its filesystem change: %w", r.pod, l, err)
	}
	n := uint64(max(u.Size, 0))
	return change{bytes: n, tarBytes: n + uint64(max(u.Inodes, 0))*tarEntryBytes + tarEntryBytes}, nil
}

// baseOf measures the layers of l's base image: the committed snapshots
// below its active one, as its snapshotter counts them, and a bound on
// their tar.
func (r *room) baseOf(ctx context.Context, l *freeze.Container) (change, error) {
	sn := r.client.SnapshotService(l.Info.Snapshotter)
	var base change
	key := l.Info.SnapshotKey
	for {
		st, err := sn.Stat(ctx, key)
		if err != nil {
			return change{}, fmt.Errorf("pod %s %s: measuring its base image's layers: %w", r.pod, l, err)
		}
		if st.Parent == "" {
			return base, nil
		}
		u, err := sn.Usage(ctx, st.Parent)
		if err != nil {
			return change{}, fmt.Errorf("pod %s %s: measuring its base image's layers: %w", r.pod, l, err)
		}
		n := uint64(max(u.Size, 0))
		base.bytes += n
		base.tarBytes += n + uint64(max(u.Inodes, 0))*tarEntryBytes
		key = st.Parent
	}
}

// check fails with diskbudget.ErrNoRoom, before anything is frozen,
// when the node's disk has no room for what the snapshot of preps writes:
// the copy of each upper directory (CopyDir), each layer file (LayerDir)
// or, with memory, each checkpoint (its dump and rootfs-diff.tar in
// CheckpointDir; for a self-contained one, its whole root filesystem, staged
// in the scratch first), and with KeepLocal the kept copy in containerd (the
// filesystem of the upper directory). What it writes to CopyDir and LayerDir
// must stay within ScratchLimit. Each filesystem must keep a tenth of
// it free, beyond what the other snapshots running on the node reserved:
// with CheckpointDir, which every run on the node mounts, this run's plan is
// checked and reserved in the node's disk ledger there, until the push step
// releases it (release) or the Task pod is over. Memory is the
// containers' anonymous (and, on cgroup v2, shared) memory as their cgroups
// count it; a container whose count cannot be read is logged and left out,
// and a dump that fills the disk all the same is told apart afterwards
// (checkpoint.Dumper.Dump).
func (r *room) check(ctx context.Context, preps []*prepared, memory bool) error {
	var plan diskbudget.Plan
	var scratch uint64
	add := func(dir string, n uint64, what string) {
		if err := plan.Add(dir, n, what); err != nil {
			r.log.Printf("pod %s: %v", r.pod, err)
		}
		if dir != "" && (dir == r.cfg.CopyDir || dir == r.cfg.LayerDir) {
			scratch += n
		}
	}
	for _, p := range preps {
		l := p.live
		ch, err := r.changeOf(ctx, l)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("container %q", l.Target.Container)
		if p.overlay != nil && p.overlay.CopyDir() != "" {
			add(r.cfg.CopyDir, ch.bytes, "copy of the change of "+name)
		}
		image := ch.tarBytes
		if memory {
			mem, err := memoryOf(ctx, l.Task)
			if err != nil {
				r.log.Printf("pod %s %s: not counting its memory against the disk: %v", r.pod, l, err)
			}
			add(r.cfg.CheckpointDir, mem, "memory of "+name)
			if p.selfContained {
				// The whole root filesystem, staged by the squash first.
				base, err := r.baseOf(ctx, l)
				if err != nil {
					return err
				}
				image += base.tarBytes
				add(r.scratch, image, "staged root filesystem of "+name)
			}
			add(r.cfg.CheckpointDir, image, "rootfs-diff.tar of "+name)
			image += mem
		} else {
			add(r.cfg.LayerDir, ch.tarBytes, "layer of "+name)
		}
		if r.cfg.Params.KeepLocal && p.overlay != nil {
			add(p.overlay.Upper(), 2*image, "kept copy of "+name)
		}
	}
	if limit := r.cfg.ScratchLimit; limit > 0 && scratch > limit-limit/scratchMarginFraction {
		return fmt.Errorf("pod %s: %w: the snapshot writes about %s to the commit pod's scratch, more than the pod may write there: %s, its ephemeral-storage limit (config-snapshot commit-ephemeral-storage) less a twentieth",
			r.pod, diskbudget.ErrNoRoom, diskbudget.Size(scratch), diskbudget.Size(limit-limit/scratchMarginFraction))
	}
	var err error
	if r.cfg.CheckpointDir == "" {
		err = plan.Check(nil)
	} else {
		err = r.ledger(ctx).Reserve(r.cfg.Params.TaskPodUID, r.cfg.Params.RunID, &plan)
	}
	if err != nil {
		return fmt.Errorf("pod %s: %w", r.pod, err)
	}
	return nil
}

// release gives back what this run reserved in the node's disk ledger
// (check): Push once its layer files and archives are gone, a failed
// commit once it has removed what it wrote, Discard on a signal.
func (r *room) release() {
	if r.cfg.CheckpointDir == "" {
		return
	}
	if err := r.ledger(context.Background()).Release(r.cfg.Params.TaskPodUID, r.cfg.Params.RunID); err != nil {
		r.log.Printf("pod %s: releasing its disk reservation: %v", r.pod, err)
	}
}

// ledger is the node's disk ledger in CheckpointDir, whose runs are over
// once their Task pod is (podRuns).
func (r *room) ledger(ctx context.Context) diskbudget.Ledger {
	return diskbudget.Ledger{
		Dir:  filepath.Join(r.cfg.CheckpointDir, ledgerDir),
		Runs: podRuns(ctx, r.client, r.cfg.Namespace),
		Logf: r.log.Printf,
	}
}

// memoryOf returns the bytes of memory CRIU dumps of task, as its cgroup
// counts them (memoryIn).
func memoryOf(ctx context.Context, task client.Task) (uint64, error) {
	m, err := task.Metrics(ctx)
	if err != nil {
		return 0, fmt.Errorf("its metrics: %w", err)
	}
	return memoryIn(m.Data)
}

// memoryIn reads the memory CRIU dumps from a task's cgroup metrics:
// anonymous and shared memory on cgroup v2, RSS on cgroup v1.
func memoryIn(data typeurl.Any) (uint64, error) {
	v, err := typeurl.UnmarshalAny(data)
	if err != nil {
		return 0, fmt.Errorf("decoding its metrics: %w", err)
	}
	switch s := v.(type) {
	case *v2stats.Metrics:
		return s.GetMemory().GetAnon() + s.GetMemory().GetShmem(), nil
	case *v1stats.Metrics:
		return s.GetMemory().GetTotalRSS(), nil
	}
	return 0, fmt.Errorf("metrics of unknown type %T", v)
}

// podRuns returns what tells whether a container of the pod whose UID is
// uid (its sandbox included) runs, is paused or is created in containerd
// namespace ns; a pod with none left, or only stopped ones, is over.
func podRuns(ctx context.Context, c *client.Client, ns string) func(uid string) (bool, error) {
	ctx = namespaces.WithNamespace(ctx, ns)
	return func(uid string) (bool, error) {
		list, err := c.Containers(ctx, fmt.Sprintf("labels.%q==%s", cri.LabelPodUID, strconv.Quote(uid)))
		if err != nil {
			return false, fmt.Errorf("listing the containers of task pod %s in containerd namespace %s: %w", uid, ns, err)
		}
		for _, ctr := range list {
			task, err := ctr.Task(ctx, nil)
			if errdefs.IsNotFound(err) {
				continue
			} else if err != nil {
				return false, fmt.Errorf("task pod %s container %s: loading its task: %w", uid, freeze.ShortID(ctr.ID()), err)
			}
			st, err := task.Status(ctx)
			if errdefs.IsNotFound(err) || err == nil && st.Status == client.Stopped {
				continue
			} else if err != nil {
				return false, fmt.Errorf("task pod %s container %s: its task's status: %w", uid, freeze.ShortID(ctr.ID()), err)
			}
			return true, nil
		}
		return false, nil
	}
}
