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
	"strings"

	v1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2stats "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/typeurl/v2"
	"golang.org/x/sys/unix"
)

// ErrNoRoom reports a snapshot that the node's disk has no room for. It is
// not ErrMemorySnapshotUnsupported: the node can take it, only not this
// much now; the error says where and by how much.
var ErrNoRoom = errors.New("not enough disk space for the snapshot")

// reserveFraction is the part of a filesystem a snapshot leaves free:
// kubelet's default hard eviction threshold (nodefs.available<10%), below
// which it evicts the node's pods.
const reserveFraction = 10

// fullBelow is the free space under which a filesystem that a failed dump
// wrote to is taken to have filled up: more than CRIU writes at a time.
const fullBelow = 16 << 20

// tarEntryBytes bounds what a tar adds to each entry it holds: a header
// block and the padding of the entry's content to a whole block.
const tarEntryBytes = 1024

// diskUse adds up, by filesystem, what a snapshot will write on the node.
type diskUse struct {
	byDev map[uint64]*fsUse
	devs  []uint64
}

// fsUse is what a snapshot writes to one filesystem: where, and how much.
type fsUse struct {
	dir   string
	what  []string
	bytes uint64
}

// add counts n bytes written to dir for what. It fails, counting nothing,
// where dir cannot be found; an empty dir counts nothing.
func (u *diskUse) add(dir string, n uint64, what string) error {
	if dir == "" || n == 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("not counting %s against the disk: %w", what, err)
	}
	if u.byDev == nil {
		u.byDev = map[uint64]*fsUse{}
	}
	f := u.byDev[st.Dev]
	if f == nil {
		f = &fsUse{dir: dir}
		u.byDev[st.Dev] = f
		u.devs = append(u.devs, st.Dev)
	}
	f.bytes += n
	f.what = append(f.what, fmt.Sprintf("%s %s", what, mib(n)))
	return nil
}

// check fails with ErrNoRoom when a filesystem has no room for what the
// snapshot writes to it above reserveFraction of it.
func (u *diskUse) check() error {
	var errs []error
	for _, dev := range u.devs {
		f := u.byDev[dev]
		var fs unix.Statfs_t
		if err := unix.Statfs(f.dir, &fs); err != nil {
			errs = append(errs, err)
			continue
		}
		what := f.dir + " (" + strings.Join(f.what, ", ") + ")"
		if err := room(what, f.bytes, fs.Bavail*uint64(fs.Bsize), fs.Blocks*uint64(fs.Bsize)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// change is the size of a container's filesystem change, as its snapshotter
// counts the active snapshot (the upper directory), and a bound on its tar.
type change struct {
	bytes, tarBytes uint64
}

// changeOf measures the filesystem change of l.
func (c *Committer) changeOf(ctx context.Context, l *liveContainer) (change, error) {
	u, err := c.client.SnapshotService(l.info.Snapshotter).Usage(ctx, l.info.SnapshotKey)
	if err != nil {
		return change{}, fmt.Errorf("pod %s %s: measuring its filesystem change: %w", c.podRef(), l, err)
	}
	n := uint64(max(u.Size, 0))
	return change{bytes: n, tarBytes: n + uint64(max(u.Inodes, 0))*tarEntryBytes + tarEntryBytes}, nil
}

// checkRoom fails with ErrNoRoom, before anything is frozen, when the
// node's disk has no room for what the snapshot of preps writes: the copy
// of each upper directory (CopyDir), each layer file (LayerDir) or, with
// memory, each checkpoint (its dump and rootfs-diff.tar in CheckpointDir),
// and with KeepLocal the kept copy in containerd (the filesystem of the
// upper directory). Each filesystem must keep reserveFraction of it free.
// Memory is the containers' anonymous (and, on cgroup v2, shared) memory as
// their cgroups count it; a container whose count cannot be read is logged
// and left out, and a dump that fills the disk all the same is told apart
// afterwards (dumpFull).
func (c *Committer) checkRoom(ctx context.Context, preps []*prepared, memory bool) error {
	var u diskUse
	add := func(dir string, n uint64, what string) {
		if err := u.add(dir, n, what); err != nil {
			c.log.Printf("pod %s: %v", c.podRef(), err)
		}
	}
	for _, p := range preps {
		l := p.live
		ch, err := c.changeOf(ctx, l)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("container %q", l.target.Container)
		if p.overlay != nil && p.overlay.copyDir != "" {
			add(c.cfg.CopyDir, ch.bytes, "copy of the change of "+name)
		}
		image := ch.tarBytes
		if memory {
			mem, err := memoryOf(ctx, l.task)
			if err != nil {
				c.log.Printf("pod %s %s: not counting its memory against the disk: %v", c.podRef(), l, err)
			}
			add(c.cfg.CheckpointDir, mem, "memory of "+name)
			add(c.cfg.CheckpointDir, ch.tarBytes, "rootfs-diff.tar of "+name)
			image += mem
		} else {
			add(c.cfg.LayerDir, ch.tarBytes, "layer of "+name)
		}
		if c.cfg.KeepLocal && p.overlay != nil {
			add(p.overlay.upper, 2*image, "kept copy of "+name)
		}
	}
	if err := u.check(); err != nil {
		return fmt.Errorf("pod %s: %w", c.podRef(), err)
	}
	return nil
}

// room fails with ErrNoRoom when writing need bytes to where, on a
// filesystem of total bytes with free of them free, would leave less than
// reserveFraction of it free.
func room(where string, need, free, total uint64) error {
	reserve := total / reserveFraction
	if free >= reserve && free-reserve >= need {
		return nil
	}
	return fmt.Errorf("%w: the snapshot writes about %s to %s, whose filesystem has %s free of %s and must keep %s (a tenth, kubelet's default eviction threshold) free",
		ErrNoRoom, mib(need), where, mib(free), mib(total), mib(reserve))
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

// dumpFull tells whether a dump into dir that failed did so because dir's
// filesystem filled up, and how much it has free.
func dumpFull(dir string) (bool, uint64) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return false, 0
	}
	free := fs.Bfree * uint64(fs.Bsize)
	return free < fullBelow, free
}

// mib formats n bytes in MiB, or KiB below one MiB.
func mib(n uint64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", (n+1023)>>10)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
