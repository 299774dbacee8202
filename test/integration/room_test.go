//go:build integration

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

package integration

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/diskbudget"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// TestCommitNoRoom commits a container whose filesystem change (48 MiB) is
// larger than the room its copy and layer file have (a 64 MiB filesystem,
// which must keep a tenth free): the commit fails before anything is
// frozen, naming the directory and the sizes, leaves nothing there, and the
// containers run on.
func TestCommitNoRoom(t *testing.T) {
	e := requireEnv(t)
	p := e.startPod(t, podContainer{"app", e.dockerBase}, podContainer{"sidecar", e.ociBase})
	p.writeBig(t, "app", "/big", 48<<20)
	small := tmpfs64(t)
	params := p.params(t, true, "app="+e.regA.Host+"/snap/noroom:1", "sidecar="+e.regA.Host+"/snap/noroom-side:1")
	var logged strings.Builder
	c := e.committer(params, func(cfg *committer.Config) {
		cfg.CopyDir, cfg.LayerDir = small, small
		cfg.Log = io.MultiWriter(testLogWriter{}, &logged)
	})

	_, err := c.Commit(context.Background())
	if !errors.Is(err, diskbudget.ErrNoRoom) || !strings.Contains(err.Error(), small) || !strings.Contains(err.Error(), `layer of container "app" 48 MiB`) {
		t.Fatalf("a 48 MiB change copied and layered into 64 MiB: got %v, want %v naming %s and the layer's size", err, diskbudget.ErrNoRoom, small)
	}
	t.Logf("refused: %v", err)
	if strings.Contains(logged.String(), "frozen") {
		t.Errorf("the containers were frozen before the refusal:\n%s", logged.String())
	}
	if left, err := os.ReadDir(small); err != nil || len(left) > 0 {
		t.Errorf("%s holds %v (%v), want nothing", small, left, err)
	}
	e.assertAllRunning(t, p)
}

// TestCommitDiskReserve commits a container whose 8 MiB change fits a 64 MiB
// filesystem beside the default reserve (a tenth) but not beside a
// disk-reserve of 56Mi: the commit fails before anything is frozen, naming
// the reserve it kept, and the containers run on.
func TestCommitDiskReserve(t *testing.T) {
	e := requireEnv(t)
	p := e.startPod(t, podContainer{"app", e.dockerBase})
	p.writeBig(t, "app", "/big", 8<<20)
	small := tmpfs64(t)
	params := p.params(t, true, "app="+e.regA.Host+"/snap/reserve:1")
	var err error
	if params.DiskReserve, err = task.ParseDiskReserve("56Mi"); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	c := e.committer(params, func(cfg *committer.Config) {
		cfg.CopyDir, cfg.LayerDir = small, small
		cfg.Log = io.MultiWriter(testLogWriter{}, &logged)
	})

	_, err = c.Commit(context.Background())
	if !errors.Is(err, diskbudget.ErrNoRoom) || !strings.Contains(err.Error(), "must keep 56 MiB free (disk-reserve 56Mi") {
		t.Fatalf("an 8 MiB change copied and layered into 64 MiB, 56Mi kept free: got %v, want %v naming the reserve", err, diskbudget.ErrNoRoom)
	}
	t.Logf("refused: %v", err)
	if strings.Contains(logged.String(), "frozen") {
		t.Errorf("the containers were frozen before the refusal:\n%s", logged.String())
	}
	e.assertAllRunning(t, p)
}

