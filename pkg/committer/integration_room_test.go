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

package committer

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
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
	small := t.TempDir()
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatalf("mounting a 64 MiB tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(small, 0) })
	params := p.params(t, true, "app="+e.regA.Host+"/snap/noroom:1", "sidecar="+e.regA.Host+"/snap/noroom-side:1")
	c := e.committer(params)
	c.cfg.CopyDir, c.cfg.LayerDir = small, small
	var logged strings.Builder
	c.log.SetOutput(io.MultiWriter(testLogWriter{}, &logged))

	_, err := c.Commit(context.Background())
	if !errors.Is(err, ErrNoRoom) || !strings.Contains(err.Error(), small) || !strings.Contains(err.Error(), `layer of container "app" 48 MiB`) {
		t.Fatalf("a 48 MiB change copied and layered into 64 MiB: got %v, want %v naming %s and the layer's size", err, ErrNoRoom, small)
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
