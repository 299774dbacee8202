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

	v1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2stats "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/typeurl/v2"
	"golang.org/x/sys/unix"
)

// ErrNoRoom reports a memory snapshot that the node's disk has no room
// for. It is not ErrMemorySnapshotUnsupported: the node can checkpoint,
// only not this much memory now; the error says where and by how much.
var ErrNoRoom = errors.New("not enough disk space for the memory snapshot")

// reserveFraction is the part of a filesystem a memory snapshot leaves
// free: kubelet's default hard eviction threshold (nodefs.available<10%),
// below which it evicts the node's pods.
const reserveFraction = 10

// fullBelow is the free space under which a filesystem that a failed dump
// wrote to is taken to have filled up: more than CRIU writes at a time.
const fullBelow = 16 << 20

// checkRoom fails with ErrNoRoom, before anything is frozen, when the
// filesystem of CheckpointDir has no room for CRIU's dump of the memory of
// live and still leave reserveFraction of it free. The memory is the
// containers' anonymous (and, on cgroup v2, shared) memory as their cgroups
// count it; a container whose count cannot be read is logged and left out,
// and a dump that fills the disk all the same is told apart afterwards
// (dumpFull). The push step builds the image from the dump without copying
// it.
func (c *Committer) checkRoom(ctx context.Context, live []*liveContainer) error {
	var mem uint64
	for _, l := range live {
		n, err := memoryOf(ctx, l.task)
		if err != nil {
			c.log.Printf("pod %s %s: not checking the disk's room for its memory: %v", c.podRef(), l, err)
			continue
		}
		mem += n
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(c.cfg.CheckpointDir, &fs); err != nil {
		return fmt.Errorf("pod %s: %w", c.podRef(), err)
	}
	if err := room("checkpoint-dir "+c.cfg.CheckpointDir, mem, fs.Bavail*uint64(fs.Bsize), fs.Blocks*uint64(fs.Bsize)); err != nil {
		return fmt.Errorf("pod %s: %w", c.podRef(), err)
	}
	return nil
}

// room fails with ErrNoRoom when writing need bytes to dir, on a filesystem
// of total bytes with free of them free, would leave less than
// reserveFraction of it free.
func room(dir string, need, free, total uint64) error {
	reserve := total / reserveFraction
	if free >= reserve && free-reserve >= need {
		return nil
	}
	return fmt.Errorf("%w: the containers' memory needs about %s in %s, whose filesystem has %s free of %s and must keep %s (a tenth, kubelet's default eviction threshold) free",
		ErrNoRoom, mib(need), dir, mib(free), mib(total), mib(reserve))
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

// mib formats n bytes in MiB.
func mib(n uint64) string {
	return fmt.Sprintf("%d MiB", n>>20)
}