// TestConcurrentSnapshotsShareRoom commits two pods on one node at once,
// each with a 24 MiB change that fits the shared 64 MiB scratch alone
// (copy and layer, 48 MiB, beside the tenth kept free) but not beside the
// other: the second, checked while the first is frozen, is refused before
// freezing anything, naming what the first reserved, and the first
// succeeds. Once the first's push is over, its reservation
// no longer counts.
func TestConcurrentSnapshotsShareRoom(t *testing.T) {
	e := requireEnv(t)
	pa := e.startPod(t, podContainer{"app", e.ociBase})
	pb := e.startPod(t, podContainer{"app", e.ociBase})
	pa.writeBig(t, "app", "/big", 24<<20)
	pb.writeBig(t, "app", "/big", 24<<20)
	small := tmpfs64(t)
	node := t.TempDir() // checkpoint-dir, which holds the node's disk ledger
	committerOf := func(p *runningPod, repo string, opt func(*committer.Config)) *testCommitter {
		params := p.params(t, true, "app="+e.regA.Host+"/snap/"+repo+":1")
		// The Task pod of each run is the sandbox's own here: it runs.
		params.TaskPodUID = p.uid
		return e.committer(params, func(cfg *committer.Config) { cfg.CopyDir, cfg.LayerDir, cfg.CheckpointDir = small, small, node }, opt)
	}
	var loggedB strings.Builder
	cb := committerOf(pb, "shared-b", func(cfg *committer.Config) { cfg.Log = io.MultiWriter(testLogWriter{}, &loggedB) })
	var errB error
	ca := committerOf(pa, "shared-a", inPause(func(ctx context.Context, _ []*freeze.Container) error {
		_, errB = cb.Commit(context.Background())
		if strings.Contains(loggedB.String(), "frozen") {
			t.Errorf("the second pod was frozen before the refusal:\n%s", loggedB.String())
		}
		return nil
	}))
	if _, err := ca.Commit(context.Background()); err != nil {
		t.Fatalf("the first snapshot: %v", err)
	}
	if !errors.Is(errB, diskbudget.ErrNoRoom) || !strings.Contains(errB.Error(), "other snapshots running on the node have reserved 48 MiB") {
		t.Fatalf("the second snapshot beside the first: got %v, want %v naming the first's 48 MiB", errB, diskbudget.ErrNoRoom)
	}
	t.Logf("refused: %v", errB)
	e.assertAllRunning(t, pb)

	// The first's push is over: its layer file and reservation go.
	if _, _, err := ca.Push(context.Background()); err != nil {
		t.Fatalf("the first snapshot's push: %v", err)
	}
	if _, err := cb.Commit(context.Background()); err != nil {
		t.Fatalf("the second snapshot once the first is over: %v", err)
	}
	if _, _, err := cb.Push(context.Background()); err != nil {
		t.Fatalf("the second snapshot's push: %v", err)
	}
	if left, err := leftIn(node); err != nil || len(left) > 0 {
		t.Errorf("the node's checkpoint-dir holds %v (%v), want no reservation", left, err)
	}
}

// ledgerDir is the directory of checkpoint-dir that holds the node's disk
// ledger.
const ledgerDir = ".disk-ledger"

// leftIn lists what dir holds but the node's disk ledger, and the
// reservations that ledger still holds.
func leftIn(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var left []string
	for _, e := range entries {
		if e.Name() != ledgerDir {
			left = append(left, e.Name())
			continue
		}
		held, err := os.ReadDir(filepath.Join(dir, ledgerDir))
		if err != nil {
			return nil, err
		}
		for _, h := range held {
			if h.Name() != ".lock" {
				left = append(left, filepath.Join(ledgerDir, h.Name()))
			}
		}
	}
	return left, nil
}

// TestCommitPastScratchLimit commits a 48 MiB change with room on the disk
// but a 64 MiB scratch limit (the commit pod's ephemeral-storage): the copy
// and the layer would pass it, so the commit fails before the freeze,
// naming the limit, rather than the kubelet evicting the pod mid-pause.
func TestCommitPastScratchLimit(t *testing.T) {
	e := requireEnv(t)
	p := e.startPod(t, podContainer{"app", e.ociBase})
	p.writeBig(t, "app", "/big", 48<<20)
	var logged strings.Builder
	c := e.committer(p.params(t, true, "app="+e.regA.Host+"/snap/limit:1"), func(cfg *committer.Config) {
		cfg.ScratchLimit = 64 << 20
		cfg.Log = io.MultiWriter(testLogWriter{}, &logged)
	})
	_, err := c.Commit(context.Background())
	if !errors.Is(err, diskbudget.ErrNoRoom) || !strings.Contains(err.Error(), "commit-ephemeral-storage") || !strings.Contains(err.Error(), "writes about 96 MiB to the commit pod's scratch") {
		t.Fatalf("a 48 MiB change under a 64 MiB scratch limit: got %v, want %v naming the limit and the size", err, diskbudget.ErrNoRoom)
	}
	t.Logf("refused: %v", err)
	if strings.Contains(logged.String(), "frozen") {
		t.Errorf("the container was frozen before the refusal:\n%s", logged.String())
	}
	e.assertAllRunning(t, p)
}
