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

// tarEntryBytes bounds a tar entry's header and padding.
const tarEntryBytes = 1024

// scratchMarginFraction: a twentieth of ScratchLimit stays for the pod's logs.
const scratchMarginFraction = 20

// ledgerDir, in CheckpointDir, holds the node's disk ledger.
const ledgerDir = ".disk-ledger"

// room reserves the disk a snapshot writes (check) and gives it back (release).
type room struct {
	cfg     *Config
	client  *client.Client
	scratch string
	pod     string
	log     *log.Logger
}

// change is the size of a filesystem change and a bound on its tar.
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

// baseOf measures l's base image: the snapshots below its active one.
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

// check fails with diskbudget.ErrNoRoom, before anything is frozen, when the
// node's disk has no room for what the snapshot writes: copies of upper
// directories, layer files or checkpoints, and, with KeepLocal, kept copies.
// What goes to CopyDir and LayerDir must fit in ScratchLimit; with
// CheckpointDir, the plan is reserved in the node's disk ledger until release.
// Memory is what the containers' cgroups count; a count that cannot be read is
// logged and left out.
func (r *room) check(ctx context.Context, preps []*prepared, memory bool) error {
	plan := diskbudget.Plan{Reserve: r.cfg.Params.DiskReserve}
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
				// The squash stages the whole root filesystem.
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

// release gives back this run's reservation in the disk ledger: after Push, a
// failed commit, or Discard.
func (r *room) release() {
	if r.cfg.CheckpointDir == "" {
		return
	}
	if err := r.ledger(context.Background()).Release(r.cfg.Params.TaskPodUID, r.cfg.Params.RunID); err != nil {
		r.log.Printf("pod %s: releasing its disk reservation: %v", r.pod, err)
	}
}

// ledger is the node's disk ledger, whose runs end with their Task pod.
func (r *room) ledger(ctx context.Context) diskbudget.Ledger {
	return diskbudget.Ledger{
		Dir:  filepath.Join(r.cfg.CheckpointDir, ledgerDir),
		Runs: podRuns(ctx, r.client, r.cfg.Namespace),
		Logf: r.log.Printf,
	}
}

// memoryOf returns the memory CRIU dumps of task (memoryIn).
func memoryOf(ctx context.Context, task client.Task) (uint64, error) {
	m, err := task.Metrics(ctx)
	if err != nil {
		return 0, fmt.Errorf("its metrics: %w", err)
	}
	return memoryIn(m.Data)
}

// memoryIn reads that memory from cgroup metrics: anonymous and shared memory
// on cgroup v2, RSS on v1.
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

// podRuns tells whether a pod, by UID, still has a container running, paused or
// created in namespace ns.
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
